/**
 * How a page of a one-word search ordered by relevance reads its books: level by level of the
 * rank, each level's books in id order (plugins/app/listings-repository.ts, walkPageQuery). A
 * word's books all rank alike but for how they hold it (as written, as a prefix, through a typo)
 * and where (title or author): six levels at most, each the books of one rank, so a page needs
 * no rank of the books below it, and a common word's first page reads a few dozen books, not the
 * millions that hold it. Each level is read the cheaper of two ways, by the planner's statistics
 * of the words (`WordFrequencies`): the books in id order, until the page is full (`walk`: quick
 * where the level is dense), or the books that hold the level's word, through its index, sorted
 * (quick where they are few).
 */
import { rankOf } from './db/search-sql.js'
import type { SearchTerm } from './search.js'

/** The fraction of books whose title (`title`) or author (`author`) holds each common word, of `books` counted. */
export interface WordFrequencies {
  title: ReadonlyMap<string, number>
  author: ReadonlyMap<string, number>
  books: number
}

type SearchField = 'title' | 'author'
/** Which of a term's queries (src/search.ts, SearchTerm). */
type TermForm = 'exact' | 'exactOrPrefix' | 'forms'

/** That a book's `field` holds the term in `form`: a condition an index reads. */
interface Holds {
  field: SearchField
  form: TermForm
}

/**
 * A level: the books of rank `rank`, which all hold the term as one of `holds` says, read in id
 * order with that checked on each (`walk`), or through the indexes that read it.
 */
export interface SearchLevel {
  rank: number
  holds: Holds[]
  walk: boolean
}

/**
 * Costs, in µs, measured on the benchmark's database (docs/performance.md, Search): a book read in
 * id order whose field's words are computed to be checked; a book read through the index, whose
 * words are computed for its rank.
 */
const WALKED_BOOK_US = 3
const INDEXED_BOOK_US = 7

/** The estimated fraction of books whose `field` holds `term` in `form`: 0 for words too rare to be among the common ones. */
function share (frequencies: WordFrequencies, field: SearchField, term: SearchTerm, form: TermForm): number {
  const words = frequencies[field]
  let fraction = words.get(term.lexeme) ?? 0
  if (form === 'exact') return fraction
  if (term.prefix) {
    fraction = 0
    for (const [word, frequency] of words) if (word.startsWith(term.lexeme)) fraction += frequency
  }
  if (form === 'exactOrPrefix') return fraction
  return term.typoWords.reduce((sum, word) => sum + (words.get(word) ?? 0), fraction)
}

/**
 * The levels of a one-word search, best first, each with how it is read for a page of `limit`
 * books. The parts of a rank (src/db/search-sql.ts, searchRank) for one word: held as written,
 * held without a typo, held in the title; the proximity of words counts nothing.
 */
export function searchLevels (term: SearchTerm, frequencies: WordFrequencies, limit: number): SearchLevel[] {
  const books = Math.max(frequencies.books, 1)
  const estimate = (field: SearchField, form: TermForm) => share(frequencies, field, term, form)
  const holds = (field: SearchField, form: TermForm): Holds => ({ field, form })
  const inEither = (form: TermForm) => [holds('title', form), holds('author', form)]
  // [as written, without a typo, in the title]; what every book of the level holds, one way or
  // another (the first: in one field, the cheapest to check on each book walked); the level's share
  const levels: Array<[[number, number, number], Holds[][], number]> = [
    [[1, 1, 1], [[holds('title', 'forms')], inEither('exact')], estimate('title', 'exact')],
    [[1, 1, 0], [[holds('author', 'exact')]], estimate('author', 'exact')]
  ]
  if (term.prefix) {
    levels.push([[0, 1, 1], [[holds('title', 'forms')], inEither('exactOrPrefix')], estimate('title', 'exactOrPrefix') - estimate('title', 'exact')])
    levels.push([[0, 1, 0], [[holds('author', 'exactOrPrefix')]], estimate('author', 'exactOrPrefix') - estimate('author', 'exact')])
  }
  if (term.typoWords.length > 0) {
    levels.push([[0, 0, 1], [[holds('title', 'forms')]], estimate('title', 'forms') - estimate('title', 'exactOrPrefix')])
    levels.push([[0, 0, 0], [[holds('author', 'forms')]], estimate('author', 'forms') - estimate('author', 'exactOrPrefix')])
  }
  return levels.map(([[exact, withoutTypo, inTitle], ways, level]) => {
    const walked = level > 0 ? Math.min(books, limit / level) : books
    // Through the indexes, the way that reads the fewest books: a level of a word no book holds
    // as written reads nothing, however many hold it as a prefix
    const held = ways.map((way) => ({ way, books: way.reduce((sum, { field, form }) => sum + estimate(field, form), 0) * books }))
    const fewest = held.reduce((best, each) => each.books < best.books ? each : best)
    const walk = walked * WALKED_BOOK_US < fewest.books * INDEXED_BOOK_US
    return { rank: rankOf([exact, withoutTypo, inTitle, 0]), holds: walk ? ways[0]! : fewest.way, walk }
  })
}

/**
 * How a page of a search ordered by relevance reads its books when it can go level by level of
 * the rank, each level's books in id order (plugins/app/listings-repository.ts, walkPageQuery),
 * so a page needs no rank of the books below it, and a common word's first page reads a few
 * dozen books, not the millions that hold it.
 *
 * A one-word search: a word's books all rank alike but for how they hold it (as written, as a
 * prefix, through a typo) and where (title or author), six levels at most. Each is read the
 * cheaper of two ways, by the planner's statistics of the words (`WordFrequencies`): the books in
 * id order, until the page is full (`walk`: quick where the level is dense), or the books that
 * hold the level's word, through its index, in id order (quick where they are few).
 *
 * A search for one phrase: in the title, then in the author alone, two levels, each read through
 * the indexes of the phrase's words (how many books hold the words next to each other, no
 * statistics say).
 */
import { rankOf } from './db/search-sql.js'
import type { Search, SearchPhrase, SearchTerm } from './search.js'

/** The fraction of books whose title (`title`) or author (`author`) holds each common word, of `books` counted. */
export interface WordFrequencies {
  title: WordShares
  author: WordShares
  books: number
}

/**
 * The fractions of books that hold the common words of a field: one word's, or the sum of those
 * of every word that starts with a prefix. The words are kept sorted, with the sum of the
 * fractions before each, so a prefix's share is two binary searches: a search asks for it at
 * every level it weighs, and the statistics hold thousands of words.
 */
export class WordShares {
  readonly #fractions: ReadonlyMap<string, number>
  readonly #sorted: string[]
  /** The sum of the fractions of the words before each in `#sorted`, and of them all (last). */
  readonly #sumsBefore: Float64Array

  constructor (fractions: Iterable<readonly [string, number]>) {
    this.#fractions = new Map(fractions)
    this.#sorted = [...this.#fractions.keys()].sort()
    this.#sumsBefore = new Float64Array(this.#sorted.length + 1)
    this.#sorted.forEach((word, i) => { this.#sumsBefore[i + 1] = this.#sumsBefore[i]! + this.#fractions.get(word)! })
  }

  /** The fraction of books that hold `word`: 0 for a word too rare to be among the common ones. */
  of (word: string): number {
    return this.#fractions.get(word) ?? 0
  }

  /** The sum of the fractions of the words that start with `prefix` (itself included). */
  startingWith (prefix: string): number {
    // Sorted, the words that start with a prefix lie together, from the first not below it
    const first = this.#firstWhere((word) => word >= prefix, 0)
    const end = this.#firstWhere((word) => !word.startsWith(prefix), first)
    return this.#sumsBefore[end]! - this.#sumsBefore[first]!
  }

  /** The first index from `from` whose word passes `test`, which fails before it and passes after. */
  #firstWhere (test: (word: string) => boolean, from: number): number {
    let low = from
    let high = this.#sorted.length
    while (low < high) {
      const middle = (low + high) >>> 1
      if (test(this.#sorted[middle]!)) high = middle
      else low = middle + 1
    }
    return low
  }
}

type SearchField = 'title' | 'author'
/** Which of a term's queries (src/search.ts, SearchTerm). */
type TermForm = 'exact' | 'exactOrPrefix' | 'forms'

/**
 * That a book's `field` holds `query` (a `tsquery` of the search): a condition an index reads.
 * Then its words include one of `words` (as written, or as a prefix), which its text, folded,
 * contains.
 */
export interface Holds {
  field: SearchField
  query: string
  words: string[]
}

/**
 * A level: the books of rank `rank`, which all hold what one of `holds` says, read in id order
 * with that checked on each (`walk`), or through the indexes that read it.
 */
export interface SearchLevel {
  rank: number
  holds: Holds[]
  walk: boolean
}

/** That a book's `field` holds a term in `form`. */
interface HeldAs {
  field: SearchField
  form: TermForm
}

/**
 * Weights, in the ratio of their costs on the benchmark's database (docs/performance.md, Search):
 * a book read in id order and checked; a book read through the index and sorted. A prefix's
 * share counts only its common words, so the index's weight errs high rather than low: a short
 * prefix's many rare words would otherwise be read through it.
 */
const WALKED_BOOK_WEIGHT = 3
const INDEXED_BOOK_WEIGHT = 7

/** The estimated fraction of books whose `field` holds `term` in `form`: 0 for words too rare to be among the common ones. */
function share (frequencies: WordFrequencies, field: SearchField, term: SearchTerm, form: TermForm): number {
  const words = frequencies[field]
  if (form === 'exact') return words.of(term.lexeme)
  const fraction = term.prefix ? words.startingWith(term.lexeme) : words.of(term.lexeme)
  if (form === 'exactOrPrefix') return fraction
  return term.typoWords.reduce((sum, word) => sum + words.of(word), fraction)
}

/**
 * The levels of a search by relevance, best first, each with how it is read for a page of
 * `limit` books; null where it has none (more than one word or phrase), or, for a word, no
 * statistics say how to read them: then every match is ranked.
 */
export function searchLevels (search: Search, frequencies: WordFrequencies | null, limit: number): SearchLevel[] | null {
  if (search.terms.length === 0 && search.phrases.length === 1) return phraseLevels(search.phrases[0]!)
  if (search.terms.length !== 1 || search.phrases.length > 0 || frequencies === null) return null
  return wordLevels(search.terms[0]!, frequencies, limit)
}

/**
 * The levels of a search for one phrase (the part of a rank that counts the phrases in the title;
 * the others count nothing): the books of its words, each checked for the phrase in id order.
 */
function phraseLevels (phrase: SearchPhrase): SearchLevel[] {
  return [
    { rank: rankOf([0, 0, 1, 0]), holds: [{ field: 'title', query: phrase.everyWord, words: phrase.lexemes }], walk: false },
    { rank: rankOf([0, 0, 0, 0]), holds: [{ field: 'author', query: phrase.everyWord, words: phrase.lexemes }], walk: false }
  ]
}

/**
 * The levels of a one-word search. The parts of a rank (src/db/search-sql.ts, searchRank) for
 * one word: held as written, held without a typo, held in the title; the proximity of words
 * counts nothing.
 */
function wordLevels (term: SearchTerm, frequencies: WordFrequencies, limit: number): SearchLevel[] {
  const books = Math.max(frequencies.books, 1)
  const estimate = (field: SearchField, form: TermForm) => share(frequencies, field, term, form)
  const holds = (field: SearchField, form: TermForm): HeldAs => ({ field, form })
  const inEither = (form: TermForm) => [holds('title', form), holds('author', form)]
  // [as written, without a typo, in the title]; what every book of the level holds, one way or
  // another (the first: in one field, the cheapest to check on each book walked); the level's share
  const levels: Array<[[number, number, number], HeldAs[][], number]> = [
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
    const walk = walked * WALKED_BOOK_WEIGHT < fewest.books * INDEXED_BOOK_WEIGHT
    const way = walk ? ways[0]! : fewest.way
    return {
      rank: rankOf([exact, withoutTypo, inTitle, 0]),
      holds: way.map(({ field, form }) => ({ field, query: term[form], words: form === 'forms' ? [term.lexeme, ...term.typoWords] : [term.lexeme] })),
      walk
    }
  })
}

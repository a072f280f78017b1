/**
 * The SQL of a search (`q`, src/search.ts) that plugins/app/listings-repository.ts runs: the words
 * of its pieces and the known words a typo away from each, then the conditions a book matches
 * and the rank that orders the matches (docs/api.md, Search, says how). A book's words are
 * `search_words_of` its title and of its author (src/db/migrations.ts), which the indexes
 * `books_title_words` and `books_author_words` hold.
 */
import { TYPO_LENGTHS } from '../schemas/search-syntax.js'
import type { Search } from '../search.js'

/**
 * The lowest trigram similarity at which a known word is a candidate for a typo: for words that
 * may be one typo off, just below 0.2, the least similarity of a word one typo away from one of 5
 * letters (pg_trgm counts in float4); where a word may be two off, 0.1, below the 0.11 of two
 * typos from one of 9. Each candidate is then held to the rule itself, by its distance.
 */
const TYPO_CANDIDATE_SIMILARITY = { one: 0.19, two: 0.1 } as const

/**
 * Before `PIECE_WORDS`, in its transaction, for the texts of the pieces whose words may be typos
 * off: the threshold of their candidates. 0.1 only where a word may be two typos off: a text of
 * ASCII alone has no word longer than its runs without a space (folding changes no ASCII character
 * but its case), so one without a run of `TYPO_LENGTHS.two` has none; any other may. At 0.19 the
 * index hands over a sixth of the known words it would at 0.1 (116 for `peace`, not 699 of 60,277).
 */
export function typoCandidates (texts: readonly string[]): string {
  const mayBeTwoOff = texts.some((text) => /\P{ASCII}/u.test(text) || text.split(/\s+/).some((run) => run.length >= TYPO_LENGTHS.two))
  return `SET LOCAL pg_trgm.similarity_threshold = ${mayBeTwoOff ? TYPO_CANDIDATE_SIMILARITY.two : TYPO_CANDIDATE_SIMILARITY.one}`
}

/**
 * The words of each piece ($1, texts; $2, whether its words may match through a typo), in the
 * order they stand, and for each how many typos it may be off by (`typos`: one from $3
 * characters, two from $4, src/schemas/search-syntax.ts `TYPO_LENGTHS`; none for a word with a
 * digit, as `typosFor` there) and the known words (`search_words`) that may be that many typos
 * away: those within twice as many edits, since a swap of two letters is two edits to
 * `levenshtein`. src/search.ts keeps those within the rule.
 */
export const PIECE_WORDS = `SELECT pieces.piece::int4 AS piece, words.lexeme, position::int4 AS position, allowed.typos,
           CASE WHEN allowed.typos = 0 THEN '{}'::text[] ELSE ARRAY(
             SELECT DISTINCT known.word FROM search_words known
             WHERE known.word % words.lexeme
               AND length(known.word) BETWEEN length(words.lexeme) - allowed.typos AND length(words.lexeme) + allowed.typos
               AND levenshtein_less_equal(known.word, words.lexeme, 2 * allowed.typos) <= 2 * allowed.typos
           ) END AS near
         FROM unnest($1::text[], $2::bool[]) WITH ORDINALITY AS pieces (text, typos, piece)
         CROSS JOIN LATERAL unnest(search_words_of(pieces.text)) AS words
         CROSS JOIN LATERAL unnest(words.positions) AS position
         CROSS JOIN LATERAL (SELECT CASE
           WHEN NOT pieces.typos OR words.lexeme ~ '[0-9]' THEN 0
           WHEN length(words.lexeme) >= $4::int4 THEN 2
           WHEN length(words.lexeme) >= $3::int4 THEN 1
           ELSE 0 END AS typos) AS allowed
         ORDER BY piece, position`

/** The words of a book's title and of its author, as the indexes hold them. */
export const FIELD_WORDS = { title: 'search_words_of(title)', author: 'search_words_of(author)' } as const
const { title: TITLE_WORDS, author: AUTHOR_WORDS } = FIELD_WORDS

/**
 * The planner's statistics of the words of titles and of authors (ANALYZE's most common elements
 * of each index's expression, with the fraction of books that hold each), and how many books it
 * counted. Empty before an ANALYZE; none on Citus, whose shards are analyzed on the workers.
 */
export const WORD_STATISTICS = `SELECT stats.tablename AS index, stats.most_common_elems::text::text[] AS words,
           stats.most_common_elem_freqs AS frequencies, books.reltuples::float8 AS books
         FROM pg_stats stats, pg_class books
         WHERE stats.schemaname = 'public' AND stats.tablename IN ('books_title_words', 'books_author_words')
           AND books.oid = 'public.books'::regclass AND stats.most_common_elems IS NOT NULL`

/**
 * What a ranked page joins `books` with: the words of each book's title and author, computed
 * once per book for the rank's many matches (`OFFSET 0` keeps the planner from writing the
 * expression into each of them).
 */
export const BOOK_WORDS = `CROSS JOIN LATERAL (SELECT ${TITLE_WORDS} AS title_words, ${AUTHOR_WORDS} AS author_words OFFSET 0) words`

/** A `tsquery` as a parameter, each text once. */
function queries (parameter: (value: unknown, type: string) => string) {
  const named = new Map<string, string>()
  return (query: string) => {
    if (!named.has(query)) named.set(query, parameter(query, 'tsquery'))
    return named.get(query)!
  }
}

/**
 * The settings of a page ordered by relevance, in its transaction, beside the listing's budget:
 * bitmaps of up to some 200,000 pages kept exact (with the default 4MB, a bitmap of a common
 * word's books turns lossy, and every book of each page it names is checked again, its words
 * computed), and no reading of the whole table, which computes the words of every book, where an
 * index reads the books that hold a word.
 */
export const RANKED_PAGE_SETTINGS = "SET LOCAL work_mem = '32MB'; SET LOCAL enable_seqscan = off"

/** `(query in the title OR in the author)`, the words read from the indexed expressions or from `BOOK_WORDS`. */
function inEitherField (query: string, joined: boolean): string {
  return joined
    ? `(words.title_words @@ ${query} OR words.author_words @@ ${query})`
    : `(${TITLE_WORDS} @@ ${query} OR ${AUTHOR_WORDS} @@ ${query})`
}

/** Up to how many words and phrases a search's match is written as their every share between the two fields. */
const SHARED_UP_TO = 3

/**
 * That a book holds each of `found` (queries) in its title or its author, on the indexed
 * expressions, written as every way they may be shared between the two: the words of the title
 * all in one query and those of the author in another. An index answers `'war' & 'peace'` from
 * the books that hold both; asked for `'war'` and `'peace'` apart, it reads the books of each,
 * 70,735 and 37,026 for 182 that hold both (ten times the time, at ten million books). Beyond
 * `SHARED_UP_TO` the 2^n ways would cost more to plan than they save.
 */
function sharedBetweenFields (found: string[], query: (text: string) => string): string[] {
  if (found.length < 2 || found.length > SHARED_UP_TO) return found.map((text) => inEitherField(query(text), false))
  const all = (texts: string[]) => query(texts.map((text) => `(${text})`).join(' & '))
  const ways: string[] = []
  for (let inTitle = 0; inTitle < 1 << found.length; inTitle++) {
    const title = found.filter((_, i) => (inTitle & (1 << i)) !== 0)
    const author = found.filter((_, i) => (inTitle & (1 << i)) === 0)
    ways.push([
      ...(title.length > 0 ? [`${TITLE_WORDS} @@ ${all(title)}`] : []),
      ...(author.length > 0 ? [`${AUTHOR_WORDS} @@ ${all(author)}`] : [])
    ].join(' AND '))
  }
  return [`(${ways.join(' OR ')})`]
}

/**
 * The conditions a book matches: each term in its title or its author (in one of its forms, or
 * as written: `asWritten`), each phrase in one of them (`positiveOnly`: these alone), no excluded
 * word or phrase in either (`excludedOnly`: these alone). On the indexed expressions, or on
 * `BOOK_WORDS` (`joined`), which computes a book's words once for all of them.
 */
export function searchFilters (
  search: Search, parameter: (value: unknown, type: string) => string,
  { positiveOnly = false, excludedOnly = false, joined = false, asWritten = false } = {}
): string[] {
  const query = queries(parameter)
  const inBook = (text: string) => inEitherField(query(text), joined)
  const found = [...search.terms.map(({ forms, exact }) => asWritten ? exact : forms), ...search.phrases.map(({ query }) => query)]
  return [
    ...(excludedOnly ? [] : joined ? found.map(inBook) : sharedBetweenFields(found, query)),
    ...(positiveOnly ? [] : search.excluded.map((text) => `NOT ${inBook(text)}`))
  ]
}

/** Weights of the parts of a rank: each part counts at most 101 (200 characters hold no more words), below 256. */
const RANK_PARTS = [16_777_216, 65_536, 256, 1] as const

/** The rank of a book whose parts (`searchRank`) count these. */
export function rankOf (parts: readonly [number, number, number, number]): number {
  return parts.reduce((rank, part, i) => rank + part * RANK_PARTS[i]!, 0)
}

/**
 * The rank of a book that matches (`BOOK_WORDS` joined), higher first, each part above the next:
 * how many terms it holds as written; how many it holds without a typo (as written or as a
 * prefix); how many terms and phrases its title holds; and for each two neighbouring terms, 2
 * when they stand next to each other in that order, 1 when within three words of each other.
 */
export function searchRank (search: Search, parameter: (value: unknown, type: string) => string): string {
  const query = queries(parameter)
  const inBook = (text: string) => inEitherField(query(text), true)
  const count = (conditions: string[]) => conditions.length === 0 ? '0' : conditions.map((condition) => `(${condition})::int4`).join(' + ')
  const parts = [
    count(search.terms.map(({ exact }) => inBook(exact))),
    count(search.terms.map(({ exactOrPrefix }) => inBook(exactOrPrefix))),
    count([...search.terms.map(({ forms }) => forms), ...search.phrases.map(({ query }) => query)].map((text) => `words.title_words @@ ${query(text)}`)),
    search.pairs.length === 0
      ? '0'
      : search.pairs.map(({ adjacent, near }) => `CASE WHEN ${inBook(adjacent)} THEN 2 WHEN ${inBook(near)} THEN 1 ELSE 0 END`).join(' + ')
  ]
  return parts.map((part, i) => `(${part})::int8 * ${RANK_PARTS[i]}`).join(' + ')
}

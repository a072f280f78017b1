/**
 * The books of a page of a search ordered by relevance (`q` without `sort`), for the page query
 * of plugins/app/listings-repository.ts (`walkPageQuery`): read level by level of the rank (a
 * search for one word or one phrase, src/search-plan.ts), or every match ranked. Their columns
 * are named `book_<column>` beside `book_rank`; the page names them again.
 */
import { BOOK_COLUMNS } from './books-sql.js'
import type { SqlDialect } from './dialect.js'
import { walkFilters } from './listings-sql.js'
import { BOOK_WORDS, FIELD_WORDS, rankOf, searchFilters, searchRank } from './search-sql.js'
import type { Position, Walk } from '../listing.js'
import type { Search } from '../search.js'
import type { Holds, SearchLevel } from '../search-plan.js'

type Parameter = (value: unknown, type: string) => string

/** A book's columns under names of their own, beside its rank: a ranked page names them again. */
const RANKED_COLUMNS = BOOK_COLUMNS.split(', ').map((column) => `books.${column} AS book_${column}`).join(', ')

/** `text` as a `LIKE` pattern that matches it anywhere in a text. */
const containing = (text: string) => `%${text.replace(/[\\%_]/g, '\\$&')}%`

/**
 * Whether a book may hold what one of `holds` says, checked on its text, far more cheaply than
 * its words are computed: its field's text contains one of the words, ignoring case, or holds a
 * character beyond ASCII. The words of a text of ASCII alone are pieces of it but for their
 * case: `search_fold` changes no ASCII character but its case (`unaccent` has no rule for one).
 */
function mayHold (holds: readonly Holds[], parameter: Parameter): string {
  return `(${holds.map(({ field, words }) =>
    `${field} ILIKE ANY (${parameter(words.map(containing), 'text[]')}) OR octet_length(${field}) <> char_length(${field})`).join(' OR ')})`
}

/**
 * The parts of a page of a search that read its `levels` (src/search-plan.ts), in order, from
 * the level of `position` on: up to `$1` books of a level, with the rank of the level, in id
 * order, after `position`'s id in its own level. Walked: the books in id order, what the level
 * holds checked on each whose text may hold it (`IS TRUE` is no condition that an index reads,
 * so the primary key is read in order, and no further than the page needs). Through the index:
 * the ids of the books that hold what the level holds, sorted (materialized, so that the planner
 * does not read the books in id order instead), then each book read by its id and checked, in
 * that order, until the page is full: the words of a book (for its rank, and a phrase) are
 * computed only for the books the page reads. Sorting ids rather than books took a third less
 * CPU for a phrase of common words (16,349 books hold both). Where the dialect cannot read the
 * books by id in order (`readsHeldBooksById`), the books themselves are sorted.
 */
function levelPages (
  walk: Walk, search: Search, levels: readonly SearchLevel[], position: Position | null, unmoved: string[],
  dialect: SqlDialect, parameter: Parameter
): string[] {
  const rank = searchRank(search, parameter)
  // Where the planner has the words' statistics, it reads them (decompressing the thousands of
  // common words of the field) for each estimate of a query it is given as a constant: a third
  // of the time it planned a page of a one-word search. A level's plan needs no estimate (the
  // way it is read is chosen above, by src/search-plan.ts), so there the query is a value the
  // planner cannot see, a subquery's, which an index reads as well as a constant
  const levelQuery = (query: string) => dialect.estimatesMatches ? `(SELECT ${query})` : query
  const checked = [
    ...searchFilters(search, parameter, { joined: true }), ...walkFilters(walk, null, parameter), ...unmoved
  ]
  return levels.filter((level) => position === null || level.rank <= Number(position.key)).map((level) => {
    const holds = `(${level.holds.map(({ field, query }) => `${FIELD_WORDS[field]} @@ ${levelQuery(parameter(query, 'tsquery'))}`).join(' OR ')})`
    const after = position !== null && level.rank === Number(position.key) ? [`books.id > ${parameter(position.id, 'int8')}`] : []
    const ofLevel = [...checked, `${rank} = ${level.rank}`].join(' AND ')
    const select = (books: string) => `SELECT ${RANKED_COLUMNS}, ${level.rank}::int8 AS book_rank FROM ${books} ${BOOK_WORDS} WHERE`
    if (level.walk) {
      return `(${select('books')} ${[`${mayHold(level.holds, parameter)} AND ${holds} IS TRUE`, ...after].join(' AND ')} AND ${ofLevel} ORDER BY books.id LIMIT $1)`
    }
    const held = [holds, ...after].join(' AND ')
    if (!dialect.readsHeldBooksById) return `(WITH books AS MATERIALIZED (SELECT * FROM books WHERE ${held} ORDER BY id) ${select('books')} ${ofLevel} LIMIT $1)`
    const byId = 'held CROSS JOIN LATERAL (SELECT * FROM books WHERE books.id = held.id OFFSET 0) books'
    return `(WITH held AS MATERIALIZED (SELECT id FROM books WHERE ${held} ORDER BY id) ${select(byId)} ${ofLevel} LIMIT $1)`
  })
}

/**
 * The books of a page ordered by relevance that ranks its matches: the words and phrases to find
 * on the indexed expressions, which the indexes read (the planner intersects the books of those
 * it finds selective; a book is checked against them only where an index cannot tell: a
 * phrase), the excluded ones on the words computed once per book. The books that hold every
 * word as written rank above all others (the first part of a rank): they are ranked first, on
 * their own, and the others (through a prefix or a typo, whose forms may be held by many more
 * books) only when a page goes beyond them.
 */
function rankedPage (walk: Walk, search: Search, position: Position | null, unmoved: string[], parameter: Parameter): string {
  const rank = searchRank(search, parameter)
  const others = [...searchFilters(search, parameter, { excludedOnly: true, joined: true }), ...walkFilters(walk, null, parameter), ...unmoved]
  let after = ''
  if (position !== null) {
    const at = parameter(position.key, 'int8')
    after = ` WHERE book_rank < ${at} OR (book_rank = ${at} AND book_id > ${parameter(position.id, 'int8')})`
  }
  const best = (conditions: string[]) => `SELECT * FROM (SELECT ${RANKED_COLUMNS}, ${rank} AS book_rank FROM books ${BOOK_WORDS}` +
    ` WHERE ${[...conditions, ...others].join(' AND ')} OFFSET 0) matches${after} ORDER BY book_rank DESC, book_id LIMIT $1`
  const found = searchFilters(search, parameter, { positiveOnly: true })
  if (search.terms.length === 0) return best(found)
  const notAllAsWritten = `NOT (${searchFilters(search, parameter, { positiveOnly: true, asWritten: true, joined: true }).join(' AND ')})`
  const rest = best([...found, notAllAsWritten])
  // The books with every word as written rank from this up: a position below it is past them all
  if (position !== null && Number(position.key) < rankOf([search.terms.length, 0, 0, 0])) return rest
  return `SELECT * FROM ((${best(searchFilters(search, parameter, { positiveOnly: true, asWritten: true }))}) UNION ALL (${rest})) parts LIMIT $1`
}

/**
 * The books of a page of a search by relevance after `position`: through `levels` where the
 * search has them, else every match ranked. `unmoved`: the conditions that leave out the
 * books changed since the walk began.
 */
export function rankedBooks (
  walk: Walk, search: Search, position: Position | null, unmoved: string[], levels: readonly SearchLevel[] | null,
  dialect: SqlDialect, parameter: Parameter
): string {
  // A subquery: a page of one level is a parenthesized query with a LIMIT of its own
  return levels === null
    ? rankedPage(walk, search, position, unmoved, parameter)
    : `SELECT * FROM (${levelPages(walk, search, levels, position, unmoved, dialect, parameter).join(' UNION ALL ')}) levels LIMIT $1`
}

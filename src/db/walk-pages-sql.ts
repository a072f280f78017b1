/**
 * The statements of a walk's pages (src/listing.ts) that plugins/app/listings-repository.ts
 * runs: a page in the walk's order after its position, with its filters and search, and the
 * planner's estimate of a walk's matches. Built from fixed pieces (src/db/listings-sql.ts,
 * src/db/search-sql.ts, src/db/ranked-pages-sql.ts); every value is a parameter.
 */
import { BOOK_COLUMNS } from './books-sql.js'
import type { SqlDialect } from './dialect.js'
import { CHANGED_BY, SORT_KEYS, pageText, walkFilters, type PageFormat } from './listings-sql.js'
import { rankedBooks } from './ranked-pages-sql.js'
import type { Position, Walk } from '../listing.js'
import type { Search } from '../search.js'
import type { SearchLevel } from '../search-plan.js'

/** The planner's estimate of how many books match a walk's filters (`EXPLAIN`, no rows read). */
export function matchesEstimateQuery (walk: Walk, search: Search | null): { text: string, values: unknown[] } {
  const values: unknown[] = []
  const parameter = (value: unknown, type: string) => `$${values.push(value)}::${type}`
  return { text: `EXPLAIN (FORMAT JSON) SELECT 1 FROM books WHERE ${walkFilters(walk, search, parameter).join(' AND ')}`, values }
}

/**
 * The statement of one page of a walk (src/listing.ts): up to `limit` books of its filters and
 * search, in its order, after `position`, written as `format` writes them. Built from fixed
 * pieces; every value is a parameter.
 *
 * A keyset page: after the book with sort key k and id i come the other books with key k and
 * a higher id, then those with a key beyond k. Each of the two is one range of an index of the
 * sort (src/db/migrations.ts), read from where the walk stands, so a deep page costs what the
 * first does; the second is not read at all when the first fills the page.
 *
 * When sorting by a field, the first page also answers its snapshot, and later pages leave out
 * the books whose sort field a transaction changed that the snapshot does not see as committed:
 * such a book may have been listed already at its old place. A book whose sort field did not
 * change stays in its place, and is listed exactly once. A transaction id beyond any this server
 * has issued comes from another cluster (a restored dump): it is no change made during the walk.
 * Not on Citus: there the CTE that reads the server's transactions would run on each worker,
 * whose ids are not the coordinator's, and let changed books through (`issuedTransactions` of
 * src/db/dialect.ts; docs/deployment.md, Citus).
 *
 * `matchesFirst` (a substring filter that matches few books, in another order than id): the
 * books that match are found first, through the trigram indexes, and sorted, rather than the
 * order's index read until the page is full. `OFFSET 0` keeps the planner from reading the
 * matches in the order's index: then a page costs what the matches do, however they lie in the
 * order (plugins/app/listings-repository.ts, `readsMatchesFirst`).
 *
 * Ordered by relevance (a search without `sort`), a page reads the matches first (through the
 * indexes: the planner intersects the books of the words it finds selective), ranks each
 * (src/db/search-sql.ts `searchRank`) and keeps the best after the position: no index holds the
 * rank, which depends on the search. Or, given `levels` (a one-word search: src/search-plan.ts),
 * it reads level after level from the position's, each level's books in id order, walked or
 * through an index, until the page is full. The rank depends on nothing but the book and the
 * search, so an unchanged book keeps its place in the order from page to page.
 */
export function walkPageQuery (
  walk: Walk, search: Search | null, position: Position | null, limit: number, format: PageFormat, dialect: SqlDialect,
  { matchesFirst = false, levels = null }: { matchesFirst?: boolean, levels?: SearchLevel[] | null } = {}
): { text: string, values: unknown[] } {
  const values: unknown[] = [limit]
  const parameter = (value: unknown, type: string) => `$${values.push(value)}::${type}`
  const ranked = walk.field === 'relevance'
  // A ranked page has filters of its own (below); a parameter the statement does not use has no type
  const filters = ranked ? [] : walkFilters(walk, search, parameter)
  const key = SORT_KEYS[walk.field]
  const direction = walk.descending !== ranked ? ' DESC' : ''
  const order = walk.field === 'id' ? `id${direction}` : `${key}${direction}, id`
  const last = walk.field === 'id' ? `id${direction === '' ? ' DESC' : ''}` : `${key}${direction === '' ? ' DESC' : ''}, id DESC`
  const select = (conditions: string[], orderBy: string) => `SELECT ${BOOK_COLUMNS} FROM books` +
    (conditions.length === 0 ? '' : ` WHERE ${conditions.join(' AND ')}`) + orderBy
  const sortedBy = (orderBy: string) => ` ORDER BY ${orderBy} LIMIT $1`
  let unmoved: string[] = []
  if (walk.field !== 'id' && position !== null) {
    const snapshot = parameter(position.snapshot, 'pg_snapshot')
    const beyondIssued = (changedBy: string) => dialect.issuedTransactions === null ? '' : ` OR ${dialect.issuedTransactions.beyond(changedBy)}`
    unmoved = CHANGED_BY[walk.field].map((changedBy) => `(${changedBy} IS NULL OR pg_visible_in_snapshot(${changedBy}, ${snapshot})${beyondIssued(changedBy)})`)
  }
  let books: string
  if (ranked) {
    books = rankedBooks(walk, search!, position, unmoved, levels, dialect, parameter)
  } else if (position === null) {
    books = matchesFirst
      ? `SELECT * FROM (${select(filters, ' OFFSET 0')}) matches${sortedBy(order)}`
      : select(filters, sortedBy(order))
  } else if (walk.field === 'id') {
    books = select([...filters, `id ${walk.descending ? '<' : '>'} ${parameter(position.id, 'int8')}`], sortedBy(order))
  } else {
    const at = parameter(position.key, walk.field === 'year' ? 'int4' : 'text')
    const id = parameter(position.id, 'int8')
    const beyond = `${key} ${walk.descending ? '<' : '>'} ${at}`
    books = matchesFirst
      ? `SELECT * FROM (${select([...filters, ...unmoved, `(${beyond} OR (${key} = ${at} AND id > ${id}))`], ' OFFSET 0')}) matches${sortedBy(order)}`
      : `(${select([...filters, ...unmoved, `${key} = ${at}`, `id > ${id}`], sortedBy('id'))}) UNION ALL ` +
        `(${select([...filters, ...unmoved, beyond], sortedBy(order))}) LIMIT $1`
  }
  // CTEs that read no table: the snapshot that starts a walk, which Citus runs on the coordinator
  // (whose transactions mark the changes) before any shard is read (it reads each shard at its own
  // moment: a snapshot taken after the reads could see a change that a read missed); or the
  // transactions issued so far
  const walkStart = walk.field !== 'id' && position === null
  const cte = walkStart
    ? 'WITH start AS MATERIALIZED (SELECT pg_current_snapshot()::text AS snapshot) '
    : position?.snapshot == null ? '' : dialect.issuedTransactions?.cte ?? ''
  const text = `${cte}SELECT count(*)::int4 AS count,
           ${pageText(format, order)} AS text,
           (array_agg(id ORDER BY ${last}))[1]::text AS last_id` +
    (walk.field === 'id' ? '' : `, (array_agg(${ranked ? key : walk.field}::text ORDER BY ${last}))[1] AS last_key`) +
    (walkStart ? ', (SELECT snapshot FROM start) AS snapshot' : '') +
    (ranked
      ? ` FROM (${books}) ranked CROSS JOIN LATERAL (SELECT ${BOOK_COLUMNS.split(', ').map((column) => `book_${column} AS ${column}`).join(', ')}) page`
      : ` FROM (${books}) page`)
  return { text, values }
}

/**
 * Adds `fastify.listingsRepository`, made by `createListingsRepository` (below) on the pool of
 * @fastify/postgres once migrate has brought the tables up to date: the pages of `GET /books`,
 * every book in id order or a walk (src/listing.ts), and the pages a long listing reads ahead
 * (src/listing-stream.ts), each written by PostgreSQL in the format the listing answers (the
 * envelope's JSON, CSV or NDJSON: `PageFormat`); the CSV pages of every book in id order (an
 * export) are COPY's own output (src/db/copy-out.ts), which costs PostgreSQL far less than
 * writing them in a query (docs/performance.md, Bulk import and export). Every page query runs
 * within `fastify.readBudget` (plugins/app/read-budget.ts), counted for the client that asked; a
 * page with a filter runs within LISTING_BUDGET_MS (`budgetedQuery`, below). The statements:
 * src/db/listings-sql.ts.
 */
import type { PostgresDb } from '@fastify/postgres'
import type { QueryResult, QueryResultRow } from 'pg'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { batched } from '../../src/db/batch.js'
import { BOOK_COLUMNS } from '../../src/db/books-sql.js'
import { CHANGED_BY, LISTING_PAGE, LISTING_PAGE_BEYOND, SORT_KEYS, copyPageAfter, copyPageBeyond, pageText, walkFilters, type PageFormat } from '../../src/db/listings-sql.js'
import {
  BOOK_WORDS, FIELD_WORDS, PIECE_WORDS, RANKED_PAGE_SETTINGS, TYPO_CANDIDATES, WORD_STATISTICS, rankOf, searchFilters, searchRank
} from '../../src/db/search-sql.js'
import { boundedCopyOut, boundedQueryOn, boundedTransaction } from '../../src/db/bounded-query.js'
import type { SqlDialect } from '../../src/db/dialect.js'
import { ListingOverBudget, hasFilter, type Position, type Walk } from '../../src/listing.js'
import type { ListingPage, PageBeyond } from '../../src/listing-stream.js'
import type { Tracing } from '../../src/tracing.js'
import { SearchWithoutWords, searchOf, type PieceWord, type Search } from '../../src/search.js'
import { TYPO_LENGTHS, searchPieces } from '../../src/schemas/search-syntax.js'
import { searchLevels, type SearchLevel, type WordFrequencies } from '../../src/search-plan.js'

declare module 'fastify' {
  interface FastifyInstance {
    listingsRepository: ReturnType<typeof createListingsRepository>
  }
}

/**
 * Below this many books that the planner expects a substring filter to match, a page sorted by
 * a field reads the matches first (`walkPageQuery`): reading and sorting that many matches costs
 * little, while reading the order's index until a page is full is quick where the matches lie
 * evenly and long where they lie far along the order (an author's books, newest first); the
 * figures are in docs/performance.md, The list at any size.
 */
const MATCHES_FIRST_BELOW = 30_000

/** How long the planner's statistics of the words serve a search before they are read again. */
const WORD_STATISTICS_MS = 60_000

/** The planner's estimate of how many books match a walk's filters (`EXPLAIN`, no rows read). */
function matchesEstimateQuery (walk: Walk, search: Search | null): { text: string, values: unknown[] } {
  const values: unknown[] = []
  const parameter = (value: unknown, type: string) => `$${values.push(value)}::${type}`
  return { text: `EXPLAIN (FORMAT JSON) SELECT 1 FROM books WHERE ${walkFilters(walk, search, parameter).join(' AND ')}`, values }
}

/** SQLSTATE query_canceled: what `statement_timeout` ends a statement with. */
const CANCELED_SQLSTATE = '57014'

/** Whether a failure is the server's cancel at the budget: the connection is kept (src/db/bounded-query.ts). */
const overBudget = (err: unknown) => (err as { code?: string }).code === CANCELED_SQLSTATE

/**
 * The bounds of a filtered page's transaction, before its statement: the server cancels it after
 * `budgetMs`, and runs it in its own backend alone (no parallel workers, each of which would
 * spend the budget again on another core). `SET LOCAL` ends with the transaction, as the bounds
 * of every statement do (src/db/time-bounds.ts): nothing is left in a session a pooler shares.
 */
function budgetSettings (budgetMs: number): string {
  return `SET LOCAL statement_timeout = ${budgetMs}; SET LOCAL max_parallel_workers_per_gather = 0`
}

/** The first page of a plain listing, asked for with others in one statement. */
interface FirstPage {
  limit: number
  format: PageFormat
}

interface WalkPageRow {
  count: number
  text: string
  last_id: string | null
  last_key?: string | null
  snapshot?: string
}

/** A book's columns under names of their own, beside its rank: a ranked page names them again. */
const RANKED_COLUMNS = BOOK_COLUMNS.split(', ').map((column) => `books.${column} AS book_${column}`).join(', ')

/**
 * The parts of a page of a one-word search that read its `levels` (src/search-plan.ts), in
 * order, from the level of `position` on: up to `$1` books of a level, with the rank of the
 * level, in id order, after `position`'s id in its own level. Walked: the books in id order, the
 * level's word checked on each (`IS TRUE` is no condition that an index reads, so the primary key
 * is read in order, and no further than the page needs). Through the index: the books that hold
 * the level's word, then sorted (`OFFSET 0` keeps the planner from reading them in id order).
 */
function levelPages (
  walk: Walk, search: Search, levels: readonly SearchLevel[], position: Position | null, unmoved: string[],
  parameter: (value: unknown, type: string) => string
): string[] {
  const term = search.terms[0]!
  const rank = searchRank(search, parameter)
  const others = [...walkFilters(walk, null, parameter), ...searchFilters(search, parameter, { excludedOnly: true }), ...unmoved]
  return levels.filter((level) => position === null || level.rank <= Number(position.key)).map((level) => {
    const holds = `(${level.holds.map(({ field, form }) => `${FIELD_WORDS[field]} @@ ${parameter(term[form], 'tsquery')}`).join(' OR ')})`
    const after = position !== null && level.rank === Number(position.key) ? [`books.id > ${parameter(position.id, 'int8')}`] : []
    const conditions = [level.walk ? `(${holds}) IS TRUE` : holds, ...others, ...after, `${rank} = ${level.rank}`].join(' AND ')
    const select = `SELECT ${RANKED_COLUMNS}, ${level.rank}::int8 AS book_rank FROM books ${BOOK_WORDS} WHERE ${conditions}`
    return level.walk
      ? `(${select} ORDER BY books.id LIMIT $1)`
      : `(SELECT * FROM (${select} OFFSET 0) level ORDER BY book_id LIMIT $1)`
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
function rankedPage (walk: Walk, search: Search, position: Position | null, unmoved: string[], parameter: (value: unknown, type: string) => string): string {
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
 * order (`readsMatchesFirst`).
 *
 * Ordered by relevance (a search without `sort`), a page reads the matches first (through the
 * indexes: the planner intersects the books of the words it finds selective), ranks each
 * (src/db/search-sql.ts `searchRank`) and keeps the best after the position: no index holds the
 * rank, which depends on the search. Or, given `levels` (a one-word search: src/search-plan.ts),
 * it reads level after level from the position's, each level's books in id order, walked or
 * through an index, until the page is full. The rank depends on nothing but the book and the
 * search, so an unchanged book keeps its place in the order from page to page.
 */
function walkPageQuery (
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
  if (ranked && levels !== null) {
    // A subquery: a page of one level is a parenthesized query with a LIMIT of its own
    books = `SELECT * FROM (${levelPages(walk, search!, levels, position, unmoved, parameter).join(' UNION ALL ')}) levels LIMIT $1`
  } else if (ranked) {
    books = rankedPage(walk, search!, position, unmoved, parameter)
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

/**
 * The listings' SQL. Ids are passed as the decimal strings `isBookId` accepted; the first pages
 * of listings that start together are one statement (src/db/batch.ts), later pages each their own.
 *
 * Every page query (the first pages too) runs through `readBudget`, which lets only a part of the
 * pool's connections read listings, and the feeds that catch up, at once: a thousand listings then
 * wait for their next page in this process's queue (one query at most per listing, without a
 * time limit), not in the pool's queue ahead of everyone else, where the 2 s connection bound
 * cut them off and everyone else waited behind them. Each page counts for the client address it
 * is read for (`client`), which holds at most its share of that part (src/listing-slots.ts); the
 * batched first pages of plain listings count for none.
 */
function createListingsRepository (pg: PostgresDb, readBudget: FastifyInstance['readBudget'], dialect: SqlDialect, budgetMs: number, tracing: Tracing) {
  const query = boundedQueryOn(pg.pool)
  const { slots } = readBudget
  const budget = budgetSettings(budgetMs)

  /**
   * A page of a listing with a filter, whose cost no index bounds (a text that no trigram
   * narrows, a trigram that most titles hold, an order read far for few matches): cancelled by
   * the server once it has run `budgetMs`, which is `ListingOverBudget`.
   */
  async function budgetedQuery<R extends QueryResultRow> (text: string, values: unknown[], settings: string | null = null): Promise<QueryResult<R>> {
    try {
      const bounds = settings === null ? budget : `${budget}; ${settings}`
      const [, result] = await boundedTransaction<[QueryResultRow, R]>(pg.pool, [{ text: bounds }, { text, values }], overBudget)
      return result
    } catch (err) {
      throw overBudget(err) ? new ListingOverBudget(budgetMs) : err
    }
  }

  /** A page of every book in id order as it is read: the id it ends with (and starts after, read ahead). */
  interface IdPage { count: number, last: string | null, text: string | Buffer, after?: string | null }
  const atId = (id: string | null): Position | null => id === null ? null : { key: null, id, snapshot: null }

  async function pageAfter (afterId: string, limit: number, client: string | null, format: PageFormat, signal?: AbortSignal): Promise<ListingPage> {
    const run = client === null ? readBudget : readBudget.of(client)
    const { count, last, text } = await run<IdPage>(() => {
      // A listing whose client left while this waited for its turn needs it no more
      signal?.throwIfAborted()
      return format === 'csv'
        ? boundedCopyOut(pg.pool, copyPageAfter(afterId, limit), { rows: limit })
        : query<{ count: number, last_id: string | null, text: string }>(LISTING_PAGE[format], [afterId, limit])
          .then(({ rows: [row] }) => ({ count: row!.count, last: row!.last_id, text: row!.text }))
    })
    return { count, last: atId(last), text }
  }

  async function pageBeyond (after: Position, skip: number, limit: number, client: string, format: PageFormat, signal?: AbortSignal): Promise<PageBeyond> {
    const { after: startsAfter = null, count, last, text } = await readBudget.of(client)<IdPage>(() => {
      signal?.throwIfAborted()
      return format === 'csv'
        ? boundedCopyOut(pg.pool, copyPageBeyond(after.id, skip, limit), { startsAfter: true, rows: limit + 1 })
        : query<{ after_id: string | null, count: number, last_id: string | null, text: string }>(LISTING_PAGE_BEYOND[format], [after.id, skip, limit])
          .then(({ rows: [row] }) => ({ after: row!.after_id, count: row!.count, last: row!.last_id, text: row!.text }))
    })
    return { after: startsAfter, count, last: atId(last), text }
  }

  /**
   * The search `q` asks for: its pieces split into words by PostgreSQL, each with the known words
   * a typo away from it. `SearchWithoutWords` when it has none to find.
   */
  async function searchFor (q: string): Promise<Search> {
    const pieces = searchPieces(q)
    const [, { rows }] = await boundedTransaction<[QueryResultRow, PieceWord & { piece: number }]>(pg.pool, [
      { text: TYPO_CANDIDATES },
      { text: PIECE_WORDS, values: [pieces.map(({ text }) => text), pieces.map(({ phrase, excluded }) => !phrase && !excluded), TYPO_LENGTHS.one, TYPO_LENGTHS.two] }
    ])
    const words = pieces.map((): PieceWord[] => [])
    // In the order of the pieces and of their words
    for (const row of rows) words[row.piece - 1]!.push(row)
    const search = searchOf(pieces, words)
    if (search === null) throw new SearchWithoutWords()
    return search
  }

  /**
   * The planner's statistics of the words (src/search-plan.ts), read again once they are
   * `WORD_STATISTICS_MS` old: none where the dialect has none, or before an ANALYZE.
   */
  let wordStatistics: { read: number, frequencies: Promise<WordFrequencies | null> } | null = null
  function wordFrequencies (): Promise<WordFrequencies | null> {
    if (wordStatistics === null || performance.now() - wordStatistics.read > WORD_STATISTICS_MS) {
      // A failed read is tried again by the next search
      wordStatistics = { read: performance.now(), frequencies: readWordFrequencies().catch(() => { wordStatistics = null; return null }) }
    }
    return wordStatistics.frequencies
  }
  async function readWordFrequencies (): Promise<WordFrequencies | null> {
    if (!dialect.estimatesMatches) return null
    const { rows } = await query<{ index: string, words: string[], frequencies: number[], books: number }>(WORD_STATISTICS, [])
    if (rows.length === 0) return null
    const of = (index: string) => {
      const row = rows.find((each) => each.index === index)
      // The frequencies end with more figures (the least and the most of them)
      return new Map(row === undefined ? [] : row.words.map((word, i) => [word, row.frequencies[i]!]))
    }
    return { title: of('books_title_words'), author: of('books_author_words'), books: rows[0]!.books }
  }

  /** How a page of `limit` books of a search by relevance reads its levels: a one-word search, where statistics say how. */
  function levelsOf (search: Search, frequencies: WordFrequencies | null, limit: number): SearchLevel[] | null {
    if (search.terms.length !== 1 || search.phrases.length > 0 || frequencies === null) return null
    return searchLevels(search.terms[0]!, frequencies, limit)
  }

  /**
   * Whether a page of `walk` reads its matches first: a substring filter that the planner
   * expects to match few books, in another order than id, where the dialect has the planner's
   * estimate. By id the table is read in the order it is stored.
   */
  async function readsMatchesFirst (walk: Walk, search: Search | null): Promise<boolean> {
    if (!dialect.estimatesMatches || walk.field === 'id' || walk.field === 'relevance' ||
      (walk.title === undefined && walk.author === undefined && search === null)) return false
    const { text, values } = matchesEstimateQuery(walk, search)
    const { rows: [row] } = await query<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }>(text, values)
    return row!['QUERY PLAN'][0]!.Plan['Plan Rows'] < MATCHES_FIRST_BELOW
  }

  async function walkPage (
    walk: Walk, position: Position | null, limit: number, client: string, format: PageFormat, signal?: AbortSignal
  ): Promise<ListingPage> {
    let matchesFirst = position?.matchesFirst
    const { rows: [row] } = await readBudget.of(client)(async () => {
      signal?.throwIfAborted()
      const search = walk.q === undefined ? null : await searchFor(walk.q)
      matchesFirst ??= await readsMatchesFirst(walk, search)
      let options: Parameters<typeof walkPageQuery>[6] = { matchesFirst }
      if (walk.field === 'relevance') {
        options = { levels: levelsOf(search!, await wordFrequencies(), limit) }
      }
      const { text, values } = walkPageQuery(walk, search, position, limit, format, dialect, options)
      // Without a filter a page reads at most `limit` books through the index of its order
      if (!hasFilter(walk)) return query<WalkPageRow>(text, values)
      return budgetedQuery<WalkPageRow>(text, values, walk.field === 'relevance' ? RANKED_PAGE_SETTINGS : null)
    })
    const { count, text, last_id: lastId, last_key: lastKey, snapshot } = row!
    if (lastId === null) return { count, text, last: null }
    return {
      count,
      text,
      last: {
        key: walk.field === 'id' ? null : walk.field === 'year' || walk.field === 'relevance' ? Number(lastKey) : lastKey!,
        id: lastId,
        snapshot: snapshot ?? position?.snapshot ?? null,
        matchesFirst
      }
    }
  }

  // Listings that start together share the query of their first page. Each still reads after
  // it arrived: a batch is sent only after all its calls were made.
  const firstPages = batched<FirstPage, ListingPage>((firsts) => {
    // One statement for the listings of any number of clients: it counts for none of them
    const pages = new Map<string, Promise<ListingPage>>()
    return Promise.all(firsts.map(({ limit, format }) => {
      const key = `${format} ${limit}`
      if (!pages.has(key)) pages.set(key, pageAfter('0', limit, null, format))
      return pages.get(key)!
    }))
  }, globalThis, { tracing, name: 'listing first pages' })

  return {
    /** The start of the listing: up to `limit` books with the lowest ids, written as `format` writes them. */
    firstPage: (limit: number, format: PageFormat): Promise<ListingPage> => firstPages.load({ limit, format }),

    /**
     * The page after `afterId`: up to `limit` books with higher ids, in id order, read for
     * `client`. A listing goes on where its last page ended (a keyset cursor), so each page is a
     * short query of its own and a listing holds no connection or transaction while the client
     * reads. Once `signal` is aborted, a query still waiting for its turn is not sent (the
     * promise rejects).
     */
    pageAfter: (afterId: string, limit: number, client: string, format: PageFormat, signal?: AbortSignal) =>
      pageAfter(afterId, limit, client, format, signal),

    /**
     * The page of up to `limit` books that starts `skip` books after `after`, in id order, and the
     * id of the book it starts after: a listing reads it ahead of the page before it. None where
     * the dialect reads no page ahead (Citus, where a page already spreads over the workers).
     */
    pageBeyond: dialect.readsAhead ? pageBeyond : undefined,

    /** Whether a listing of `client` may start one more page query now without making another read wait. */
    connectionFree: (client: string) => slots.startsNow(client),

    /**
     * A page of a walk (src/listing.ts): up to `limit` books after `position`, or from its start,
     * read for `client`. With a filter, `ListingOverBudget` once it has run LISTING_BUDGET_MS.
     */
    walkPage
  }
}

export default fp(async function listingsRepository (fastify) {
  fastify.decorate('listingsRepository', createListingsRepository(fastify.pg, fastify.readBudget, fastify.sqlDialect, fastify.config.LISTING_BUDGET_MS, fastify.tracing))
}, { name: 'listings-repository', dependencies: ['postgres', 'migrate', 'read-budget', 'env'] })

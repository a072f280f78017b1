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
 * src/db/listings-sql.ts, and those of a walk's pages src/db/walk-pages-sql.ts; what a search
 * needs of the words before its page, `fastify.searchWords` (plugins/app/search-words.ts).
 */
import type { PostgresDb } from '@fastify/postgres'
import type { QueryResult, QueryResultRow } from 'pg'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { batched } from '../../src/db/batch.js'
import { LISTING_PAGE, LISTING_PAGE_BEYOND, copyPageAfter, copyPageBeyond, type PageFormat } from '../../src/db/listings-sql.js'
import { matchesEstimateQuery, walkPageQuery } from '../../src/db/walk-pages-sql.js'
import { RANKED_PAGE_SETTINGS } from '../../src/db/search-sql.js'
import { boundedCopyOut, boundedQueryOn, boundedTransaction } from '../../src/db/bounded-query.js'
import type { SqlDialect } from '../../src/db/dialect.js'
import { ListingOverBudget, hasFilter, type Position, type Walk } from '../../src/listing.js'
import type { ListingPage, PageBeyond } from '../../src/listing-stream.js'
import type { Tracing } from '../../src/tracing.js'
import type { Search } from '../../src/search.js'

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

/** SQLSTATE query_canceled: what `statement_timeout` ends a statement with. */
const CANCELED_SQLSTATE = '57014'

/** Whether a failure is the server's cancel at the budget: the connection is kept (src/db/bounded-query.ts). */
const overBudget = (err: unknown) => (err as { code?: string }).code === CANCELED_SQLSTATE

/**
 * The bounds of a filtered page's transaction, before its statement: the server cancels it after
 * `budgetMs`, and runs it in its own backend alone (no parallel workers, each of which would
 * spend the budget again on another core) without compiling it (JIT: the planner's cost of the
 * books a page might read passes `jit_above_cost`, and compiling a search's page took 190 ms
 * where reading it took 15). `SET LOCAL` ends with the transaction, as the bounds of every
 * statement do (src/db/time-bounds.ts): nothing is left in a session a pooler shares.
 */
function budgetSettings (budgetMs: number): string {
  return `SET LOCAL statement_timeout = ${budgetMs}; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off`
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
function createListingsRepository (
  pg: PostgresDb, readBudget: FastifyInstance['readBudget'], searchWords: FastifyInstance['searchWords'], dialect: SqlDialect, budgetMs: number, tracing: Tracing
) {
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

  async function readWalkPage (
    walk: Walk, position: Position | null, limit: number, client: string, format: PageFormat, started: () => void, signal?: AbortSignal
  ): Promise<ListingPage> {
    let matchesFirst = position?.matchesFirst
    const { rows: [row] } = await readBudget.of(client)(async () => {
      started()
      signal?.throwIfAborted()
      const search = walk.q === undefined ? null : await searchWords.searchFor(walk.q)
      matchesFirst ??= await readsMatchesFirst(walk, search)
      let options: Parameters<typeof walkPageQuery>[6] = { matchesFirst }
      if (walk.field === 'relevance') {
        options = { levels: await searchWords.levelsOf(search!, limit) }
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

  /**
   * The pages of walks that wait for their turn (`readBudget`), by client and page: the same page
   * asked for again by the same client before its read starts is that read's answer too. A page
   * asked for once its read has started waits for a read of its own, which starts after it
   * arrived, so it sees every write that committed before it was asked for.
   */
  const waitingPages = new Map<string, Promise<ListingPage>>()
  function walkPage (walk: Walk, position: Position | null, limit: number, client: string, format: PageFormat, signal?: AbortSignal): Promise<ListingPage> {
    // A long listing's next pages (`signal`) are its own, each read once its client takes the one before
    if (signal !== undefined) return readWalkPage(walk, position, limit, client, format, () => {}, signal)
    const key = JSON.stringify([client, walk, position, limit, format])
    const waiting = waitingPages.get(key)
    if (waiting !== undefined) return waiting
    // Whether the page is there to share: from when it is asked for until its read starts
    let shared = false
    let started = false
    const unshare = () => {
      if (shared) waitingPages.delete(key)
      shared = false
    }
    const page = readWalkPage(walk, position, limit, client, format, () => {
      started = true
      unshare()
    })
    if (!started) {
      shared = true
      waitingPages.set(key, page)
      page.then(unshare, unshare)
    }
    return page
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
     * read for `client`; the same page asked for again by the same client while it waits for its
     * turn shares its read. With a filter, `ListingOverBudget` once it has run LISTING_BUDGET_MS.
     */
    walkPage
  }
}

export default fp(async function listingsRepository (fastify) {
  fastify.decorate('listingsRepository',
    createListingsRepository(fastify.pg, fastify.readBudget, fastify.searchWords, fastify.sqlDialect, fastify.config.LISTING_BUDGET_MS, fastify.tracing))
}, { name: 'listings-repository', dependencies: ['postgres', 'migrate', 'read-budget', 'search-words', 'env'] })

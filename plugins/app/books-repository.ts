import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import type { QueryResultRow } from 'pg'
import { batched } from '../../src/db/batch.js'
import { boundedQuery } from '../../src/db/bounded-query.js'
import type { Book, BookCreate, BookPatch } from '../../src/schemas/book.js'

declare module 'fastify' {
  interface FastifyInstance {
    booksRepository: ReturnType<typeof createBooksRepository>
  }
}

interface BookRow {
  id: string
  title: string
  author: string
  year: number
}

/** A page of the listing: its books as comma-separated Book JSON, their count and last id. */
export interface ListingPage {
  count: number
  lastId: string | null
  json: string
}

/** bigint arrives from pg as a string; ids stay far below 2^53, so a JSON number is exact. */
function toBook (row: BookRow): Book {
  return { id: Number(row.id), title: row.title, author: row.author, year: row.year }
}

// Unnamed statements: a named (prepared) one lives in a session, which a pooler in transaction
// mode (PgBouncer) hands to whoever comes next. The batched statements take arrays: one
// statement answers every call of a batch (src/db/batch.ts)
const FIND = 'SELECT id, title, author, year FROM books WHERE id = ANY($1::bigint[])'
const EXISTS = 'SELECT 1 FROM books WHERE id = $1'
// Rows are inserted and given ids in the order of the calls
const CREATE = `INSERT INTO books (title, author, year)
         SELECT title, author, year
         FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS new(title, author, year, n)
         ORDER BY n
         RETURNING id, title, author, year`
// One statement per batch; a null field keeps its value, so concurrent updates of different
// fields all take effect. A batch never holds two updates of one book (see `update`). The rows
// are locked in id order first: two batches (of two instances, or one sent while the one before
// still waits on a lock) would otherwise lock rows in different orders and could deadlock.
const UPDATE = `WITH patch AS MATERIALIZED (
           SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[]) AS p(id, title, author, year)
         ), locked AS MATERIALIZED (
           SELECT books.id FROM books JOIN patch USING (id) ORDER BY books.id FOR UPDATE OF books
         )
         UPDATE books SET
           title = COALESCE(patch.title, books.title),
           author = COALESCE(patch.author, books.author),
           year = COALESCE(patch.year, books.year)
         FROM patch JOIN locked USING (id)
         WHERE books.id = patch.id
         RETURNING books.id, books.title, books.author, books.year`
const DELETE = 'DELETE FROM books WHERE id = $1'
// PostgreSQL writes the JSON of a page of the listing itself: one string reaches Node instead of
// rows to parse, build and serialize again
const LISTING_PAGE = `SELECT count(*)::int AS count, max(id)::text AS last_id,
                coalesce(string_agg(row_to_json(page)::text, ',' ORDER BY id), '') AS json
         FROM (SELECT id, title, author, year FROM books WHERE id > $1 ORDER BY id LIMIT $2) page`

/**
 * All SQL of the service. Ids are passed as the decimal strings `isBookId` accepted.
 *
 * Finds, creates, updates and the first page of listings are batched (src/db/batch.ts): the
 * calls made while one statement is in PostgreSQL share the next. On 2 cores shared with
 * PostgreSQL, this more than doubles the throughput of each (docs/performance.md): one statement
 * and one commit do the work of dozens. Deletes, the existence check of a bad PUT and the later
 * pages of a long listing are single statements.
 */
export function createBooksRepository (pg: PostgresDb) {
  const query = <R extends QueryResultRow>(text: string, values: unknown[]) => boundedQuery<R>(pg.pool, { text, values })

  const finds = batched<string, Book | null>(async (ids) => {
    const { rows } = await query<BookRow>(FIND, [ids])
    const byId = new Map(rows.map((row) => [row.id, toBook(row)]))
    return ids.map((id) => byId.get(id) ?? null)
  })

  const creates = batched<BookCreate, Book>(async (books) => {
    const { rows } = await query<BookRow>(CREATE,
      [books.map((b) => b.title), books.map((b) => b.author), books.map((b) => b.year)])
    // RETURNING gives the rows in insertion order in practice, which PostgreSQL does not
    // promise: each call takes a row with exactly its fields (rows alike are interchangeable)
    const byFields = new Map<string, BookRow[]>()
    for (const row of rows) {
      const key = JSON.stringify([row.title, row.author, row.year])
      const alike = byFields.get(key)
      if (alike === undefined) byFields.set(key, [row])
      else alike.push(row)
    }
    return books.map(({ title, author, year }) => {
      const row = byFields.get(JSON.stringify([title, author, year]))?.shift()
      return row === undefined ? new Error('a created book did not come back') : toBook(row)
    })
  })

  const updates = batched<{ id: string, patch: BookPatch }, Book | null>(async (calls) => {
    const answers = new Array<Book | null>(calls.length)
    // Two updates of one book in one statement would see the same old row and one would be
    // lost: the second goes in a statement of its own, after the first
    for (let pending = calls.map((_, i) => i); pending.length > 0;) {
      const seen = new Set<string>()
      const round = pending.filter((i) => !seen.has(calls[i]!.id) && seen.add(calls[i]!.id))
      pending = pending.filter((i) => !round.includes(i))
      const patches = round.map((i) => calls[i]!)
      const { rows } = await query<BookRow>(UPDATE, [
        patches.map((c) => c.id),
        patches.map((c) => c.patch.title ?? null),
        patches.map((c) => c.patch.author ?? null),
        patches.map((c) => c.patch.year ?? null)
      ])
      const byId = new Map(rows.map((row) => [row.id, toBook(row)]))
      for (const i of round) answers[i] = byId.get(calls[i]!.id) ?? null
    }
    return answers
  })

  async function pageAfter (afterId: string, limit: number): Promise<ListingPage> {
    const { rows: [row] } = await query<{ count: number, last_id: string | null, json: string }>(LISTING_PAGE, [afterId, limit])
    return { count: row!.count, lastId: row!.last_id, json: row!.json }
  }

  // Listings that start together share the query of their first page. Each still reads after
  // it arrived: a batch is sent only after all its calls were made.
  const firstPages = batched<number, ListingPage>((limits) => {
    const pages = new Map([...new Set(limits)].map((limit) => [limit, pageAfter('0', limit)]))
    return Promise.all(limits.map((limit) => pages.get(limit)!))
  })

  return {
    create: (book: BookCreate): Promise<Book> => creates.load(book),

    find: (id: string): Promise<Book | null> => finds.load(id),

    async exists (id: string): Promise<boolean> {
      const { rowCount } = await query(EXISTS, [id])
      return rowCount === 1
    },

    update: (id: string, patch: BookPatch): Promise<Book | null> => updates.load({ id, patch }),

    async delete (id: string): Promise<boolean> {
      const { rowCount } = await query(DELETE, [id])
      return rowCount === 1
    },

    /** The start of the listing: up to `limit` books with the lowest ids. */
    firstPage: (limit: number): Promise<ListingPage> => firstPages.load(limit),

    /**
     * The page after `afterId`: up to `limit` books with higher ids, in id order. A listing goes
     * on where its last page ended (a keyset cursor), so each page is a short query of its own
     * and a listing holds no connection or transaction while the client reads.
     */
    pageAfter
  }
}

export default fp(async function booksRepository (fastify) {
  fastify.decorate('booksRepository', createBooksRepository(fastify.pg))
}, { name: 'books-repository', dependencies: ['postgres', 'migrate'] })

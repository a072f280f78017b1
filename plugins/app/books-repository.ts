import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import type { Pipeline } from '../../src/db/pipeline.js'
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

/** Up to `limit` books after an id, as comma-separated Book JSON, with their count and last id. */
export interface JsonPage {
  count: number
  lastId: string | null
  json: string
}

/** bigint arrives from pg as a string; ids stay far below 2^53, so a JSON number is exact. */
function toBook (row: BookRow): Book {
  return { id: Number(row.id), title: row.title, author: row.author, year: row.year }
}

// Named, so each connection parses and plans a statement once and then only binds it
const FIND = { name: 'books-find', text: 'SELECT id, title, author, year FROM books WHERE id = $1' }
const EXISTS = { name: 'books-exists', text: 'SELECT 1 FROM books WHERE id = $1' }
const CREATE = {
  name: 'books-create',
  text: 'INSERT INTO books (title, author, year) VALUES ($1, $2, $3) RETURNING id, title, author, year'
}
// One statement, so concurrent updates of different fields all take effect
const UPDATE = {
  name: 'books-update',
  text: `UPDATE books SET
           title = COALESCE($2, title),
           author = COALESCE($3, author),
           year = COALESCE($4, year)
         WHERE id = $1 RETURNING id, title, author, year`
}
const DELETE = { name: 'books-delete', text: 'DELETE FROM books WHERE id = $1' }
// PostgreSQL writes the JSON of a page of the listing itself: one string reaches Node instead of
// rows to parse, build and serialize again
const JSON_PAGE = {
  name: 'books-json-page',
  text: `SELECT count(*)::int AS count, max(id)::text AS last_id,
                coalesce(string_agg(row_to_json(page)::text, ',' ORDER BY id), '') AS json
         FROM (SELECT id, title, author, year FROM books WHERE id > $1 ORDER BY id LIMIT $2) page`
}

/**
 * All SQL of the service. Ids are passed as the decimal strings `parseBookId` accepted.
 *
 * Reads go through the shared pipelined connections. Writes go through the pool: a commit waits
 * for its WAL flush, and commits on separate connections share one flush, where a pipeline would
 * wait for each in turn. The pages of a long listing after the first also use the pool, so they
 * never queue in front of the reads.
 */
export function createBooksRepository (pipeline: Pipeline, pool: PostgresDb) {
  return {
    async create ({ title, author, year }: BookCreate): Promise<Book> {
      const { rows } = await pool.query<BookRow>({ ...CREATE, values: [title, author, year] })
      return toBook(rows[0]!)
    },

    async find (id: string): Promise<Book | null> {
      const { rows } = await pipeline.query<BookRow>({ ...FIND, values: [id] })
      return rows[0] ? toBook(rows[0]) : null
    },

    async exists (id: string): Promise<boolean> {
      const { rowCount } = await pipeline.query({ ...EXISTS, values: [id] })
      return rowCount === 1
    },

    async update (id: string, { title, author, year }: BookPatch): Promise<Book | null> {
      const { rows } = await pool.query<BookRow>({
        ...UPDATE, values: [id, title ?? null, author ?? null, year ?? null]
      })
      return rows[0] ? toBook(rows[0]) : null
    },

    async delete (id: string): Promise<boolean> {
      const { rowCount } = await pool.query({ ...DELETE, values: [id] })
      return rowCount === 1
    },

    /**
     * One page of the listing: up to `limit` books with ids above `afterId`, in id order. A
     * listing goes on where its last page ended (a keyset cursor), so each page is a short query
     * of its own and a listing holds no connection or transaction while the client reads.
     */
    async jsonPage (afterId: string, limit: number, { first = false } = {}): Promise<JsonPage> {
      const query = { ...JSON_PAGE, values: [afterId, limit] }
      const { rows: [row] } = first
        ? await pipeline.query<{ count: number, last_id: string | null, json: string }>(query)
        : await pool.query<{ count: number, last_id: string | null, json: string }>(query)
      return { count: row!.count, lastId: row!.last_id, json: row!.json }
    }
  }
}

export default fp(async function booksRepository (fastify) {
  fastify.decorate('booksRepository', createBooksRepository(fastify.pgPipeline, fastify.pg))
}, { name: 'books-repository', dependencies: ['postgres', 'migrate'] })

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

/** A row as `[id, title, author, year]`, `id` the decimal text of the bigint. */
export type BookTuple = [string, string, string, number]

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
// PostgreSQL writes the JSON of a streamed page itself: one string per page reaches Node
// instead of thousands of rows to parse, build and serialize again
const JSON_PAGE = {
  name: 'books-json-page',
  text: `SELECT max(id)::text AS last_id, string_agg(row_to_json(page)::text, ',' ORDER BY id) AS json
         FROM (SELECT id, title, author, year FROM books WHERE id > $1 ORDER BY id LIMIT $2) page`
}
const PAGE = {
  name: 'books-page',
  text: 'SELECT id, title, author, year FROM books WHERE id > $1 ORDER BY id LIMIT $2',
  rowMode: 'array' as const
}

/**
 * All SQL of the service. Ids are passed as the decimal strings `parseBookId` accepted. The
 * single statements go through the shared pipelined connections; the pages of a listing go
 * through the pool, so a long listing never queues in front of them.
 */
export function createBooksRepository (pipeline: Pipeline, pool: PostgresDb) {
  return {
    async create ({ title, author, year }: BookCreate): Promise<Book> {
      const { rows } = await pipeline.query<BookRow>({ ...CREATE, values: [title, author, year] })
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
      const { rows } = await pipeline.query<BookRow>({
        ...UPDATE, values: [id, title ?? null, author ?? null, year ?? null]
      })
      return rows[0] ? toBook(rows[0]) : null
    },

    async delete (id: string): Promise<boolean> {
      const { rowCount } = await pipeline.query({ ...DELETE, values: [id] })
      return rowCount === 1
    },

    /**
     * Up to `limit` books with ids above `afterId`, in id order: one page of a listing that
     * continues where the last page ended (a keyset cursor). Each page is a short query of its
     * own, so a listing holds no connection and no transaction while the client reads.
     */
    async page (afterId: string, limit: number): Promise<BookTuple[]> {
      const { rows } = await pool.query<BookTuple>({ ...PAGE, values: [afterId, limit] })
      return rows
    },

    /** The same page as comma-separated Book JSON, and its last id; null past the end. */
    async jsonPage (afterId: string, limit: number): Promise<{ lastId: string, json: string } | null> {
      const { rows } = await pool.query<{ last_id: string | null, json: string }>({ ...JSON_PAGE, values: [afterId, limit] })
      const [row] = rows
      return row?.last_id ? { lastId: row.last_id, json: row.json } : null
    }
  }
}

export default fp(async function booksRepository (fastify) {
  fastify.decorate('booksRepository', createBooksRepository(fastify.pgPipeline, fastify.pg))
}, { name: 'books-repository', dependencies: ['postgres', 'migrate'] })

import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import type { Book, BookCreate, BookPatch } from '../../src/schemas/book.js'

declare module 'fastify' {
  interface FastifyInstance {
    booksRepository: ReturnType<typeof createBooksRepository>
  }
}

const COLUMNS = 'id, title, author, year'

interface BookRow {
  id: string
  title: string
  author: string
  year: number
}

/** bigint arrives from pg as a string; ids stay far below 2^53, so a JSON number is exact. */
function toBook (row: BookRow): Book {
  return { id: Number(row.id), title: row.title, author: row.author, year: row.year }
}

/** All SQL of the service. Ids are passed as the decimal strings `parseBookId` accepted. */
export function createBooksRepository (pg: PostgresDb) {
  return {
    async create ({ title, author, year }: BookCreate): Promise<Book> {
      const { rows } = await pg.query<BookRow>(
        `INSERT INTO books (title, author, year) VALUES ($1, $2, $3) RETURNING ${COLUMNS}`,
        [title, author, year]
      )
      return toBook(rows[0]!)
    },

    async list (): Promise<Book[]> {
      const { rows } = await pg.query<BookRow>(`SELECT ${COLUMNS} FROM books ORDER BY id`)
      return rows.map(toBook)
    },

    async find (id: string): Promise<Book | null> {
      const { rows } = await pg.query<BookRow>(`SELECT ${COLUMNS} FROM books WHERE id = $1`, [id])
      return rows[0] ? toBook(rows[0]) : null
    },

    async exists (id: string): Promise<boolean> {
      const { rowCount } = await pg.query('SELECT 1 FROM books WHERE id = $1', [id])
      return rowCount === 1
    },

    /** One statement, so concurrent updates of different fields all take effect. */
    async update (id: string, { title, author, year }: BookPatch): Promise<Book | null> {
      const { rows } = await pg.query<BookRow>(
        `UPDATE books SET
           title = COALESCE($2, title),
           author = COALESCE($3, author),
           year = COALESCE($4, year)
         WHERE id = $1 RETURNING ${COLUMNS}`,
        [id, title ?? null, author ?? null, year ?? null]
      )
      return rows[0] ? toBook(rows[0]) : null
    },

    async delete (id: string): Promise<boolean> {
      const { rowCount } = await pg.query('DELETE FROM books WHERE id = $1', [id])
      return rowCount === 1
    }
  }
}

export default fp(async function booksRepository (fastify) {
  fastify.decorate('booksRepository', createBooksRepository(fastify.pg))
}, { name: 'books-repository', dependencies: ['postgres', 'migrate'] })

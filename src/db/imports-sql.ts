/**
 * The statements of an import (plugins/app/imports-repository.ts), all in its one transaction:
 * the spooled books (src/import-spool.ts) loaded into a temporary table, then inserted into the
 * books in chunks, each chunk's creates recorded in the change log by the statement that makes
 * them, the idempotency key (if any) stored last. Each statement is bounded by the transaction's
 * statement timeout (src/db/time-bounds.ts): the work is cut into chunks that stay well under it.
 */
import type { ClientBase } from 'pg'
import { from as copyFrom } from 'pg-copy-streams'
import { BOOK_COLUMNS, learned, logged } from './books-sql.js'

/**
 * Books per statement into `books`: each writes its rows, their indexes and their changes, the
 * search's words included. On PGlite fewer: its statements run in WebAssembly, several times
 * slower, and cannot be cancelled, so only the client's read timeout bounds them; a chunk of
 * 5,000 took some 0.6 s there on an idle machine, and past the 3.1 s bound on a loaded one.
 */
export const INSERT_ROWS = { server: 5_000, pglite: 1_000 } as const

// A table of this transaction alone, gone with it: a pooler in transaction mode (PgBouncer)
// hands the next transaction a session without it. `n` is the book's place in the input
export const CREATE_IMPORT_TABLE = `CREATE TEMP TABLE book_import (
           n int8 PRIMARY KEY, title text NOT NULL, author text NOT NULL, year int4 NOT NULL
         ) ON COMMIT DROP`

// The books of places `$1` to `$2`, with ids drawn in input order (the order of `ordered`, as the
// creates of src/db/books-sql.ts draw theirs), each create recorded in the change log. Answers
// the ids as runs of consecutive ids, in input order: ids drawn in order are one run unless
// another transaction drew some in between
export const insertBooks = (learnsWords: boolean) => `WITH fresh AS MATERIALIZED (
           SELECT n, title, author, year, nextval((SELECT pg_get_serial_sequence('books', 'id'))::regclass) AS id
           FROM (SELECT n, title, author, year FROM book_import WHERE n BETWEEN $1 AND $2 ORDER BY n) AS ordered
         ), created AS (
           INSERT INTO books (${BOOK_COLUMNS}) OVERRIDING SYSTEM VALUE
           SELECT ${BOOK_COLUMNS} FROM fresh
           RETURNING ${BOOK_COLUMNS}
         ), ${logged('created', 'created')}${learned(learnsWords, 'created')}
         SELECT min(id)::text AS first, count(*)::int AS count
         FROM (SELECT id, id - row_number() OVER (ORDER BY n) AS run FROM fresh) AS numbered
         GROUP BY run ORDER BY min(id)`

// The key's advisory lock, which every writer of a key takes (src/db/books-sql.ts, CREATE)
export const TAKE_KEY = 'SELECT pg_try_advisory_xact_lock($1::int8) AS granted'
// Read once the lock is held: in READ COMMITTED this statement sees a key committed before it
export const STORED_KEY = 'SELECT fingerprint, book_ids::text AS book_ids FROM idempotency_keys WHERE key = $1'
export const STORE_KEY = 'INSERT INTO idempotency_keys (key, fingerprint, book_ids) VALUES ($1, $2, $3::int8multirange)'

/**
 * Spooled bytes per `COPY`, in whole lines (`ImportSpool.chunks`): each statement well within
 * the statement timeout whatever the lines hold (at the shortest, some 15 bytes a book).
 */
export const COPY_BYTES = 2 * 1024 * 1024

/**
 * The lines of `chunk` into `book_import` by `COPY ... FROM STDIN`, the spooled bytes as they are
 * (COPY's text format): never decoded, so that a million books do not become a million strings
 * for the collector. On PostgreSQL, through PgBouncer (inside the transaction) and on PGlite
 * (src/db/embedded-socket.ts); node-postgres refuses it on a pipelining client.
 */
export function copyIntoImport (client: ClientBase, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const copy = client.query(copyFrom('COPY book_import (n, title, author, year) FROM STDIN'))
    copy.on('error', reject).on('finish', () => resolve())
    copy.end(chunk)
  })
}

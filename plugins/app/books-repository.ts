/**
 * Adds `fastify.booksRepository`, made by `createBooksRepository` (below) on the pool of
 * @fastify/postgres once migrate has brought the tables up to date: a book found, created (once
 * per idempotency key), updated and deleted. Its statements are in src/db/books-sql.ts.
 */
import { hash } from 'node:crypto'
import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import { batched } from '../../src/db/batch.js'
import { boundedQueryOn } from '../../src/db/bounded-query.js'
import type { SqlDialect } from '../../src/db/dialect.js'
import type { Tracing } from '../../src/tracing.js'
import type { Book, BookCreate, BookPatch } from '../../src/schemas/book.js'
import { CREATE_ONE, DELETE, EXISTS, FIND, STORED_KEYS, UPDATE, UPDATE_ONE, createStatement } from '../../src/db/books-sql.js'

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
  version: number
}

/** A book as stored, with its version (src/entity-tags.ts). */
interface StoredBook {
  book: Book
  version: number
}

/** bigint arrives from pg as a string; ids stay below 2^53 (on Citus too: docs/deployment.md, Ids), so a JSON number is exact. */
function toStored (row: BookRow): StoredBook {
  return { book: { id: Number(row.id), title: row.title, author: row.author, year: row.year }, version: row.version }
}

/** The stored fields of a create's body: unknown fields are neither stored nor compared. */
function bookFields ({ title, author, year }: BookCreate): BookCreate {
  return { title, author, year }
}

/**
 * What identifies a create's body under its key: the SHA-256 of its stored fields, so spacing,
 * field order and unknown fields do not make two bodies differ.
 */
function fingerprint (book: BookCreate): Buffer {
  const { title, author, year } = book
  return hash('sha256', JSON.stringify([title, author, year]), 'buffer')
}

/**
 * The advisory lock that the writer of an idempotency key holds: 64 bits of the key's SHA-256,
 * in the keyspace of one-bigint locks (the migration lock's one value aside, nothing else uses it).
 */
export function keyLock (key: string): string {
  return hash('sha256', key, 'buffer').readBigInt64BE().toString()
}

interface UpdateCall {
  id: string
  patch: BookPatch
  /** The versions the update is allowed on (If-Match); null: any. */
  versions: number[] | null
}

interface CreateCall {
  book: BookCreate
  key?: { key: string, fingerprint: Buffer }
}

/**
 * The answer to a create. `created` and `replayed` come with the book as the first create of the
 * key answered it: its id, and the fields of the body (a later update or delete changes nothing).
 */
type CreateOutcome =
  | { outcome: 'created' | 'replayed', book: Book }
  | { outcome: 'mismatch' | 'busy' }

interface StoredKey {
  key: string
  fingerprint: Buffer
  id: string
}

/** The answer for a key found stored; one gone again already (swept) is answered as busy. */
function knownKey (call: CreateCall, stored: StoredKey | undefined): CreateOutcome {
  if (stored === undefined) return { outcome: 'busy' }
  if (!stored.fingerprint.equals(call.key!.fingerprint)) return { outcome: 'mismatch' }
  return { outcome: 'replayed', book: { ...bookFields(call.book), id: Number(stored.id) } }
}

/**
 * The books' SQL. Ids are passed as the decimal strings `isBookId` accepted.
 *
 * Finds, creates and updates are batched (src/db/batch.ts): the calls made while one statement
 * is in PostgreSQL share the next: one statement and one commit do the work of dozens, and the
 * CPU PostgreSQL saves goes to the service (docs/performance.md, What makes the difference).
 * Deletes and the existence check of a bad PUT are single statements. How a batch of creates or
 * updates is sent, in one statement or one per book, is the dialect's (src/db/dialect.ts).
 */
function createBooksRepository (pg: PostgresDb, dialect: SqlDialect, tracing: Tracing) {
  const query = boundedQueryOn(pg.pool)
  const CREATE = createStatement(dialect.learnsWords)

  const finds = batched<string, StoredBook | null>(async (ids) => {
    const { rows } = await query<BookRow>(FIND, [ids])
    const byId = new Map(rows.map((row) => [row.id, toStored(row)]))
    return ids.map((id) => byId.get(id) ?? null)
  }, globalThis, { tracing, name: 'books find' })

  /** One statement for a batch of creates (`CREATE`), the keys another instance stored read afresh. */
  async function createTogether (calls: readonly CreateCall[]): Promise<Array<CreateOutcome | Error>> {
    const { rows } = await query<{ outcome: CreateOutcome['outcome'] | 'conflict', id: string | null }>(CREATE, [
      calls.map((c) => c.book.title),
      calls.map((c) => c.book.author),
      calls.map((c) => c.book.year),
      calls.map((c) => c.key?.key ?? null),
      calls.map((c) => c.key?.fingerprint ?? null),
      calls.map((c) => c.key === undefined ? null : keyLock(c.key.key))
    ])
    const answers = calls.map((call, i): CreateOutcome | Error | null => {
      const { outcome, id } = rows[i]!
      switch (outcome) {
        case 'created':
        case 'replayed':
          return { outcome, book: { ...bookFields(call.book), id: Number(id) } }
        case 'conflict':
          return null
        default:
          return { outcome }
      }
    })
    // Keys another instance stored while this statement ran: read afresh, each is then known.
    // The other books of the batch are committed by now: if this read fails, it fails the
    // conflicting calls alone (nothing of theirs was stored), never a create that was stored
    const conflicts = calls.filter((_, i) => answers[i] === null)
    if (conflicts.length > 0) {
      let known: (call: CreateCall) => CreateOutcome | Error
      try {
        const { rows: stored } = await query<StoredKey>(STORED_KEYS, [conflicts.map((c) => c.key!.key)])
        const byKey = new Map(stored.map((row) => [row.key, row]))
        known = (call) => knownKey(call, byKey.get(call.key!.key))
      } catch (err) {
        known = () => err as Error
      }
      calls.forEach((call, i) => {
        if (answers[i] === null) answers[i] = known(call)
      })
    }
    return answers as Array<CreateOutcome | Error>
  }

  /** A create in a statement of its own: an insert on one shard, or with a key the batch statement for it alone (two shards). */
  async function createAlone (call: CreateCall): Promise<CreateOutcome | Error> {
    if (call.key !== undefined) return (await createTogether([call]))[0]!
    const { rows: [row] } = await query<{ id: string }>(CREATE_ONE, [call.book.title, call.book.author, call.book.year])
    return { outcome: 'created', book: { ...bookFields(call.book), id: Number(row!.id) } }
  }

  const creates = batched<CreateCall, CreateOutcome>((calls) => dialect.sendWrites(calls, { together: createTogether, alone: createAlone }),
    globalThis, { tracing, name: 'books create' })
  // Keys of creates in flight in this instance; a statement never holds one key twice
  const keysInFlight = new Set<string>()

  /** A batch of updates in as few statements as it takes; rejects when one of them fails. */
  async function updateTogether (calls: readonly UpdateCall[]): Promise<Array<StoredBook | null>> {
    const answers = new Array<StoredBook | null>(calls.length)
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
        patches.map((c) => c.patch.year ?? null),
        patches.map((c) => c.versions === null ? null : `{${c.versions.join(',')}}`)
      ])
      const byId = new Map(rows.map((row) => [row.id, toStored(row)]))
      for (const i of round) answers[i] = byId.get(calls[i]!.id) ?? null
    }
    return answers
  }

  /** An update in a statement of its own, on one shard, locking one row. */
  async function updateAlone ({ id, patch, versions }: UpdateCall): Promise<StoredBook | null> {
    const { rows: [row] } = await query<BookRow>(UPDATE_ONE, [id, patch.title ?? null, patch.author ?? null, patch.year ?? null, versions])
    return row === undefined ? null : toStored(row)
  }

  const updates = batched<UpdateCall, StoredBook | null>((calls) => dialect.sendWrites(calls, { together: updateTogether, alone: updateAlone }),
    globalThis, { tracing, name: 'books update' })

  /** Whether the book a call with `versions` did not change is there (`mismatch`) or not. */
  async function unchanged (id: string, versions: number[] | null): Promise<'missing' | 'mismatch'> {
    return versions !== null && await exists(id) ? 'mismatch' : 'missing'
  }

  async function exists (id: string): Promise<boolean> {
    const { rowCount } = await query(EXISTS, [id])
    return rowCount === 1
  }

  return {
    /**
     * Stores `book`, once per idempotency key: a repeat of a stored key with the same book answers
     * the first create again (`replayed`, nothing stored), with another book `mismatch`; a key
     * whose create is still running, here or in another instance, is `busy`.
     */
    async create (book: BookCreate, key?: string): Promise<CreateOutcome> {
      if (key === undefined) return creates.load({ book })
      if (keysInFlight.has(key)) return { outcome: 'busy' }
      keysInFlight.add(key)
      try {
        return await creates.load({ book, key: { key, fingerprint: fingerprint(book) } })
      } finally {
        keysInFlight.delete(key)
      }
    },

    find: (id: string): Promise<StoredBook | null> => finds.load(id),

    exists,

    /**
     * Updates the fields `patch` gives; with `versions`, only a book at one of them (If-Match).
     * `mismatch`: the book is there at another version, and nothing changed.
     */
    async update (id: string, patch: BookPatch, versions: number[] | null = null): Promise<StoredBook | 'missing' | 'mismatch'> {
      return await updates.load({ id, patch, versions }) ?? unchanged(id, versions)
    },

    /** Deletes a book; with `versions`, only a book at one of them (If-Match). */
    async delete (id: string, versions: number[] | null = null): Promise<'deleted' | 'missing' | 'mismatch'> {
      const { rowCount } = await query(DELETE, [id, versions])
      return rowCount === 1 ? 'deleted' : unchanged(id, versions)
    }
  }
}

export default fp(async function booksRepository (fastify) {
  fastify.decorate('booksRepository', createBooksRepository(fastify.pg, fastify.sqlDialect, fastify.tracing))
}, { name: 'books-repository', dependencies: ['postgres', 'migrate'] })

/**
 * Adds `fastify.importsRepository`, made by `createImportsRepository` (below): the books of an
 * import, spooled (src/import-spool.ts), stored all or nothing in one transaction, once per
 * idempotency key. Its statements are in src/db/imports-sql.ts.
 *
 * The transaction runs on a connection of its own for its whole length, with the bounds of every
 * transaction of the service (`BEGIN_BOUNDED`): each statement within the statement timeout, and
 * no wait for the client between two (the body is spooled before it begins). The books go in by
 * `COPY`, which node-postgres cannot send on the main pool's pipelining connections: imports take
 * their connections from a small pool of their own, one per import at once (`IMPORTS_AT_ONCE`; on
 * PGlite, one session that runs one transaction at a time, a single one), ended by an `onClose`
 * hook.
 */
import fp from 'fastify-plugin'
import pg, { type Pool, type PoolClient } from 'pg'
import { boundedQuery } from '../../src/db/bounded-query.js'
import { IS_PGLITE } from '../../src/db/embedded.js'
import { listenForLostConnections } from '../../src/db/lost-connections.js'
import { COPY_BYTES, copyIntoImport, CREATE_IMPORT_TABLE, INSERT_ROWS, STORE_KEY, STORED_KEY, TAKE_KEY, insertBooks } from '../../src/db/imports-sql.js'
import type { SqlDialect } from '../../src/db/dialect.js'
import { BEGIN_BOUNDED } from '../../src/db/time-bounds.js'
import type { IdRun } from '../../src/import-ids.js'
import type { ImportSpool } from '../../src/import-spool.js'
import { keyLock } from './books-repository.js'

declare module 'fastify' {
  interface FastifyInstance {
    importsRepository: ReturnType<typeof createImportsRepository>
  }
}

/** An import stored (`created`), or answered from its key (`replayed`): the ids, in input order. */
type ImportOutcome =
  | { outcome: 'created' | 'replayed', ids: IdRun[] }
  | { outcome: 'mismatch' | 'busy' }

interface ImportKey {
  key: string
  /** `importFingerprint` of the books, in order. */
  fingerprint: Buffer
}

/** Runs that follow each other without a gap are one. */
function appendRun (runs: IdRun[], run: IdRun) {
  const last = runs.at(-1)
  if (last !== undefined && last.first + last.count === run.first) last.count += run.count
  else runs.push(run)
}

/** The ids as PostgreSQL's `int8multirange` text, and back (the runs in ascending order: input order). */
const multirange = (runs: IdRun[]) => `{${runs.map(({ first, count }) => `[${first},${first + count})`).join(',')}}`
const runsOf = (text: string): IdRun[] => [...text.matchAll(/\[(\d+),(\d+)\)/g)].map(([, first, end]) => ({ first: Number(first), count: Number(end) - Number(first) }))

function createImportsRepository (pool: Pool, atOnce: number, insertRows: number, dialect: SqlDialect) {
  const INSERT_BOOKS = insertBooks(dialect.learnsWords)
  // Keys of imports in flight in this instance: PGlite's one session would grant the same lock twice
  const keysInFlight = new Set<string>()

  /** The import's transaction on `client`, begun; answers what it did, or the key's state. */
  async function storeOn (client: PoolClient, spool: ImportSpool, key: ImportKey | undefined, progress: () => void): Promise<ImportOutcome> {
    if (key !== undefined) {
      const { rows: [lock] } = await client.query<{ granted: boolean }>(TAKE_KEY, [keyLock(key.key)])
      if (lock?.granted !== true) return { outcome: 'busy' }
      const { rows: [stored] } = await client.query<{ fingerprint: Buffer, book_ids: string | null }>(STORED_KEY, [key.key])
      if (stored !== undefined) {
        // A key a single create stored has another fingerprint
        return stored.fingerprint.equals(key.fingerprint) && stored.book_ids !== null
          ? { outcome: 'replayed', ids: runsOf(stored.book_ids) }
          : { outcome: 'mismatch' }
      }
    }
    const ids: IdRun[] = []
    if (spool.count > 0) {
      await client.query(CREATE_IMPORT_TABLE)
      for await (const chunk of spool.chunks(COPY_BYTES)) {
        await copyIntoImport(client, chunk)
        progress()
      }
      for (let first = 1; first <= spool.count; first += insertRows) {
        const { rows } = await client.query<{ first: string, count: number }>(INSERT_BOOKS, [first, first + insertRows - 1])
        for (const run of rows) appendRun(ids, { first: Number(run.first), count: run.count })
        progress()
      }
    }
    if (key !== undefined) await client.query(STORE_KEY, [key.key, key.fingerprint, multirange(ids)])
    return { outcome: 'created', ids }
  }

  return {
    /** Imports the store takes at once: a connection each. */
    atOnce,

    /**
     * Stores every book of `spool` (flushed), in input order, or none; with a key, once: a
     * repeat with the same books answers the first import's ids (`replayed`, nothing stored),
     * other books `mismatch`; a key whose import or create is still running is `busy`.
     * `progress` is called after each chunk.
     */
    async store (spool: ImportSpool, key: ImportKey | undefined, progress: () => void = () => {}): Promise<ImportOutcome> {
      if (key !== undefined) {
        if (keysInFlight.has(key.key)) return { outcome: 'busy' }
        keysInFlight.add(key.key)
      }
      let client: PoolClient | undefined
      let failure: Error | undefined
      try {
        // A lost connection fails the pending query, which is how the import learns of it (src/db/lost-connections.ts)
        client = await pool.connect()
        await client.query(BEGIN_BOUNDED)
        const outcome = await storeOn(client, spool, key, progress)
        await client.query(outcome.outcome === 'created' ? 'COMMIT' : 'ROLLBACK')
        return outcome
      } catch (err) {
        failure = err as Error
        throw err
      } finally {
        if (key !== undefined) keysInFlight.delete(key.key)
        // After a failure the connection may still be in the transaction, or its statement still
        // running: discarded, never handed to another request
        client?.release(failure)
      }
    }
  }
}

export default fp(async function importsRepository (fastify) {
  const { rows: [store] } = await boundedQuery<{ pglite: boolean }>(fastify.pg.pool, { text: IS_PGLITE })
  // PGlite serves one transaction at a time: a second import would only wait for the first
  const atOnce = store!.pglite ? 1 : fastify.config.IMPORTS_AT_ONCE
  // The main pool's settings, without pipelining
  const { pipeline: _pipeline, max: _max, ...options } = fastify.pg.pool.options as pg.PoolConfig & { pipeline?: boolean }
  const pool = new pg.Pool({ ...options, max: atOnce })
  listenForLostConnections(pool, (err) => fastify.log.warn({ err }, 'idle import connection lost'))
  fastify.addHook('onClose', () => pool.end())
  fastify.decorate('importsRepository', createImportsRepository(pool, atOnce, store!.pglite ? INSERT_ROWS.pglite : INSERT_ROWS.server, fastify.sqlDialect))
}, { name: 'imports-repository', dependencies: ['postgres', 'migrate'] })

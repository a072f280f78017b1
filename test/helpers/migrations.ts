/**
 * What the migration tests (test/process/migration-*.test.ts) share: a table that holds many
 * books, the state of the indexes the migrations build, and a writer that goes on meanwhile.
 */
import type pg from 'pg'
import type { Test } from 'tap'
import { migrations } from '../../src/db/migrations.js'
import { pgClient } from './database.js'
import { sleep } from './wait.js'

/** Enough books that a build that blocked writes would block them for more than a second. */
export const BOOKS = 400_000
/** The most a migration may hold up a write (docs/operations.md, Start-up and migrations). */
export const WRITE_BOUND_MS = 1000

/** The indexes the migrations build, by name. */
export const indexes = migrations.flatMap(({ index }) => index === undefined ? [] : [index])
/** The named indexes (`$1`) that exist, and whether each is valid. */
export const INDEX_STATE = 'SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = ANY($1) ORDER BY c.relname'

/**
 * Writes books to `dbUrl` one after another, every 10 ms, until the returned `stop`: how many
 * writes, and the slowest in ms.
 */
export async function writeMeanwhile (t: Test, dbUrl: string, write: (writer: pg.Client) => Promise<unknown>) {
  const writer = await pgClient(t, dbUrl)
  let slowest = 0
  let writes = 0
  const writing = { on: true }
  const done = (async () => {
    while (writing.on) {
      const started = performance.now()
      await write(writer)
      slowest = Math.max(slowest, performance.now() - started)
      writes++
      await sleep(10)
    }
  })()
  return async () => {
    writing.on = false
    await done
    return { writes, slowest }
  }
}

import { setFlagsFromString } from 'node:v8'
import type { PGliteOptions } from '@electric-sql/pglite'
import { fuzzystrmatch } from '@electric-sql/pglite/contrib/fuzzystrmatch'
import { pg_trgm as pgTrgm } from '@electric-sql/pglite/contrib/pg_trgm'
import { unaccent } from '@electric-sql/pglite/contrib/unaccent'

/**
 * How the embedded store runs PGlite, for both the process that creates a cluster
 * (src/db/embedded-create.ts) and the worker that serves it (src/db/embedded-worker.ts). Each
 * choice is in docs/operations.md (The embedded database), its measurements in
 * docs/performance.md (The embedded store: start and memory). This module does not load PGlite
 * itself: the service's own thread imports it too, and has no use for PGlite's code.
 */

/**
 * PostgreSQL's settings, on top of PGlite's own start parameters. Given at every start, not
 * written into the cluster, so directories created before them get them too. PGlite runs
 * PostgreSQL in single-user mode: one backend and no background processes; the service sends it
 * one statement at a time (a pool of one, plugins/external/postgres.ts), and listings read it in
 * pages of 500 to 8,000 rows (src/listing-stream.ts).
 *
 * - `shared_buffers=8MB` (PGlite's clusters say 128MB): the buffers are part of PGlite's
 *   WebAssembly memory, which never shrinks, and PostgreSQL touches all of them at start. A page
 *   not in them is read from the directory through the operating system's file cache (for
 *   `pglite:memory`, copied from memory), so reads by primary key and whole listings are no
 *   slower than with 128 MB (docs/performance.md, The embedded store: start and memory).
 * - `max_connections=5`, `autovacuum_worker_slots=1`, `max_wal_senders=0` (100, 16, 10): they
 *   size the shared memory kept for backends and processes that single-user mode never starts.
 * - `max_wal_size=64MB`, `min_wal_size=32MB` (1GB, 80MB): with no checkpointer, single-user
 *   mode checkpoints when this much WAL has accumulated, and for `pglite:memory` the WAL is
 *   memory. 32MB is the least allowed for the 16 MB segments of directories created before
 *   `INITDB_ARGS`.
 */
const POSTGRES_SETTINGS = [
  'shared_buffers=8MB',
  'max_connections=5',
  'autovacuum_worker_slots=1',
  'max_wal_senders=0',
  'max_wal_size=64MB',
  'min_wal_size=32MB'
]

/**
 * initdb's arguments for a new cluster, on top of PGlite's: WAL segments of 1 MB instead of 16,
 * so a new cluster is 31 MB of files rather than 40 (a whole segment is written at once), which
 * `pglite:memory` holds in memory and the tests copy for every database.
 */
export const INITDB_ARGS = ['--wal-segsize=1']

/**
 * PGlite's options: its own start parameters (`PGlite.defaultStartParams`) and ours, and the
 * extensions the migrations create (src/db/migrations.ts: pg_trgm, unaccent, fuzzystrmatch): PGlite
 * loads an extension's code only when it is named here, and then only once a statement uses it.
 */
export function pgliteOptions (defaultStartParams: readonly string[]): PGliteOptions {
  return {
    startParams: [...defaultStartParams, ...POSTGRES_SETTINGS.flatMap((setting) => ['-c', setting])],
    initDbStartParams: INITDB_ARGS,
    extensions: { pg_trgm: pgTrgm, unaccent, fuzzystrmatch }
  }
}

/**
 * V8 runs WebAssembly with its baseline compiler first and recompiles a function with its
 * optimizing one once the function has run for a budget (1,800,000, about as many bytes of
 * code executed). PostgreSQL's functions are large: what the optimizing compiler makes of the
 * ones that starting the store makes hot takes much memory, and the process keeps it
 * (docs/performance.md, The embedded store: start and memory). With a budget 555 times V8's,
 * only functions that keep running long get recompiled. V8's flags are the process's: this
 * applies to any WebAssembly it runs from then on (the service runs no other).
 */
export const WASM_TIERING_BUDGET_FLAG = '--wasm-tiering-budget=1000000000'

/** For a thread that is not the process's first; before PGlite compiles its WebAssembly. */
export function setWasmTieringBudget () {
  setFlagsFromString(WASM_TIERING_BUDGET_FLAG)
}

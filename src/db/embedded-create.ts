import { writeFile } from 'node:fs/promises'
import { PGlite } from '@electric-sql/pglite'
import { PGLiteSocketServer } from '@electric-sql/pglite-socket'
import { pgliteOptions } from './embedded-settings.js'
import { migrate } from './migrate.js'

/**
 * Creates a new cluster of the embedded store, in a process of its own that src/db/embedded.ts
 * starts: `node embedded-create.js <directory>`, or `node embedded-create.js memory:// <file>`.
 *
 * Creating a cluster runs initdb, which takes the process's memory far past what serving the
 * store needs: PGlite's WebAssembly memories (initdb's own PostgreSQL among them), which never
 * shrink while they live, and the C heap, which keeps much of what is freed. The worker that
 * serves the store would keep most of it for as long as the service runs, and a worker thread
 * that ends leaves the C heap's part behind (the C heap is the process's). A process gives all
 * of it back when it ends.
 *
 * It also brings the new cluster's tables up to date, with the migration the service runs at
 * every start (src/db/migrate.ts, through a loopback port as the service reaches the store): run
 * by the serving worker, the migrations' statements (building the indexes, loading pg_trgm and
 * PL/pgSQL) would leave it holding more than a restart of the same directory holds, for as long
 * as it runs (docs/performance.md, The embedded store: start and memory).
 *
 * For a directory it leaves the cluster there, shut down cleanly. For `memory://` it writes the
 * cluster as a tar to `<file>`, for the serving worker to start from. Exits 0 once done; on
 * failure it sends `{ error }` on the IPC channel `fork` gives it, and exits 1.
 */
/** The migration's progress goes nowhere: the service logs the start of its store. */
const quiet = { info () {}, warn () {} }

async function create (dataDir: string, file: string | undefined) {
  const db = await PGlite.create(dataDir, pgliteOptions(PGlite.defaultStartParams))
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0 })
  await server.start()
  try {
    await migrate({ connectionString: `postgres://postgres@${server.getServerConn()}/postgres`, applicationName: 'bookkeeping', log: quiet })
  } finally {
    await server.stop()
  }
  if (file !== undefined) await writeFile(file, Buffer.from(await (await db.dumpDataDir('none')).arrayBuffer()))
  await db.close()
}

// The parent may be gone (killed while this ran): then there is no one to tell
const done = () => { if (process.connected) process.disconnect() }
create(process.argv[2]!, process.argv[3]).then(done, (err: Error) => {
  process.exitCode = 1
  if (process.connected) process.send!({ error: err.message }, done)
})

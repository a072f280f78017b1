import { readFile } from 'node:fs/promises'
import { parentPort, workerData } from 'node:worker_threads'
import { PGlite } from '@electric-sql/pglite'
import { PGLiteSocketServer } from '@electric-sql/pglite-socket'

/**
 * The worker thread of the embedded store (src/db/embedded.ts): PGlite, and pglite-socket
 * serving it on a loopback port. PGlite runs queries in the thread that calls it; here that
 * thread is not the one answering HTTP, so a long listing page does not stall the service.
 *
 * workerData: `{ dataDir, template? }`: a directory or `memory://`, and a data directory dumped
 * by `dumpTemplate` to start from instead of creating a new cluster (seconds faster). Posts `{ port }` once listening,
 * `{ error }` if it could not start; on the message 'stop' it closes the server and the
 * database (flushing it to disk) and posts 'stopped'.
 */
const { dataDir, template } = workerData as { dataDir: string, template?: string }
const port = parentPort!

async function main () {
  const db = template === undefined
    ? await PGlite.create(dataDir)
    : await PGlite.create(dataDir, { loadDataDir: new Blob([await readFile(template)]) })
  // Enough for the service's pool (one connection, see plugins/external/postgres.ts), its
  // health checks and a few tools; pglite-socket runs them one query at a time
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: 16 })
  await server.start()
  const [, listening] = server.getServerConn().split(':')
  port.on('message', (message) => {
    if (message === 'dump') {
      db.dumpDataDir('none').then(
        async (dump) => port.postMessage({ dump: Buffer.from(await dump.arrayBuffer()) }),
        (err: Error) => port.postMessage({ error: err.message }))
      return
    }
    if (message !== 'stop') return
    server.stop()
      .then(() => db.close())
      .finally(() => port.postMessage('stopped'))
  })
  port.postMessage({ port: Number(listening) })
}

main().catch((err: Error) => port.postMessage({ error: err.message }))

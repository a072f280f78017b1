import { parentPort, workerData } from 'node:worker_threads'
import { PGlite } from '@electric-sql/pglite'
import { PGLiteSocketServer } from '@electric-sql/pglite-socket'

/**
 * The worker thread of the embedded store (src/db/embedded.ts): PGlite, and pglite-socket
 * serving it on a loopback port. PGlite runs queries in the thread that calls it; here that
 * thread is not the one answering HTTP, so a long listing page does not stall the service.
 *
 * workerData: `{ dataDir }`, a directory or `memory://`. Posts `{ port }` once listening,
 * `{ error }` if it could not start; on the message 'stop' it closes the server and the
 * database (flushing it to disk) and posts 'stopped'.
 */
const { dataDir } = workerData as { dataDir: string }
const port = parentPort!

async function main () {
  const db = await PGlite.create(dataDir)
  // Enough for the service's pool (one connection, see plugins/external/postgres.ts), its
  // health checks and a few tools; pglite-socket runs them one query at a time
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: 16 })
  await server.start()
  const [, listening] = server.getServerConn().split(':')
  port.on('message', (message) => {
    if (message !== 'stop') return
    server.stop()
      .then(() => db.close())
      .finally(() => port.postMessage('stopped'))
  })
  port.postMessage({ port: Number(listening) })
}

main().catch((err: Error) => port.postMessage({ error: err.message }))

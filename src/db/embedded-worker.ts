import { openAsBlob } from 'node:fs'
import { parentPort, workerData } from 'node:worker_threads'
import { PGlite } from '@electric-sql/pglite'
import { pgliteOptions, setWasmTieringBudget } from './embedded-settings.js'
import { serveOnLoopback } from './embedded-socket.js'

/**
 * The worker thread of the embedded store (src/db/embedded.ts): PGlite, and pglite-socket
 * serving it on a loopback port (src/db/embedded-socket.ts). PGlite runs queries in the thread
 * that calls it; here that thread is not the one answering HTTP, so a long listing page does not
 * stall the service.
 *
 * It never creates a cluster (src/db/embedded-create.ts does, in a process of its own): the
 * directory holds one already, or `clusterFile` is a data directory as a tar (a new cluster, or
 * a template written by `dump()`) to start from. Posts `{ port }` once listening, `{ error }` if
 * it could not start; on the message 'dump' posts the data directory as a tar (`{ dump }`); on
 * 'stop' it closes the server and the database (flushing it to disk) and posts 'stopped'.
 */
export interface EmbeddedWorkerData {
  /** A directory, or `memory://`. */
  dataDir: string
  clusterFile?: string
}

const { dataDir, clusterFile } = workerData as EmbeddedWorkerData
const port = parentPort!

async function main () {
  setWasmTieringBudget()
  // A Blob backed by the file: PGlite reads it once, into the in-memory file system
  const loadDataDir = clusterFile === undefined ? undefined : await openAsBlob(clusterFile)
  const db = await PGlite.create(dataDir, { ...pgliteOptions(PGlite.defaultStartParams), loadDataDir })
  const { server, port: listening } = await serveOnLoopback(db)
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
  port.postMessage({ port: listening })
}

main().catch((err: Error) => port.postMessage({ error: err.message }))

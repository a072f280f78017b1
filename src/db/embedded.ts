import path from 'node:path'
import { Worker } from 'node:worker_threads'

/** What DB_URL names when the store is PGlite: `pglite:memory` or `pglite:<directory>`. */
export const EMBEDDED_PREFIX = 'pglite:'

export interface EmbeddedStore {
  /** A `postgres://` URL of the running store, for node-postgres. */
  url: string
  /** Closes the store; its directory then holds everything written. */
  stop (): Promise<void>
}

export function isEmbedded (dbUrl: string): boolean {
  return dbUrl.startsWith(EMBEDDED_PREFIX)
}

/**
 * Starts PGlite (PostgreSQL compiled to WebAssembly) in a worker thread, served on a loopback
 * port, so the service reaches it like any PostgreSQL server: same driver, same SQL, same
 * migrations. `location` is `memory` (nothing kept) or a directory, created if missing.
 */
export async function startEmbedded (location: string, onFailure: (err: Error) => void): Promise<EmbeddedStore> {
  const dataDir = location === 'memory' ? 'memory://' : path.resolve(location)
  // Compiled, this module sits beside embedded-worker.js; under the tests' TypeScript loader,
  // beside embedded-worker.ts, which the worker loads the same way (it inherits execArgv)
  const worker = new Worker(path.join(__dirname, `embedded-worker${path.extname(__filename)}`), { workerData: { dataDir } })
  const started = await new Promise<{ port?: number, error?: string }>((resolve) => {
    const settle = (outcome: { port?: number, error?: string }) => {
      // Only these: Worker keeps listeners of its own
      worker.off('message', settle).off('error', failed).off('exit', exited)
      resolve(outcome)
    }
    const failed = (err: Error) => settle({ error: err.message })
    const exited = (code: number) => settle({ error: `the worker exited (${code})` })
    worker.on('message', settle).on('error', failed).on('exit', exited)
  })
  // A worker that fails later takes the store with it: queries then fail (503) and readiness
  // says so; an unheard 'error' event would end the whole process instead
  worker.on('error', onFailure)
  if (started.error !== undefined || started.port === undefined) {
    await worker.terminate()
    throw new Error(`cannot start the embedded database in ${dataDir}: ${started.error}`)
  }
  return {
    url: `postgres://postgres@127.0.0.1:${started.port}/postgres`,
    async stop () {
      const stopped = new Promise((resolve) => {
        worker.on('message', (message) => message === 'stopped' && resolve(message))
        worker.once('exit', resolve)
      })
      worker.postMessage('stop')
      await stopped
      await worker.terminate()
    }
  }
}

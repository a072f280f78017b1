import path from 'node:path'
import { Worker } from 'node:worker_threads'

/** What DB_URL names when the store is PGlite: `pglite:memory` or `pglite:<directory>`. */
export const EMBEDDED_PREFIX = 'pglite:'

export interface EmbeddedStore {
  /** A `postgres://` URL of the running store, for node-postgres. */
  url: string
  /** The whole data directory as a tar file, to start other stores from (`template`). */
  dump (): Promise<Buffer>
  /** Closes the store; its directory then holds everything written. */
  stop (): Promise<void>
}

/**
 * Compiled, this module sits beside embedded-worker.js. Run as TypeScript (the tests), it uses
 * the compiled worker too (`npm test` builds first): a worker that loaded TypeScript would
 * take over a second longer to start, for every database the tests create.
 */
function workerFile (): string {
  const root = path.resolve(__dirname, '..', '..')
  return __filename.endsWith('.js')
    ? path.join(__dirname, 'embedded-worker.js')
    : path.join(root, 'dist', 'src', 'db', 'embedded-worker.js')
}

export function isEmbedded (dbUrl: string): boolean {
  return dbUrl.startsWith(EMBEDDED_PREFIX)
}

/**
 * Starts PGlite (PostgreSQL compiled to WebAssembly) in a worker thread, served on a loopback
 * port, so the service reaches it like any PostgreSQL server: same driver, same SQL, same
 * migrations. `location` is `memory` (nothing kept) or a directory, created if missing;
 * `template`, a file written from `dump()`, starts it with that content instead of empty.
 */
export async function startEmbedded (
  location: string, onFailure: (err: Error) => void, { template }: { template?: string } = {}
): Promise<EmbeddedStore> {
  const dataDir = location === 'memory' ? 'memory://' : path.resolve(location)
  const worker = new Worker(workerFile(), { workerData: { dataDir, template }, execArgv: [] })
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
    dump () {
      return new Promise((resolve, reject) => {
        worker.once('message', (answer: { dump?: Uint8Array, error?: string }) => {
          if (answer.dump !== undefined) resolve(Buffer.from(answer.dump))
          else reject(new Error(answer.error))
        })
        worker.postMessage('dump')
      })
    },
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

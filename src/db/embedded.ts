import { fork } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Worker } from 'node:worker_threads'
import { lockDataDir } from './data-dir-lock.js'
import { WASM_TIERING_BUDGET_FLAG } from './embedded-settings.js'
import type { EmbeddedWorkerData } from './embedded-worker.js'

/** What DB_URL names when the store is PGlite: `pglite:memory` or `pglite:<directory>`. */
export const EMBEDDED_PREFIX = 'pglite:'

/**
 * Whether a connection reached PGlite, as PGlite names itself in its version ("PostgreSQL 18.6
 * (PGlite 0.5.14) on wasm32-unknown-emscripten, ..."): the tests reach theirs by `postgres://`
 * URLs, whatever `DB_URL` would say.
 */
export const IS_PGLITE = "SELECT version() LIKE '%(PGlite %' AS pglite"

export interface EmbeddedStore {
  /** A `postgres://` URL of the running store, for node-postgres. */
  url: string
  /** The whole data directory as a tar file, to start other stores from (`template`). */
  dump (): Promise<Buffer>
  /** Closes the store; its directory then holds everything written. */
  stop (): Promise<void>
}

/** The file `name` beside this module, compiled as this one is (the worker, the creating process). */
function compiled (name: string): string {
  return path.join(import.meta.dirname, name)
}

export function isEmbedded (dbUrl: string): boolean {
  return dbUrl.startsWith(EMBEDDED_PREFIX)
}

/**
 * The worker's first message, or `{ error }`: the worker's own, or its 'error' event, or its exit
 * before it said anything.
 */
function firstMessage<T> (worker: Worker): Promise<T | { error: string }> {
  return new Promise((resolve) => {
    const settle = (outcome: T | { error: string }) => {
      // Only these: Worker keeps listeners of its own
      worker.off('message', settle).off('error', failed).off('exit', exited)
      resolve(outcome)
    }
    const failed = (err: Error) => settle({ error: err.message })
    const exited = (code: number) => settle({ error: `the worker exited (${code})` })
    worker.on('message', settle).on('error', failed).on('exit', exited)
  })
}

/**
 * Creates a new cluster in a process of its own (src/db/embedded-create.ts), which gives back
 * the memory initdb took when it ends: in the directory, or for `memory://` as a tar in `file`.
 */
async function createCluster (dataDir: string, file?: string): Promise<void> {
  const child = fork(compiled('embedded-create.js'), file === undefined ? [dataDir] : [dataDir, file], {
    // Faster too: initdb's functions are not recompiled while it runs
    execArgv: [WASM_TIERING_BUDGET_FLAG],
    // What went wrong comes as a message: a failed start-up is one line on stderr
    stdio: ['ignore', 'ignore', 'ignore', 'ipc']
  })
  let failure: string | undefined
  child.on('message', (message: { error: string }) => { failure = message.error })
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject).once('exit', (code, signal) => resolve([code, signal]))
  })
  if (failure !== undefined) throw new Error(failure)
  if (code !== 0) throw new Error(`creating the cluster ended with ${signal ?? `exit code ${code}`}`)
}

/**
 * A new cluster in the directory `dataDir`, whole or not at all: created beside it and renamed
 * into place, so a creation cut short (Ctrl-C in its first seconds) leaves no half-made cluster
 * that the next start would take for one. The caller holds the directory's lock, so the
 * `.partial` beside it is its own, or one left by a creation cut short.
 */
async function createDirectoryCluster (dataDir: string): Promise<void> {
  const holdsFiles = () => new Error('it holds files but no database; set DB_URL to a new or empty directory')
  // Told at once rather than after the seconds of a creation; the rename checks again
  if ((await fs.promises.readdir(dataDir).catch(() => [])).length > 0) throw holdsFiles()
  const partial = `${dataDir}.partial`
  await fs.promises.rm(partial, { recursive: true, force: true })
  await createCluster(partial)
  try {
    // Onto a missing or empty directory only
    await fs.promises.rename(partial, dataDir)
  } catch (err) {
    await fs.promises.rm(partial, { recursive: true, force: true })
    if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY') throw err
    throw holdsFiles()
  }
}

/** Whether `dataDir` holds a cluster, as PGlite itself tells. */
function hasCluster (dataDir: string): boolean {
  return fs.existsSync(path.join(dataDir, 'PG_VERSION'))
}

/**
 * Starts PGlite (PostgreSQL compiled to WebAssembly) in a worker thread, served on a loopback
 * port, so the service reaches it like any PostgreSQL server: same driver, same SQL, same
 * migrations. `location` is `memory` (nothing kept) or a directory, created if missing;
 * `template`, a file written from `dump()`, starts it with that content instead of empty.
 * A new cluster is created first, by a process of its own (`createCluster`); for `memory` it
 * comes as a tar in a temporary directory, removed once the worker has read it.
 */
export async function startEmbedded (
  location: string, onFailure: (err: Error) => void, { template }: { template?: string } = {}
): Promise<EmbeddedStore> {
  const dataDir = location === 'memory' ? 'memory://' : path.resolve(location)
  const cannotStart = (reason: string) => new Error(`cannot start the embedded database in ${dataDir}: ${reason}`)
  let clusterFile = template
  let scratch: string | undefined
  // Released when the store stops, or fails to start
  let release = () => {}
  try {
    if (dataDir !== 'memory://') release = lockDataDir(dataDir)
    if (template === undefined && dataDir === 'memory://') {
      scratch = await fs.promises.mkdtemp(path.join(os.tmpdir(), 'bookkeeping-pglite-'))
      clusterFile = path.join(scratch, 'cluster.tar')
      await createCluster(dataDir, clusterFile)
    } else if (template === undefined && !hasCluster(dataDir)) {
      await createDirectoryCluster(dataDir)
    }
  } catch (err) {
    if (scratch !== undefined) await fs.promises.rm(scratch, { recursive: true, force: true })
    release()
    throw cannotStart((err as Error).message)
  }
  const data: EmbeddedWorkerData = { dataDir, clusterFile }
  const worker = new Worker(compiled('embedded-worker.js'), { workerData: data, execArgv: [] })
  const started = await firstMessage<{ port: number }>(worker)
  if (scratch !== undefined) await fs.promises.rm(scratch, { recursive: true, force: true })
  if ('error' in started) {
    await worker.terminate()
    release()
    throw cannotStart(started.error)
  }
  // A worker that fails later takes the store with it: queries then fail (503) and readiness
  // says so; an unheard 'error' event would end the whole process instead
  worker.on('error', onFailure)
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
      release()
    }
  }
}

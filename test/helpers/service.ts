/**
 * The service as a real process, started exactly as `npm start` (or `npm run dev`) starts it, so
 * `npm run build` must have run, for the tests under test/process/.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { request as httpRequest } from 'node:http'
import { connect, createServer } from 'node:net'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { onExit } from 'signal-exit'
import type { Test } from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'
import type { Book, BookCreate } from '../../src/schemas/book.js'
import { PASSWORD, USERNAME } from '../helper.js'
import { withTimeout } from './wait.js'

/**
 * How long a process may take to come up or to go away, when a test bounds it no closer: they
 * catch a hang, they are not the service's promises. Generous, because the process tier keeps a
 * 2-core machine busy with six files at once, and there a start that creates its PGlite (six
 * seconds of CPU on a slow core) can wait ten times as long.
 */
const START_TIMEOUT = 60_000
const EXIT_TIMEOUT = 30_000

/**
 * The process groups of the services this test process started that may still run. Each leads a
 * group of its own, so nothing stops it when this process ends before its teardowns: tap ends a
 * file that overruns its timeout (SIGALRM). Whatever is left then is killed on the way out.
 */
const groupsLeft = new Set<number>()
onExit(() => {
  for (const group of groupsLeft) {
    try {
      process.kill(-group, 'SIGKILL')
    } catch {
      // Gone already
    }
  }
})

/** The resident memory of process `pid`, in MiB (Linux). */
export function residentMiB (pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return Number(match?.[1]) / 1024
}

/**
 * A TCP port on 127.0.0.1 that nothing listens on: one the system picked for a listener that is
 * closed again. For a database that is not there; never to listen on again (a test's own
 * servers listen on port 0).
 */
export async function closedPort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve))
  const address = server.address()
  await new Promise((resolve) => server.close(resolve))
  if (address === null || typeof address === 'string') throw new Error('no port')
  return address.port
}

/** A listener on 127.0.0.1, on a port the system picked, held until the test ends: a port in use. */
export async function portInUse (t: Test): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  return (server.address() as { port: number }).port
}

/** The state PostgreSQL's control file in `dataDir` records (a PGlite directory). */
export function clusterState (dataDir: string): number {
  // ControlFileData: system_identifier (8 bytes), pg_control_version, catalog_version_no (4 each), state
  return readFileSync(join(dataDir, 'global', 'pg_control')).readInt32LE(16)
}
/** `clusterState` after a clean shutdown; 6 while running or after a crash. */
export const DB_SHUTDOWNED = 1

/** A directory of its own for a service's data, removed when the test ends. */
export function temporaryDirectory (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'bookkeeping-test-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * `refused` when nothing listens on 127.0.0.1:`port`, `connected` when something accepts, `reset`
 * when the connection was dropped while being set up (a listener closing at that moment).
 */
export function probe (port: number, ms = 2000): Promise<'refused' | 'connected' | 'reset'> {
  return withTimeout(new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' })
    socket.once('connect', () => {
      socket.destroy()
      resolve('connected')
    })
    socket.once('error', (err: NodeJS.ErrnoException) => {
      socket.destroy()
      if (err.code === 'ECONNREFUSED') resolve('refused')
      else if (err.code === 'ECONNRESET') resolve('reset')
      else reject(err)
    })
  }), ms, `connecting to port ${port}`)
}

/** A line of the service's log: pino's fields, and whatever the line adds. */
export interface LogLine {
  level: number
  time: number
  msg: string
  [field: string]: unknown
}

export interface Exit {
  code: number | null
  signal: NodeJS.Signals | null
}

/**
 * One service process as `npm start` runs it, with what it printed so far. `child` is the process
 * the test spawned, the leader of a process group of its own: the server itself, or npm when the
 * test started it through npm.
 */
export class Service {
  stdout = ''
  stderr = ''
  exit: Exit | null = null
  readonly exited: Promise<Exit>
  #host: string | null = null
  #port: number | null = null
  #serverPid: number | null = null
  #waiters = new Set<() => void>()

  constructor (readonly child: ChildProcess) {
    child.stdout?.setEncoding('utf8')
    child.stderr?.setEncoding('utf8')
    child.stdout?.on('data', (chunk: string) => { this.stdout += chunk; this.#notify() })
    child.stderr?.on('data', (chunk: string) => { this.stderr += chunk; this.#notify() })
    this.exited = new Promise((resolve) => {
      // 'close' rather than 'exit': by then stdout and stderr have been read to the end
      child.once('close', (code, signal) => {
        this.exit = { code, signal }
        this.#notify()
        resolve(this.exit)
      })
    })
  }

  #notify () {
    for (const waiter of this.#waiters) waiter()
  }

  /** The port the system gave the service's listener (it listens on port 0), once it listens. */
  get port (): number {
    if (this.#port === null) throw new Error('the service has not said where it listens yet')
    return this.#port
  }

  /** The pid of the server process (it logs it), `child` itself unless npm started it. */
  get serverPid (): number {
    if (this.#serverPid === null) throw new Error('the service has not said where it listens yet')
    return this.#serverPid
  }

  /** The address the service logged first where it listens: 127.0.0.1 unless HOST said otherwise. */
  get host (): string {
    if (this.#host === null) throw new Error('the service has not said where it listens yet')
    return this.#host
  }

  get url (): string {
    return `http://${this.host}:${this.port}`
  }

  /** Whether no process of the service's process group is left (none orphaned, none listening). */
  get processGroupGone (): boolean {
    try {
      process.kill(-this.child.pid!, 0)
      return false
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ESRCH') return true
      throw err
    }
  }

  /**
   * The lines the service has logged so far, parsed (pino's JSON, one object a line); whole lines
   * only, as the last one may still be arriving.
   */
  logLines (): LogLine[] {
    return this.stdout.split('\n').slice(0, -1).filter(Boolean).map((line) => JSON.parse(line) as LogLine)
  }

  /** What the process printed, for failure messages. */
  get output (): string {
    return `--- stdout ---\n${this.stdout}\n--- stderr ---\n${this.stderr}`
  }

  /** Resolves once `condition` holds, checked on every output chunk and at exit. */
  waitFor (condition: () => boolean, ms: number, label: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        let holds: boolean
        try {
          holds = condition()
        } catch (err) {
          done()
          reject(err)
          return
        }
        if (holds) {
          done()
          resolve()
        }
      }
      const timer = setTimeout(() => {
        done()
        reject(new Error(`timed out after ${ms} ms waiting for ${label}\n${this.output}`))
      }, ms)
      const done = () => {
        clearTimeout(timer)
        this.#waiters.delete(check)
      }
      this.#waiters.add(check)
      check()
    })
  }

  /** Resolves when the server logs where it listens; rejects if the process exits first. */
  async listening (ms = START_TIMEOUT): Promise<void> {
    await this.waitFor(() => {
      // Whole lines only: the last one may still be arriving
      const line = this.stdout.split('\n').slice(0, -1).find((line) => line.includes('"Server listening at http://'))
      if (line !== undefined) {
        const { pid, msg } = JSON.parse(line) as { pid: number, msg: string }
        const [, host, port] = /http:\/\/(.+):(\d+)$/.exec(msg) ?? []
        this.#serverPid = pid
        this.#host = host ?? null
        this.#port = Number(port)
        return true
      }
      if (this.exit !== null) throw new Error(`service exited before listening: ${JSON.stringify(this.exit)}\n${this.output}`)
      return false
    }, ms, 'the service to listen')
  }

  /** The exit status, or a rejection when the process is still running after `ms`. */
  async waitForExit (ms = EXIT_TIMEOUT): Promise<Exit> {
    await this.waitFor(() => this.exit !== null, ms, 'the service to exit')
    return this.exit!
  }

  /**
   * An HTTP request over a real socket; the body is parsed as JSON. Each on a connection of its
   * own, closed after the answer (`Connection: close`), so no idle keep-alive connection of the
   * test holds a shutdown back.
   */
  async request (method: string, path: string, options: { token?: string, body?: unknown, ms?: number } = {}) {
    const headers: Record<string, string> = {}
    if (options.token !== undefined) headers.authorization = options.token
    if (options.body !== undefined) headers['content-type'] = 'application/json'
    const label = `${method} ${path}`
    const ms = options.ms ?? 10_000
    const response = await new Promise<{ status: number, headers: Headers, text: string }>((resolve, reject) => {
      const req = httpRequest(`${this.url}${path}`, { method, headers, agent: false }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => { text += chunk })
        res.on('error', reject)
        res.on('end', () => {
          const received = new Headers()
          for (const [name, value] of Object.entries(res.headers)) {
            for (const one of [value ?? []].flat()) received.append(name, one)
          }
          resolve({ status: res.statusCode ?? 0, headers: received, text })
        })
      })
      req.on('error', reject)
      const timer = setTimeout(() => req.destroy(new Error(`${label}: no whole answer within ${ms} ms`)), ms)
      req.on('close', () => clearTimeout(timer))
      req.end(options.body === undefined ? undefined : JSON.stringify(options.body))
    })
    let body: unknown
    try {
      body = JSON.parse(response.text)
    } catch {
      throw new Error(`${label}: ${response.status} with a body that is not JSON: ${response.text}`)
    }
    return { ...response, body }
  }

  async token (): Promise<string> {
    const response = await this.request('POST', '/token', { body: { username: USERNAME, password: PASSWORD } })
    if (response.status !== 200) throw new Error(`POST /token answered ${response.status}: ${response.text}`)
    return (response.body as { data: { token: string } }).data.token
  }

  /** Stores `book` with `POST /book`, for a test's setup: anything but a 201 throws. */
  async createBook (token: string, book: BookCreate): Promise<Book> {
    const response = await this.request('POST', '/book', { token, body: book })
    if (response.status !== 201) throw new Error(`POST /book answered ${response.status}: ${response.text}`)
    return (response.body as { data: Book }).data
  }
}

const SCRIPTS: { start: string, dev: string } = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')).scripts

/** `npm start`'s own command line (its `prestart` build is `npm test`'s `pretest`). */
const START_COMMAND = SCRIPTS.start

/**
 * `command` run without tap's process-info hook. Under tap's runner (`npx tap <file>`; the tiers
 * use test/run-files.js) it is in NODE_OPTIONS of every process a test spawns, whatever
 * environment the test gives, and in every process those spawn:
 * a loader thread and a hook on every module loaded, which make the service start slower and
 * hold more memory than it does for its users. Services run as users run them.
 */
export function withoutTapHook (command: string): string {
  return `unset NODE_OPTIONS; ${command}`
}

/** `npm run dev`'s own command line, without its build (`predev`, which `npm test`'s `pretest` has done). */
export const DEV_COMMAND = SCRIPTS.dev

/**
 * Starts the service exactly as `npm start` does: its command line run by `sh -c`, as npm runs
 * a script (or another `command`, such as `DEV_COMMAND` or `exec npm start`), in `cwd` (the
 * project's root unless given), with `env` (plus PATH and HOME) as its whole environment,
 * listening on 127.0.0.1 on a port the system picks (`HOST=127.0.0.1`, `PORT=0`, unless `env`
 * says otherwise; a variable given as undefined is left unset; see `listening()`). The script's
 * `exec` makes the service the spawned process itself, so signals reach it directly; it leads a
 * process group of its own. Whatever of the group still runs when the test ends is killed.
 */
export async function spawnService (
  t: Test, env: Record<string, string | undefined>, command = START_COMMAND, cwd = PROJECT_ROOT
): Promise<Service> {
  const given = Object.entries({ HOST: '127.0.0.1', PORT: '0', ...env })
    .filter((entry): entry is [string, string] => entry[1] !== undefined)
  const child = spawn('/bin/sh', ['-c', withoutTapHook(command)], {
    cwd,
    env: {
      PATH: `${join(PROJECT_ROOT, 'node_modules/.bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: process.env.HOME ?? '/tmp',
      ...Object.fromEntries(given)
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  })
  const service = new Service(child)
  groupsLeft.add(child.pid!)
  t.teardown(async () => {
    // What the process printed is the first thing to read when a test of it failed
    if (!t.passing()) t.comment(`service exit ${JSON.stringify(service.exit)}\n${service.output}`)
    if (!service.processGroupGone) {
      try {
        process.kill(-child.pid!, 'SIGKILL')
      } catch (err) {
        // Gone in the meantime
        if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err
      }
    }
    if (service.exit === null) await withTimeout(service.exited, EXIT_TIMEOUT, 'the killed service to exit')
    groupsLeft.delete(child.pid!)
  })
  return service
}

/** Starts the service and waits until it listens. */
export async function startService (t: Test, env: Record<string, string>): Promise<Service> {
  const service = await spawnService(t, env)
  await service.listening()
  return service
}

const STACK_FRAME = '    at '

export function nonEmptyLines (text: string): string[] {
  return text.split('\n').filter((line) => line.trim() !== '')
}

/**
 * Starts the service with `env` (and `command`, `cwd`: see `spawnService`) and expects it to
 * refuse: exit code 1 of its own, stderr ending with the one line of the failure, matching
 * `line` (under `npm start` the only line; `npm run dev` prints its set-up before), no stack
 * trace anywhere (a log line on stdout may tell the same), none of `secrets` anywhere, no
 * process left behind (none listening, none orphaned).
 */
export async function expectStartupFailure (
  t: Test, env: Record<string, string | undefined>, line: string | RegExp,
  { secrets = [], command = START_COMMAND, cwd = PROJECT_ROOT }: { secrets?: string[], command?: string, cwd?: string } = {}
): Promise<Service> {
  const service = await spawnService(t, env, command, cwd)
  const exit = await service.waitForExit(START_TIMEOUT)
  t.strictSame(exit, { code: 1, signal: null }, 'exits by itself with code 1')
  const lines = nonEmptyLines(service.stderr)
  if (command === START_COMMAND) t.equal(lines.length, 1, 'stderr holds exactly one line')
  t.equal(lines.filter((printed) => printed.startsWith('bookkeeping: ')).length, 1, 'one line tells the failure')
  t.match(lines.at(-1), line, 'the last line says what is wrong')
  t.notMatch(service.stdout + service.stderr, STACK_FRAME, 'no stack trace')
  for (const secret of secrets) {
    t.notMatch(service.stdout + service.stderr, secret, 'no secret or password in the output')
  }
  t.notMatch(service.stdout, 'Server listening', 'it never listened')
  t.ok(service.processGroupGone, 'no process of it is left')
  return service
}

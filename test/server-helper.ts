import { spawn, type ChildProcess } from 'node:child_process'
import { connect, createServer } from 'node:net'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import pg from 'pg'
import type { Test } from 'tap'
import { PASSWORD, USERNAME } from './helper.js'
export { databaseName } from './helper.js'

/**
 * The repository root, where `npm start` runs and so do these processes: the nearest folder with
 * a package.json (this file also runs compiled, from dist/test).
 */
function findRoot (dir: string): string {
  if (existsSync(join(dir, 'package.json'))) return dir
  const parent = dirname(dir)
  if (parent === dir) throw new Error(`no package.json above ${__dirname}`)
  return findRoot(parent)
}
export const ROOT = findRoot(__dirname)

/** How long a process may take to come up or to go away. */
export const START_TIMEOUT = 15_000
export const EXIT_TIMEOUT = 10_000

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Rejects with `label` when `promise` has not settled within `ms`. */
export async function withTimeout<T> (promise: Promise<T>, ms: number, label: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${label}`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

const handedOut = new Set<number>()

/**
 * A TCP port nothing listens on right now: bind port 0, read the port, close. `fastify start -p 0`
 * does not work (fastify-cli treats 0 as "not given" and falls back to 3000). A port is never
 * handed out twice within this process, so tests running side by side do not collide.
 */
export async function freePort (): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer()
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => {
        const address = server.address()
        server.close(() => {
          if (address === null || typeof address === 'string') reject(new Error('no port'))
          else resolve(address.port)
        })
      })
    })
    if (!handedOut.has(port)) {
      handedOut.add(port)
      return port
    }
  }
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

export interface Exit {
  code: number | null
  signal: NodeJS.Signals | null
}

/** One `fastify start` process, as `npm start` runs it, with what it printed so far. */
export class Service {
  stdout = ''
  stderr = ''
  exit: Exit | null = null
  readonly exited: Promise<Exit>
  readonly url: string
  #waiters = new Set<() => void>()

  constructor (readonly child: ChildProcess, readonly port: number) {
    this.url = `http://127.0.0.1:${port}`
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

  /** Resolves when the server logs that it listens; rejects if the process exits first. */
  async listening (ms = START_TIMEOUT): Promise<void> {
    await this.waitFor(() => {
      if (this.stdout.includes(`"Server listening at http://127.0.0.1:${this.port}"`)) return true
      if (this.exit !== null) throw new Error(`service exited before listening: ${JSON.stringify(this.exit)}\n${this.output}`)
      return false
    }, ms, 'the service to listen')
  }

  /** The exit status, or a rejection when the process is still running after `ms`. */
  async waitForExit (ms = EXIT_TIMEOUT): Promise<Exit> {
    await this.waitFor(() => this.exit !== null, ms, 'the service to exit')
    return this.exit!
  }

  /** An HTTP request over a real socket; the body is parsed as JSON. */
  async request (method: string, path: string, options: { token?: string, body?: unknown, ms?: number } = {}) {
    const headers: Record<string, string> = {}
    if (options.token !== undefined) headers.authorization = options.token
    if (options.body !== undefined) headers['content-type'] = 'application/json'
    const response = await fetch(`${this.url}${path}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal: AbortSignal.timeout(options.ms ?? 10_000)
    })
    const text = await response.text()
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      throw new Error(`${method} ${path}: ${response.status} with a body that is not JSON: ${text}`)
    }
    return { status: response.status, headers: response.headers, text, body }
  }

  async token (): Promise<string> {
    const response = await this.request('POST', '/token', { body: { username: USERNAME, password: PASSWORD } })
    if (response.status !== 200) throw new Error(`POST /token answered ${response.status}: ${response.text}`)
    return (response.body as { data: { token: string } }).data.token
  }
}

/** `npm start`'s own command line (its `prestart` build is `npm test`'s `pretest`). */
const START_COMMAND: string = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start

/**
 * Starts the service exactly as `npm start` does (or with another `command`), with `env` (plus
 * PATH and HOME) as its whole environment. `exec` makes the service the spawned process itself, so signals reach it
 * directly. The process is killed when the test ends, if it is still running.
 */
export async function spawnService (
  t: Test, env: Record<string, string>, port?: number, command = START_COMMAND
): Promise<Service> {
  const listenPort = port ?? await freePort()
  const child = spawn('/bin/sh', ['-c', `exec ${command}`], {
    cwd: ROOT,
    env: {
      PATH: `${join(ROOT, 'node_modules/.bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: process.env.HOME ?? '/tmp',
      HOST: '127.0.0.1',
      PORT: String(listenPort),
      ...env
    },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const service = new Service(child, listenPort)
  t.teardown(async () => {
    // What the process printed is the first thing to read when a test of it failed
    if (!t.passing()) t.comment(`service on port ${listenPort}, exit ${JSON.stringify(service.exit)}\n${service.output}`)
    if (service.exit === null) {
      child.kill('SIGKILL')
      await withTimeout(service.exited, EXIT_TIMEOUT, 'the killed service to exit')
    }
  })
  return service
}

/** Starts the service and waits until it listens. */
export async function startService (t: Test, env: Record<string, string>): Promise<Service> {
  const service = await spawnService(t, env)
  await service.listening()
  return service
}

/** A connected pg client with bounded waits, ended when the test ends. */
export async function pgClient (t: Test, connectionString: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString,
    connectionTimeoutMillis: 5000,
    statement_timeout: 10_000,
    application_name: 'bookkeeping-test'
  })
  // A backend terminated under us (the tests do that) must not end the test process
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => withTimeout(client.end(), 5000, 'ending a pg client').catch(() => {}))
  return client
}

export interface RawResponse {
  status: number
  headers: Record<string, string>
  body: string
}

/** The body of a `Transfer-Encoding: chunked` response, without its framing. */
export function dechunk (body: Buffer): Buffer {
  const parts: Buffer[] = []
  let offset = 0
  for (;;) {
    const lineEnd = body.indexOf('\r\n', offset)
    if (lineEnd === -1) throw new Error('truncated chunked body')
    const size = parseInt(body.subarray(offset, lineEnd).toString('latin1'), 16)
    if (Number.isNaN(size)) throw new Error('bad chunk size')
    if (size === 0) return Buffer.concat(parts)
    parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size))
    offset = lineEnd + 2 + size + 2
  }
}

/**
 * Writes `request` as raw bytes on a fresh socket and reads everything the server sends until it
 * closes the connection (send `Connection: close` for requests the server parses).
 */
export function rawRequest (port: number, request: string, ms = 5000): Promise<RawResponse> {
  return withTimeout(new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    const socket = connect({ port, host: '127.0.0.1' }, () => { socket.write(request) })
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    // A reset after the response (the server destroys the socket on parser errors) is fine
    socket.on('error', () => {})
    socket.once('close', () => {
      const raw = Buffer.concat(chunks)
      const headEnd = raw.indexOf('\r\n\r\n')
      if (headEnd === -1) {
        reject(new Error(`no complete HTTP response, got: ${JSON.stringify(raw.toString('latin1'))}`))
        return
      }
      const [statusLine = '', ...lines] = raw.subarray(0, headEnd).toString('latin1').split('\r\n')
      const match = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(statusLine)
      if (match === null) {
        reject(new Error(`bad status line: ${statusLine}`))
        return
      }
      const headers: Record<string, string> = {}
      for (const line of lines) {
        const colon = line.indexOf(':')
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
      }
      let body: Buffer = raw.subarray(headEnd + 4)
      try {
        if (headers['transfer-encoding'] === 'chunked') body = dechunk(body)
      } catch (err) {
        reject(err)
        return
      }
      if (headers['content-length'] !== undefined && Number(headers['content-length']) !== body.length) {
        reject(new Error(`content-length ${headers['content-length']} but ${body.length} body bytes`))
        return
      }
      resolve({ status: Number(match[1]), headers, body: body.toString('utf8') })
    })
  }), ms, `raw request ${JSON.stringify(request.slice(0, 40))}`)
}

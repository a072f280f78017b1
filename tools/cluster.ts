/**
 * The production topology on one machine (docs/deployment.md): instances of the service, each
 * started exactly as `npm start` starts it, reaching PostgreSQL through PgBouncer in
 * transaction pooling (tools/topology/pgbouncer.ts), behind HAProxy
 * (tools/topology/haproxy.ts). `npm run cluster` runs three of them to try it out (`main` below);
 * the topology tests and the topology benchmark start it with `startCluster`.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { DEFAULT_HOST, DEFAULT_MAX_CONNECTIONS, DEFAULT_PORT } from '../src/config.js'
import { PROJECT_ROOT } from '../src/project-root.js'
import { freePort } from './topology/free-port.js'
import { MAX_INSTANCES, serverName, startHaproxy, type Haproxy } from './topology/haproxy.js'
import { startPgbouncer, type Pgbouncer } from './topology/pgbouncer.js'

/**
 * What the cluster gives each instance when SHUTDOWN_DELAY_MS is not set: longer than HAProxy
 * takes to stop sending to an instance whose readiness answers 503 (`checkTimings()` of
 * tools/topology/haproxy.ts, 1.25 s), with room for a busy machine.
 */
export const CLUSTER_SHUTDOWN_DELAY_MS = 3000

/** How long an instance may take to answer its readiness check after it was started. */
const READY_WITHIN_MS = 30_000
/** How long an instance may take to exit after SIGTERM besides its delay: `fastify start -g 9000` and slack. */
const EXIT_WITHIN_MS = 15_000
/** How long HAProxy may take to send to an instance again once it is ready: 1.25 s and slack. */
const BACK_IN_ROTATION_WITHIN_MS = 10_000

/** `npm start`'s own command line, run by `sh -c` as npm runs it (its `exec` makes the server the spawned process). */
const START_COMMAND: string = JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')).scripts.start

export interface Exit {
  code: number | null
  signal: NodeJS.Signals | null
}

function exitOf (child: ChildProcess): Promise<Exit> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode })
  }
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
}

/** GET /health/ready on 127.0.0.1:`port`: whether it answered 200 within a second. */
function ready (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const request = http.get({ host: '127.0.0.1', port, path: '/health/ready', agent: false, timeout: 1000 }, (response) => {
      response.resume()
      resolve(response.statusCode === 200)
    })
    request.once('timeout', () => request.destroy())
    request.once('error', () => resolve(false))
  })
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * One instance of the service, on a port of its own that it keeps across restarts (HAProxy's
 * configuration names it). Each process leads a process group of its own: the cluster alone
 * signals it, once.
 */
export class Instance {
  child: ChildProcess | null = null
  #output = ''

  constructor (
    readonly index: number,
    public port: number,
    private env: Record<string, string>,
    private readonly onOutput: (text: string, stream: 'stdout' | 'stderr') => void
  ) {}

  /** HAProxy's name for it: app1, app2, app3. */
  get name (): string {
    return serverName(this.index)
  }

  get url (): string {
    return `http://127.0.0.1:${this.port}`
  }

  get address (): string {
    return `127.0.0.1:${this.port}`
  }

  /** The last lines it printed, for the message of a failure. */
  get output (): string {
    return this.#output
  }

  /** The exit of the current process. */
  get exited (): Promise<Exit> {
    if (this.child === null) throw new Error(`${this.name} was not started`)
    return exitOf(this.child)
  }

  /** Changes to its environment, from its next start on (a rotated secret: docs/operations.md). */
  configure (changes: Record<string, string>): void {
    this.env = { ...this.env, ...changes }
  }

  /** Starts it (`npm start`'s command) and resolves once its readiness check answers 200. */
  async start (): Promise<void> {
    this.#output = ''
    const child = spawn('/bin/sh', ['-c', START_COMMAND], {
      cwd: PROJECT_ROOT,
      env: {
        ...this.env,
        PATH: `${path.join(PROJECT_ROOT, 'node_modules', '.bin')}${path.delimiter}${this.env.PATH ?? process.env.PATH ?? '/usr/bin:/bin'}`,
        HOST: '127.0.0.1',
        PORT: String(this.port)
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true
    })
    this.child = child
    for (const stream of ['stdout', 'stderr'] as const) {
      child[stream]!.setEncoding('utf8').on('data', (text: string) => {
        // The tail is enough to say why a start failed
        this.#output = (this.#output + text).slice(-16_384)
        this.onOutput(text, stream)
      })
    }
    const started = Date.now()
    while (!(await ready(this.port))) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`${this.name} exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${this.#output.trim()}`)
      }
      if (Date.now() - started > READY_WITHIN_MS) {
        await this.kill()
        throw new Error(`${this.name} was not ready within ${READY_WITHIN_MS} ms:\n${this.#output.trim()}`)
      }
      await sleep(50)
    }
  }

  /** SIGTERM, once, and its exit; SIGKILL if it has not exited after its delay and grace. */
  async stop (delayMs: number): Promise<Exit> {
    const child = this.child
    if (child === null) throw new Error(`${this.name} was not started`)
    const exited = exitOf(child)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    const timer = setTimeout(() => this.#killGroup(), delayMs + EXIT_WITHIN_MS)
    const exit = await exited
    clearTimeout(timer)
    return exit
  }

  /** SIGKILL, as a crash or the kernel's OOM killer would, and its exit. */
  async kill (): Promise<Exit> {
    if (this.child === null) throw new Error(`${this.name} was not started`)
    const exited = exitOf(this.child)
    this.#killGroup()
    return await exited
  }

  #killGroup () {
    try {
      process.kill(-this.child!.pid!, 'SIGKILL')
    } catch (err) {
      // Gone already
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err
    }
  }
}

export interface ClusterOptions {
  /** A PostgreSQL server's database (postgres://...); the instances reach it through PgBouncer. */
  dbUrl: string
  /** The instances' environment (SECRET_TOKEN, AUTH_USERNAME, ...); PORT, HOST and DB_URL are set here. */
  env: Record<string, string>
  /** 1 to 3 (3). */
  instances?: number
  /** Where HAProxy listens: a free loopback port unless given. */
  host?: string
  port?: number
  /** Each process in a process group of its own (see `Launch` in tools/topology/daemon.ts). */
  detached?: boolean
  /** What the instances print. */
  onOutput?: (instance: Instance, text: string, stream: 'stdout' | 'stderr') => void
}

/** What happened during one instance's restart, in milliseconds from its SIGTERM. */
export interface Restart {
  exit: Exit
  /** When HAProxy took it out of rotation; null if the new process was ready before that. */
  markedDownAfter: number | null
  /** When the old process exited. */
  exitedAfter: number
  /** When HAProxy sent it requests again. */
  backAfter: number
}

export interface Cluster {
  /** HAProxy's address: where clients go. */
  url: string
  haproxy: Haproxy
  pgbouncer: Pgbouncer
  instances: Instance[]
  /** The SHUTDOWN_DELAY_MS the instances run with. */
  shutdownDelayMs: number
  /**
   * Restarts one instance as a deploy does: SIGTERM, its exit, a new process on the same port
   * (with `changes` to its environment, when given), and HAProxy sending it requests again.
   */
  restart: (index: number, changes?: Record<string, string>) => Promise<Restart>
  /** Stops everything it started, each process once: the instances, then HAProxy, then PgBouncer. */
  stop: () => Promise<void>
}

/** Calls `cleanup` when `promise` fails, then fails as it did. */
async function undoOnFailure<T> (promise: Promise<T>, cleanup: () => Promise<unknown>): Promise<T> {
  try {
    return await promise
  } catch (err) {
    await cleanup().catch(() => {})
    throw err
  }
}

/** Starts an instance on a free port, trying another when the chosen one was taken meanwhile. */
async function startOnFreePort (instance: Instance): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await instance.start()
      return
    } catch (err) {
      if (attempt === 3 || !/EADDRINUSE/.test((err as Error).message)) throw err
      instance.port = await freePort()
    }
  }
}

/**
 * Starts the topology: PgBouncer in front of `dbUrl`'s server, the instances on free loopback
 * ports, then HAProxy in front of them. Whatever started is stopped again when a part fails.
 */
export async function startCluster (options: ClusterOptions): Promise<Cluster> {
  // The instances are processes of their own, each on ports of its own (no port is shared as
  // node:cluster workers share one), and HAProxy checks readiness on their service ports
  // (docs/deploy/haproxy.cfg): one ADMIN_PORT for all would be taken by the first, and the
  // checks would find 404
  if (options.env.ADMIN_PORT !== undefined) {
    throw new Error('ADMIN_PORT is not for the cluster: its instances are checked on their own ports; unset it (docs/deployment.md#the-admin-port)')
  }
  const count = options.instances ?? MAX_INSTANCES
  const detached = options.detached ?? false
  const shutdownDelayMs = Number(options.env.SHUTDOWN_DELAY_MS ?? CLUSTER_SHUTDOWN_DELAY_MS)
  const pgbouncer = await startPgbouncer(options.dbUrl, { detached })
  const env = {
    // HAProxy connects from the loopback address and says who the client is in X-Forwarded-For
    FASTIFY_TRUST_PROXY_IPS: '127.0.0.1',
    // Every connection comes from HAProxy's one address: the bound per address is the total one
    MAX_CONNECTIONS_PER_ADDRESS: options.env.MAX_CONNECTIONS ?? String(DEFAULT_MAX_CONNECTIONS),
    ...options.env,
    SHUTDOWN_DELAY_MS: String(shutdownDelayMs),
    DB_URL: pgbouncer.url(options.dbUrl)
  }
  const instances: Instance[] = []
  for (let index = 0; index < count; index++) {
    const instance: Instance = new Instance(index, await freePort(), env, (text, stream) => options.onOutput?.(instance, text, stream))
    instances.push(instance)
  }
  const stopInstances = () => Promise.all(instances.filter((instance) => instance.child !== null).map((instance) => instance.stop(shutdownDelayMs)))
  await undoOnFailure(Promise.all(instances.map(startOnFreePort)), async () => {
    await stopInstances()
    await pgbouncer.stop()
  })
  const haproxy = await undoOnFailure(startHaproxy({
    instances: instances.map((instance) => instance.address), host: options.host, port: options.port, detached
  }), async () => {
    await stopInstances()
    await pgbouncer.stop()
  })

  let stopping: Promise<void> | null = null
  return {
    url: `http://127.0.0.1:${haproxy.port}`,
    haproxy,
    pgbouncer,
    instances,
    shutdownDelayMs,
    async restart (index, changes = {}) {
      const instance = instances[index]!
      const signalled = performance.now()
      const since = () => Math.round(performance.now() - signalled)
      // When HAProxy takes it out, watched while it stops and starts again: a process that is
      // back before the checks failed twice was never out
      const watch: { until: 'out' | 'restarted', out: number | null } = { until: 'out', out: null }
      const watching = (async () => {
        while (watch.until === 'out') {
          if ((await haproxy.states())[instance.name] === 'DOWN') watch.out = since()
          if (watch.out !== null) return
          await sleep(25)
        }
      })()
      try {
        const exit = await instance.stop(shutdownDelayMs)
        const exitedAfter = since()
        instance.configure(changes)
        await instance.start()
        await haproxy.waitFor(index, 'UP', BACK_IN_ROTATION_WITHIN_MS)
        return { exit, markedDownAfter: watch.out, exitedAfter, backAfter: since() }
      } finally {
        watch.until = 'restarted'
        await watching
      }
    },
    stop () {
      stopping ??= (async () => {
        // The instances first, so that HAProxy still carries the answers of their last requests
        await stopInstances()
        await haproxy.stop()
        await pgbouncer.stop()
      })()
      return stopping
    }
  }
}

/** `npm run cluster`'s one line for what stops it. */
function fail (message: string): never {
  console.error(`bookkeeping cluster: ${message}`)
  process.exit(1)
}

/**
 * `npm run cluster`: three instances on the PostgreSQL server of DB_URL (through PgBouncer),
 * behind HAProxy on HOST:PORT (PORT=0: a port the system picks), with the rest of the
 * environment as `npm start` reads it. Instances' logs go to stdout as they are. Ctrl-C (or
 * SIGTERM, SIGHUP) stops all of it once and exits 0; SIGUSR2 restarts the instances one after
 * another, as a deploy does.
 */
async function main () {
  const dbUrl = process.env.DB_URL ?? ''
  if (dbUrl.startsWith('pglite:')) {
    fail('DB_URL is the embedded PGlite, which lives inside one process; the instances of a cluster share a PostgreSQL server: set DB_URL=postgres://...')
  }
  if (!/^postgres(ql)?:\/\//.test(dbUrl)) fail('DB_URL must name a PostgreSQL server: postgres://user:password@host:port/database')
  const host = process.env.HOST || DEFAULT_HOST
  const port = Number(process.env.PORT || DEFAULT_PORT)
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`PORT must be a port number, not ${process.env.PORT}`)

  let cluster: Cluster | null = null
  let stopRequested = false
  let restarting: Promise<void> = Promise.resolve()
  const stop = async (running: Cluster) => {
    console.error('bookkeeping cluster: stopping the instances, HAProxy and PgBouncer')
    await restarting
    await running.stop()
    process.exit(0)
  }
  // A Ctrl-C under `npm run cluster` arrives twice (from the terminal, and forwarded by npm): it
  // is acted on once. The processes started here are in process groups of their own, so that
  // their one signal comes from here, in order
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      if (stopRequested) return
      stopRequested = true
      // While starting, it stops once it is up
      if (cluster !== null) stop(cluster).catch(failed)
    })
  }
  process.on('SIGUSR2', () => {
    if (cluster === null || stopRequested) return
    const running = cluster
    restarting = restarting.then(() => rollingRestart(running)).catch(failed)
  })

  cluster = await startCluster({
    dbUrl,
    env: Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined)),
    host,
    port: port === 0 ? undefined : port,
    detached: true,
    onOutput: (instance, text, stream) => process[stream].write(text)
  }).catch((err: Error) => fail(err.message))
  if (stopRequested) {
    await stop(cluster)
    return
  }
  const shown = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host
  console.error([
    `bookkeeping cluster: listening on http://${shown}:${cluster.haproxy.port} (HAProxy on ${host}:${cluster.haproxy.port})`,
    ...cluster.instances.map((instance) => `  ${instance.name}: ${instance.url}`),
    `  PgBouncer: 127.0.0.1:${cluster.pgbouncer.port}, in front of ${new URL(dbUrl).host}`,
    `  Ctrl-C stops all of it; kill -USR2 ${process.pid} restarts the instances one after another`
  ].join('\n'))
}

async function rollingRestart (cluster: Cluster) {
  for (const instance of cluster.instances) {
    console.error(`bookkeeping cluster: restarting ${instance.name}`)
    const restart = await cluster.restart(instance.index)
    console.error(`bookkeeping cluster: ${instance.name} out of rotation ${restart.markedDownAfter} ms after SIGTERM, ` +
      `exited ${JSON.stringify(restart.exit)} after ${restart.exitedAfter} ms, back after ${restart.backAfter} ms`)
  }
}

function failed (err: Error) {
  fail(err.message)
}

// Run as a program (npm run cluster), not imported by a test or a benchmark
if (process.argv[1] === import.meta.filename) main().catch(failed)

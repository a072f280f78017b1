/**
 * HAProxy in front of the instances of the service, started with docs/deploy/haproxy.cfg as it
 * is, and HAProxy in front of PostgreSQL nodes managed by Patroni, started with
 * docs/deploy/haproxy-postgres.cfg as it is: each file reads what depends on the machine (where
 * HAProxy listens, where the servers are, the runtime API's socket) from environment variables,
 * and these are set here.
 */
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { startDaemon } from './daemon.js'
import { findProgram } from '../system-programs.js'

export const HAPROXY_CONFIG = path.join(PROJECT_ROOT, 'docs', 'deploy', 'haproxy.cfg')

/** The file has server lines for this many instances (INSTANCE_1 to INSTANCE_3). */
export const MAX_INSTANCES = 3

/** HAProxy's name of the server line of instance `index` (0-based): app1, app2, app3. */
export const serverName = (index: number) => `app${index + 1}`

/** The health-check timings of the file's `default-server` line, in milliseconds and counts. */
export interface CheckTimings {
  inter: number
  fastinter: number
  downinter: number
  fall: number
  rise: number
  /**
   * Longest time from an instance's failing every check (readiness 503 after SIGTERM, or refused
   * connections once killed) to HAProxy's taking it out: the check due after at most `inter`
   * fails, the next ones come every `fastinter`.
   */
  markedDownWithin: number
  /** Longest time from an instance's being ready to HAProxy's sending it requests again. */
  markedUpWithin: number
}

function milliseconds (value: string): number {
  const match = /^(\d+)(us|ms|s|m|h|d)?$/.exec(value)
  if (match === null) throw new Error(`not a HAProxy time: ${value}`)
  const unit = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as 'us' | 'ms' | 's' | 'm' | 'h' | 'd' ?? 'ms']
  return Number(match[1]) * unit
}

/** The timings set in `config` (the text of haproxy.cfg); HAProxy's own default for any not set. */
export function checkTimings (config = fs.readFileSync(HAPROXY_CONFIG, 'utf8')): CheckTimings {
  const line = /^\s*default-server\s+(.*)$/m.exec(config)?.[1] ?? ''
  const word = (key: string) => new RegExp(`(?:^|\\s)${key}\\s+(\\S+)`).exec(line)?.[1]
  // HAProxy's defaults: inter 2 s, fastinter and downinter as inter, fall 3, rise 2
  const inter = milliseconds(word('inter') ?? '2s')
  const fastinter = milliseconds(word('fastinter') ?? String(inter))
  const downinter = milliseconds(word('downinter') ?? String(inter))
  const fall = Number(word('fall') ?? 3)
  const rise = Number(word('rise') ?? 2)
  return {
    inter,
    fastinter,
    downinter,
    fall,
    rise,
    markedDownWithin: inter + (fall - 1) * fastinter,
    markedUpWithin: downinter + (rise - 1) * fastinter
  }
}

export interface Haproxy {
  port: number
  /** HAProxy's state of each server by name (`app1`: `UP`, `DOWN`, `DOWN 1/2`, ...). */
  states: () => Promise<Record<string, string>>
  /**
   * Resolves with the milliseconds it took once HAProxy has the instance at `index` (0-based)
   * `UP` or `DOWN`; rejects after `ms`.
   */
  waitFor: (index: number, state: 'UP' | 'DOWN', ms: number) => Promise<number>
  /** What HAProxy printed so far (alerts, servers going up and down). */
  output: () => string
  stop: () => Promise<void>
}

/** One command of HAProxy's runtime API, on its unix socket; HAProxy answers and closes. */
function runtimeApi (socketPath: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath)
    let answer = ''
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => { answer += chunk })
    socket.once('end', () => resolve(answer))
    socket.once('error', reject)
    socket.write(`${command}\n`)
  })
}

/** The `status` of each server of `backend` in the CSV of `show stat`. */
function serverStates (csv: string, backend: string): Record<string, string> {
  const [header, ...rows] = csv.trim().split('\n')
  const columns = (header ?? '').replace(/^# /, '').split(',')
  const [proxy, server, status] = ['pxname', 'svname', 'status'].map((name) => columns.indexOf(name)) as [number, number, number]
  const states: Record<string, string> = {}
  for (const fields of rows.map((row) => row.split(','))) {
    // A `listen` section is a frontend and a backend of the same name: servers only
    if (fields[proxy] === backend && fields[server] !== 'BACKEND' && fields[server] !== 'FRONTEND') states[fields[server]!] = fields[status]!
  }
  return states
}

/** HAProxy running one of the files of docs/deploy/, its servers' states read from its runtime API. */
interface RunningHaproxy extends Omit<Haproxy, 'waitFor'> {
  /** Resolves with the milliseconds it took once HAProxy has `server` `UP` or `DOWN`; rejects after `ms`. */
  waitFor: (server: string, state: 'UP' | 'DOWN', ms: number) => Promise<number>
}

/**
 * Starts HAProxy (`findProgram`: Debian's, never installed here) with `config` as it is and
 * `env` as the whole environment it reads, plus where to listen (`bindVariable`) and its
 * runtime API's socket (BOOKKEEPING_STATS_SOCKET, in a directory of its own). It runs in the
 * foreground (`-db`), as the user that starts it.
 */
async function runHaproxy (
  { config, backend, bindVariable, env, host, port, detached }:
  { config: string, backend: string, bindVariable: string, env: Record<string, string>, host: string, port?: number, detached: boolean }
): Promise<RunningHaproxy> {
  const binary = findProgram('haproxy')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bookkeeping-haproxy-'))
  const statsSocket = path.join(dir, 'stats.sock')
  const launch = (chosen: number) => ({
    command: binary,
    args: ['-db', '-f', config],
    // Only what the file reads: a variable left in the caller's environment must not add a server
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      [bindVariable]: `${host}:${chosen}`,
      BOOKKEEPING_STATS_SOCKET: statsSocket,
      ...env
    },
    // The readiness probe of startDaemon connects here: any local address when bound to all
    host: host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host,
    detached
  })
  const daemon = await startDaemon('haproxy', launch, port)
  // HAProxy may accept on its port a moment before its runtime API answers: first the socket's
  // file is missing, then it refuses connections (seen with other test files loading the machine)
  for (let waited = 0; !await runtimeApi(statsSocket, 'show info').then(() => true, () => false); waited += 10) {
    if (waited > 5000) {
      await daemon.stop()
      throw new Error(`haproxy's runtime API did not answer on ${statsSocket}: ${daemon.output().trim()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  const states = async () => serverStates(await runtimeApi(statsSocket, 'show stat'), backend)
  return {
    port: daemon.port,
    states,
    async waitFor (server, state, ms) {
      const started = performance.now()
      for (;;) {
        if ((await states())[server] === state) return Math.round(performance.now() - started)
        if (performance.now() - started > ms) {
          throw new Error(`HAProxy did not have ${server} ${state} within ${ms} ms: ${JSON.stringify(await states())}`)
        }
        await new Promise((resolve) => setTimeout(resolve, 25))
      }
    },
    output: daemon.output,
    async stop () {
      await daemon.stop()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

/**
 * Starts HAProxy with docs/deploy/haproxy.cfg in front of `instances` (`host:port` each, one to
 * three), listening on `host`:`port`, or on a free loopback port. `detached`: see `Launch` in
 * daemon.ts.
 */
export async function startHaproxy (
  { instances, host = '127.0.0.1', port, detached = false }: { instances: string[], host?: string, port?: number, detached?: boolean }
): Promise<Haproxy> {
  if (instances.length < 1 || instances.length > MAX_INSTANCES) {
    throw new Error(`${HAPROXY_CONFIG} has server lines for 1 to ${MAX_INSTANCES} instances, not ${instances.length}`)
  }
  const running = await runHaproxy({
    config: HAPROXY_CONFIG,
    backend: 'instances',
    bindVariable: 'BOOKKEEPING_BIND',
    env: Object.fromEntries(instances.map((address, i) => [`INSTANCE_${i + 1}`, address])),
    host,
    port,
    detached
  })
  return { ...running, waitFor: (index, state, ms) => running.waitFor(serverName(index), state, ms) }
}

export const HAPROXY_POSTGRES_CONFIG = path.join(PROJECT_ROOT, 'docs', 'deploy', 'haproxy-postgres.cfg')

/** docs/deploy/haproxy-postgres.cfg has server lines for this many PostgreSQL nodes (PG_NODE_1 to PG_NODE_3). */
export const MAX_POSTGRES_NODES = 3

/** HAProxy's name of the server line of PostgreSQL node `index` (0-based): pg1, pg2, pg3. */
export const postgresServerName = (index: number) => `pg${index + 1}`

export interface PostgresHaproxy extends RunningHaproxy {
  /** `postgres://` URL of `database` through HAProxy, as `user` with `password`. */
  url: (database: string, user: string, password: string) => string
}

/**
 * Starts HAProxy with docs/deploy/haproxy-postgres.cfg on a free loopback port, in front of
 * PostgreSQL `nodes` (one to three) managed by Patroni: it sends connections to the node whose
 * Patroni REST API (on `apiPort`) answers `GET /primary` with 200.
 */
export async function startPostgresHaproxy (
  { nodes }: { nodes: Array<{ address: string, apiPort: number }> }
): Promise<PostgresHaproxy> {
  if (nodes.length < 1 || nodes.length > MAX_POSTGRES_NODES) {
    throw new Error(`${HAPROXY_POSTGRES_CONFIG} has server lines for 1 to ${MAX_POSTGRES_NODES} nodes, not ${nodes.length}`)
  }
  const running = await runHaproxy({
    config: HAPROXY_POSTGRES_CONFIG,
    backend: 'postgres',
    bindVariable: 'POSTGRES_BIND',
    env: Object.fromEntries(nodes.flatMap(({ address, apiPort }, i) => [
      [`PG_NODE_${i + 1}`, address], [`PG_NODE_${i + 1}_CHECK_PORT`, String(apiPort)]
    ])),
    host: '127.0.0.1',
    detached: false
  })
  return {
    ...running,
    url (database, user, password) {
      return `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${running.port}/${encodeURIComponent(database)}`
    }
  }
}

/**
 * HAProxy in front of the instances of the service, started with docs/deploy/haproxy.cfg as it
 * is: the file reads what depends on the machine (where HAProxy listens, where the instances
 * are, the runtime API's socket) from environment variables, and these are set here.
 */
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { PROJECT_ROOT } from '../project-root.js'
import { startDaemon } from './daemon.js'
import { ensureCommand } from './debian-package.js'

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
  /** HAProxy's state of each instance by server name (`app1`: `UP`, `DOWN`, `DOWN 1/2`, ...). */
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

/** The `status` of each server of the `instances` backend in the CSV of `show stat`. */
function serverStates (csv: string): Record<string, string> {
  const [header, ...rows] = csv.trim().split('\n')
  const columns = (header ?? '').replace(/^# /, '').split(',')
  const [proxy, server, status] = ['pxname', 'svname', 'status'].map((name) => columns.indexOf(name)) as [number, number, number]
  const states: Record<string, string> = {}
  for (const fields of rows.map((row) => row.split(','))) {
    if (fields[proxy] === 'instances' && fields[server] !== 'BACKEND') states[fields[server]!] = fields[status]!
  }
  return states
}

/**
 * Starts HAProxy (installing Debian's package when it is missing) in front of `instances`
 * (`host:port` each, one to three), listening on `host`:`port`, or on a free loopback port.
 * It runs in the foreground (`-db`), as the user that starts it, with its runtime API on a unix
 * socket in a directory of its own. `detached`: see `Launch` in daemon.ts.
 */
export async function startHaproxy (
  { instances, host = '127.0.0.1', port, detached = false }: { instances: string[], host?: string, port?: number, detached?: boolean }
): Promise<Haproxy> {
  if (instances.length < 1 || instances.length > MAX_INSTANCES) {
    throw new Error(`${HAPROXY_CONFIG} has server lines for 1 to ${MAX_INSTANCES} instances, not ${instances.length}`)
  }
  const binary = ensureCommand('haproxy', 'haproxy')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bookkeeping-haproxy-'))
  const statsSocket = path.join(dir, 'stats.sock')
  const launch = (chosen: number) => ({
    command: binary,
    args: ['-db', '-f', HAPROXY_CONFIG],
    // Only what the file reads: an INSTANCE_2 left in the caller's environment must not add a server
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      BOOKKEEPING_BIND: `${host}:${chosen}`,
      BOOKKEEPING_STATS_SOCKET: statsSocket,
      ...Object.fromEntries(instances.map((address, i) => [`INSTANCE_${i + 1}`, address]))
    },
    // The readiness probe of startDaemon connects here: any local address when bound to all
    host: host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host,
    detached
  })
  const daemon = await startDaemon('haproxy', launch, port)
  // HAProxy may accept on its port a moment before its runtime API's socket is there
  for (let waited = 0; !fs.existsSync(statsSocket); waited += 10) {
    if (waited > 5000) {
      await daemon.stop()
      throw new Error(`haproxy did not open ${statsSocket}: ${daemon.output().trim()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  const states = async () => serverStates(await runtimeApi(statsSocket, 'show stat'))
  return {
    port: daemon.port,
    states,
    async waitFor (index, state, ms) {
      const started = performance.now()
      for (;;) {
        if ((await states())[serverName(index)] === state) return Math.round(performance.now() - started)
        if (performance.now() - started > ms) {
          throw new Error(`HAProxy did not have ${serverName(index)} ${state} within ${ms} ms: ${JSON.stringify(await states())}`)
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

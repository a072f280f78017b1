import { type ChildProcess, spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import { freePort } from './free-port.js'

/** A server program of a topology (PgBouncer, HAProxy), running on a loopback port of its own. */
export interface Daemon {
  port: number
  child: ChildProcess
  /** What it printed so far, for the message of a failure. */
  output: () => string
  /** Stops it (SIGTERM, then SIGKILL after 5 s) and resolves once it has exited. */
  stop: () => Promise<void>
}

const READY_WITHIN_MS = 10_000
const STOP_WITHIN_MS = 5_000
const ATTEMPTS = 3

/** How to start a daemon on a given port: its command line, and what it needs besides. */
export interface Launch {
  command: string
  args: string[]
  /** Its whole environment; the caller's when absent. */
  env?: NodeJS.ProcessEnv
  /** Where it accepts connections once it is up: 127.0.0.1 when absent. */
  host?: string
  /**
   * In a process group of its own, so that a Ctrl-C in the terminal does not reach it: for a
   * caller that stops it itself, in its own order (npm run cluster).
   */
  detached?: boolean
  /**
   * Another user to run it as (the caller must be root): PostgreSQL and Patroni refuse to run
   * as root. Node drops root's supplementary groups with it.
   */
  user?: { uid: number, gid: number }
}

function accepts (port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, host)
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
}

/**
 * The inodes of the TCP sockets listening on `port`, from the kernel's tables (/proc/net/tcp and
 * tcp6: a local address ending in the port in hexadecimal, state 0A, LISTEN); undefined where
 * there are no such tables.
 */
function listeningSockets (port: number): Set<string> | undefined {
  if (!fs.existsSync('/proc/net/tcp')) return undefined
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, '0')}`
  const inodes = new Set<string>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!fs.existsSync(table)) continue
    for (const line of fs.readFileSync(table, 'utf8').split('\n').slice(1)) {
      const [, local, , state, , , , , , inode] = line.trim().split(/\s+/)
      if (local?.endsWith(suffix) === true && state === '0A' && inode !== undefined) inodes.add(inode)
    }
  }
  return inodes
}

/** Whether process `pid`, or one it started, holds one of the sockets `inodes` open. */
function holdsSocket (pid: number, inodes: Set<string>): boolean {
  const processes = [pid]
  for (let next = processes.pop(); next !== undefined; next = processes.pop()) {
    try {
      for (const fd of fs.readdirSync(`/proc/${next}/fd`)) {
        const socket = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${next}/fd/${fd}`))
        if (socket !== null && inodes.has(socket[1]!)) return true
      }
      for (const thread of fs.readdirSync(`/proc/${next}/task`)) {
        processes.push(...fs.readFileSync(`/proc/${next}/task/${thread}/children`, 'utf8').split(' ').filter(Boolean).map(Number))
      }
    } catch {
      // Gone meanwhile, or a file descriptor closed while read
    }
  }
  return false
}

/**
 * Whether the listener on `port` is the daemon's own. Another process may have taken the port
 * between `freePort` and the daemon's bind: then the port accepts connections while the daemon
 * fails to bind and exits, and a caller that took that listener for the daemon's would send its
 * connections to a stranger, and lose them when the stranger stops (two test files' PgBouncers
 * on one port). Without the kernel's tables, any listener is taken for the daemon's.
 */
function listensItself (child: ChildProcess, port: number): boolean {
  const inodes = listeningSockets(port)
  return inodes === undefined || (child.pid !== undefined && holdsSocket(child.pid, inodes))
}

function exited (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

async function launchOnce (label: string, port: number, { command, args, env, host = '127.0.0.1', detached, user }: Launch): Promise<Daemon> {
  const child = spawn(command, args, { env, detached, ...user, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
  const gone = new Promise<void>((resolve) => child.once('close', () => resolve()))
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_WITHIN_MS)
    await exited(child)
    clearTimeout(timer)
  }
  const started = Date.now()
  while (!(await accepts(port, host)) || !listensItself(child, port)) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await gone
      throw new Error(`${label} exited at start-up: ${output.trim()}`)
    }
    if (Date.now() - started > READY_WITHIN_MS) {
      await stop()
      throw new Error(`${label} did not listen on port ${port} within ${READY_WITHIN_MS} ms: ${output.trim()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return { port, child, output: () => output, stop }
}

/**
 * Starts `launch(port)` on a free loopback port and resolves once it accepts connections there.
 * The port is free when chosen, but another process may take it first: then it tries another.
 */
export async function startDaemon (
  label: string, launch: (port: number) => Launch, port?: number
): Promise<Daemon> {
  for (let attempt = 1; ; attempt++) {
    const chosen = port ?? await freePort()
    try {
      return await launchOnce(label, chosen, launch(chosen))
    } catch (err) {
      if (port !== undefined || attempt === ATTEMPTS || !/in use/i.test((err as Error).message)) throw err
    }
  }
}

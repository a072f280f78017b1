/**
 * PostgreSQL 15 servers the project starts itself (Debian's postgresql-15), as the `postgres`
 * user: a plain server of its own (initdb, pg_ctl) with, optionally, a hot standby streaming
 * from it (pg_basebackup -R), for the tests of a restart and of read-only servers; and what the
 * Patroni nodes of tools/topology/patroni.ts share with it: the binaries, the user, the
 * directories it owns, and killing a node's processes.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { findProgram } from '../system-programs.js'
import { freePort } from './free-port.js'

/** Where Debian's postgresql-15 puts its programs (initdb and pg_ctl are not on PATH there). */
const PG_BIN_DIR = '/usr/lib/postgresql/15/bin'

/** The path of PostgreSQL 15's `program`; an error naming the install command when it is missing. */
export function pgProgram (program: string): string {
  // Every one of them comes with the server's package, listed by its `postgres`
  findProgram(path.join(PG_BIN_DIR, 'postgres'))
  return path.join(PG_BIN_DIR, program)
}

/**
 * The user and group to run PostgreSQL and Patroni as: `postgres` (Debian's packages create it)
 * when we are root, as both refuse to run as root; nobody else otherwise (we run them as
 * ourselves).
 */
export function postgresUser (): { uid: number, gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined
  const id = (flag: string) => {
    const result = spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' })
    if (result.status !== 0) throw new Error(`no postgres user: ${result.stderr.trim()} (install Debian's postgresql-15)`)
    return Number(result.stdout.trim())
  }
  return { uid: id('-u'), gid: id('-g') }
}

/** A new directory under the system's temporary one, owned by `postgresUser()`, mode 0700. */
export function postgresDirectory (prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  const user = postgresUser()
  if (user !== undefined) fs.chownSync(dir, user.uid, user.gid)
  return dir
}

/**
 * Runs `command` as `postgresUser()` and resolves with what it printed once it exits 0; rejects
 * with that output otherwise. Asynchronous: a test's load keeps running meanwhile.
 */
function runAsPostgres (command: string, args: string[], { cwd }: { cwd?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...postgresUser(),
      cwd: cwd ?? os.tmpdir(),
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C.UTF-8' },
      stdio: ['ignore', 'pipe', 'pipe']
    })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
    child.once('error', reject)
    child.once('close', (code, signal) => {
      if (code === 0) resolve(output)
      else reject(new Error(`${path.basename(command)} ${args.join(' ')}: exit ${code ?? signal}: ${output.trim()}`))
    })
  })
}

/** The pid the postmaster of `dataDir` wrote in postmaster.pid, while the file is there. */
function postmasterPid (dataDir: string): number | undefined {
  try {
    const pid = Number(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

/** The state letter and parent pid of process `pid` (Linux: /proc/<pid>/stat), if it exists. */
function processStat (pid: number): { state: string, ppid: number } | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The fields after the command's name, which is in parentheses and may hold spaces
    const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return { state: state!, ppid: Number(ppid) }
  } catch {
    return undefined
  }
}

/** The pids of the processes whose parent is `pid`. */
function childrenOf (pid: number): number[] {
  return fs.readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number)
    .filter((child) => processStat(child)?.ppid === pid)
}

/** Whether `pid` still runs: a zombie (dead, not yet reaped by its new parent) does not. */
function alive (pid: number): boolean {
  const stat = processStat(pid)
  return stat !== undefined && stat.state !== 'Z'
}

/** The POSIX shared memory segments (dynamic_shared_memory_type posix) process `pid` has mapped. */
function sharedMemorySegments (pid: number): string[] {
  try {
    return fs.readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')
      .map((line) => /\s(\/dev\/shm\/PostgreSQL\.\d+)(?: \(deleted\))?$/.exec(line)?.[1])
      .filter((file): file is string => file !== undefined)
  } catch {
    return []
  }
}

/**
 * SIGKILLs the postmaster of `dataDir` and every process it started, as when the machine dies:
 * no shutdown, no last WAL written. Each of its children leads a session of its own, so they
 * are found by parent, not by process group. Resolves once all of them are gone.
 */
export async function killPostmaster (dataDir: string): Promise<void> {
  const pid = postmasterPid(dataDir)
  if (pid === undefined || !alive(pid)) return
  const pids = [pid, ...childrenOf(pid)]
  const segments = new Set(pids.flatMap(sharedMemorySegments))
  for (const one of pids) {
    try {
      process.kill(one, 'SIGKILL')
    } catch {
      // Already gone
    }
  }
  for (let waited = 0; pids.some(alive); waited += 10) {
    if (waited > 5000) throw new Error(`postgres processes ${pids.filter(alive).join(', ')} outlived SIGKILL by 5 s`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  // A server that exits removes these itself; a killed one leaves them (until its next start)
  for (const segment of segments) fs.rmSync(segment, { force: true })
}

export interface PostgresServer {
  port: number
  dataDir: string
  /** `postgres://postgres@127.0.0.1:<port>/<database>` (trust on loopback). */
  url: (database: string) => string
  /** `pg_ctl restart -m <mode>` (waits until the server accepts connections again). */
  restart: (mode?: 'smart' | 'fast' | 'immediate') => Promise<void>
  /** What the server logged so far. */
  log: () => string
  /** Stops it (`pg_ctl stop -m immediate`) and removes its directory. */
  stop: () => Promise<void>
}

const START_ATTEMPTS = 3

/**
 * Starts a PostgreSQL 15 server of its own on a free loopback port, with its data, log and unix
 * socket in a new directory: a new cluster (initdb, trust on loopback like the machine's
 * server), or with `standbyOf`, a hot standby of that server (pg_basebackup -R: streaming
 * replication, read-only queries allowed). Settings that depend on the machine are pg_ctl's
 * `-o` options, which it keeps for `pg_ctl restart`.
 */
export async function startPostgres ({ standbyOf }: { standbyOf?: PostgresServer } = {}): Promise<PostgresServer> {
  const dir = postgresDirectory(standbyOf === undefined ? 'bookkeeping-postgres-' : 'bookkeeping-standby-')
  const dataDir = path.join(dir, 'data')
  const logFile = path.join(dir, 'postgres.log')
  const pgCtl = pgProgram('pg_ctl')
  const log = () => {
    try {
      return fs.readFileSync(logFile, 'utf8')
    } catch {
      return ''
    }
  }
  try {
    if (standbyOf === undefined) {
      await runAsPostgres(pgProgram('initdb'), ['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-instructions'])
    } else {
      await runAsPostgres(pgProgram('pg_basebackup'), [
        '-D', dataDir, '-h', '127.0.0.1', '-p', String(standbyOf.port), '-U', 'postgres', '-R', '-X', 'stream', '-c', 'fast'
      ])
    }
    let port = 0
    for (let attempt = 1; ; attempt++) {
      port = await freePort()
      const options = `-c port=${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${dir}`
      try {
        await runAsPostgres(pgCtl, ['start', '-D', dataDir, '-l', logFile, '-w', '-t', '60', '-o', options])
        break
      } catch (err) {
        // Another process took the port between freePort and the bind
        if (attempt === START_ATTEMPTS || !/already in use/.test(log())) throw new Error(`${(err as Error).message}\n${log()}`)
      }
    }
    return {
      port,
      dataDir,
      url: (database) => `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(database)}`,
      async restart (mode = 'fast') {
        // Without -l the new postmaster would write to (and hold open) this process's pipes
        await runAsPostgres(pgCtl, ['restart', '-D', dataDir, '-l', logFile, '-m', mode, '-w', '-t', '60'])
      },
      log,
      async stop () {
        await runAsPostgres(pgCtl, ['stop', '-D', dataDir, '-m', 'immediate', '-w']).catch(() => killPostmaster(dataDir))
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }
  } catch (err) {
    await killPostmaster(dataDir)
    fs.rmSync(dir, { recursive: true, force: true })
    throw err
  }
}

/**
 * PgBouncer in transaction pooling between the service and a PostgreSQL server, started with
 * the configuration kept in docs/deploy/pgbouncer.ini. What depends on the machine is set here:
 * a free loopback port, every database of the server (`* =`), and the server's user.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { startDaemon, type Daemon } from './daemon.js'
import { findProgram } from '../system-programs.js'

const PGBOUNCER_CONFIG = path.join(PROJECT_ROOT, 'docs', 'deploy', 'pgbouncer.ini')

export interface Pgbouncer {
  port: number
  /** `serverUrl` with PgBouncer's host and port instead of the server's. */
  url: (serverUrl: string) => string
  /** Stops PgBouncer and starts it again on the same port. */
  restart: () => Promise<void>
  stop: () => Promise<void>
}

/** Sets `key = value` in the [pgbouncer] section, the last one of the file, in place of the file's own. */
function setting (ini: string, key: string, value: string): string {
  const line = new RegExp(`^${key}\\s*=.*$`, 'm')
  return line.test(ini) ? ini.replace(line, `${key} = ${value}`) : `${ini.trimEnd()}\n${key} = ${value}\n`
}

/** The repository's configuration with the values of this machine, in a directory of its own. */
function writeConfig (serverUrl: string, port: number, dir: string): string {
  const server = new URL(serverUrl)
  const user = decodeURIComponent(server.username || os.userInfo().username)
  const password = decodeURIComponent(server.password)
  let ini = fs.readFileSync(PGBOUNCER_CONFIG, 'utf8')
  // Any database the client names is the one of that name on the server
  ini = ini.replace(/^\[databases\]$/m, `[databases]\n* = host=${server.hostname} port=${server.port || 5432}`)
  ini = setting(ini, 'listen_addr', '127.0.0.1')
  ini = setting(ini, 'listen_port', String(port))
  // The server's password, in the file PgBouncer checks clients against and logs in to the
  // server with; a server without passwords (trust) needs none from clients either
  ini = setting(ini, 'auth_file', path.join(dir, 'userlist.txt'))
  if (password === '') ini = setting(ini, 'auth_type', 'trust')
  ini = setting(ini, 'unix_socket_dir', '')
  ini = setting(ini, 'pidfile', '')
  ini = setting(ini, 'logfile', '')
  const file = path.join(dir, 'pgbouncer.ini')
  fs.writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" "${password}"\n`, { mode: 0o644 })
  fs.writeFileSync(file, ini, { mode: 0o644 })
  return file
}

/**
 * Starts PgBouncer in front of the PostgreSQL server of `serverUrl` (`findProgram`: Debian's,
 * never installed here). PgBouncer refuses to run as root: as root it runs as `postgres`,
 * the user Debian's PostgreSQL packages create. `detached`: see `Launch` in daemon.ts.
 */
export async function startPgbouncer (serverUrl: string, { detached = false } = {}): Promise<Pgbouncer> {
  const binary = findProgram('pgbouncer')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bookkeeping-pgbouncer-'))
  fs.chmodSync(dir, 0o755)
  const asUser = process.getuid?.() === 0 ? ['-u', 'postgres'] : []
  const launch = (port: number) => ({ command: binary, args: [...asUser, writeConfig(serverUrl, port, dir)], detached })
  let daemon: Daemon = await startDaemon('pgbouncer', launch)
  return {
    port: daemon.port,
    url (url: string) {
      const through = new URL(url)
      through.hostname = '127.0.0.1'
      through.port = String(daemon.port)
      return through.toString()
    },
    async restart () {
      await daemon.stop()
      daemon = await startDaemon('pgbouncer', launch, daemon.port)
    },
    async stop () {
      await daemon.stop()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

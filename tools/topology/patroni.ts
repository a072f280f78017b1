/**
 * One PostgreSQL 15 node managed by Patroni 3.0 (Debian's patroni), started with
 * docs/deploy/patroni.yml as it is: what depends on the machine (the node's name, ports, data
 * directory, etcd, passwords) is given in Patroni's own environment variables, which take
 * precedence over the file. Patroni and its PostgreSQL run as `postgres`, never as root.
 */
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { startDaemon, type Daemon } from './daemon.js'
import { findProgram } from '../system-programs.js'
import { freePort } from './free-port.js'
import { killPostmaster, pgProgram, postgresUser } from './postgres.js'

export const PATRONI_CONFIG = path.join(PROJECT_ROOT, 'docs', 'deploy', 'patroni.yml')

export interface PatroniPasswords {
  superuser: string
  replication: string
  rewind: string
}

export interface PatroniNode {
  name: string
  /** Its PostgreSQL's port and its REST API's, both on 127.0.0.1. */
  pgPort: number
  apiPort: number
  dataDir: string
  /** The status of `GET <path>` on its REST API (`/primary`, `/sync`, ...), 0 when it does not answer within 1 s. */
  probe: (path: string) => Promise<number>
  /**
   * The node dies: SIGKILL of Patroni and of its PostgreSQL, postmaster and children (killing
   * PostgreSQL alone would have Patroni start it again; killing Patroni alone would leave
   * PostgreSQL serving). Resolves once every process of it is gone.
   */
  kill: () => Promise<void>
  /** What Patroni and PostgreSQL printed so far. */
  output: () => string
  /** Stops Patroni (which stops its PostgreSQL), then whatever of the node is left. */
  stop: () => Promise<void>
}

/** GET `path` on 127.0.0.1:`port`: the status, or 0 when nothing answered within 1 s. */
function restStatus (port: number, path: string): Promise<number> {
  return new Promise((resolve) => {
    const request = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 1000 }, (response) => {
      response.resume()
      resolve(response.statusCode ?? 0)
    })
    request.once('timeout', () => request.destroy())
    request.once('error', () => resolve(0))
  })
}

/**
 * The deployment's file with PostgreSQL's Unix socket in `dir`: Debian's default directory,
 * /var/run/postgresql, is writable by the postgres user only, and a contributor without root
 * runs PostgreSQL as themselves (`postgresUser`). The file's last section is `postgresql:`, the
 * node's own settings; a parameter added there stays local to the node.
 */
function withSocketDirectory (config: string, dir: string): string {
  const sections = config.split('\n').filter((line) => /^[a-z_]+:/.test(line))
  if (sections.at(-1) !== 'postgresql:') throw new Error(`${PATRONI_CONFIG} no longer ends with its postgresql: section`)
  return `${config.trimEnd()}\n  parameters:\n    unix_socket_directories: '${dir}'\n`
}

/**
 * Starts Patroni for node `name` of the cluster whose lock is in the etcd at `etcdHost`, with its
 * data directory and password file under `dir` (owned by postgres), PostgreSQL and the REST API
 * on free loopback ports. It resolves once the REST API answers: the node then bootstraps the
 * cluster (initdb) or, when another node has, copies it (pg_basebackup) and follows it.
 */
export async function startPatroniNode (
  { name, etcdHost, passwords, dir }: { name: string, etcdHost: string, passwords: PatroniPasswords, dir: string }
): Promise<PatroniNode> {
  const binary = findProgram('patroni')
  // Patroni's bin_dir (the file names Debian's) must hold them
  pgProgram('initdb')
  const dataDir = path.join(dir, name)
  const pgPort = await freePort()
  // The postgres user must read the file: a checkout under root's home is not readable to it
  const config = path.join(dir, `${name}.yml`)
  fs.writeFileSync(config, withSocketDirectory(fs.readFileSync(PATRONI_CONFIG, 'utf8'), dir), { mode: 0o644 })
  const daemon: Daemon = await startDaemon(`patroni ${name}`, (apiPort) => ({
    command: binary,
    args: [config],
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: dir,
      LC_ALL: 'C.UTF-8',
      PATRONI_NAME: name,
      PATRONI_RESTAPI_LISTEN: `127.0.0.1:${apiPort}`,
      PATRONI_RESTAPI_CONNECT_ADDRESS: `127.0.0.1:${apiPort}`,
      PATRONI_POSTGRESQL_LISTEN: `127.0.0.1:${pgPort}`,
      PATRONI_POSTGRESQL_CONNECT_ADDRESS: `127.0.0.1:${pgPort}`,
      PATRONI_POSTGRESQL_DATA_DIR: dataDir,
      PATRONI_POSTGRESQL_PGPASS: path.join(dir, `${name}.pgpass`),
      PATRONI_ETCD3_HOSTS: etcdHost,
      PATRONI_SUPERUSER_PASSWORD: passwords.superuser,
      PATRONI_REPLICATION_PASSWORD: passwords.replication,
      PATRONI_REWIND_PASSWORD: passwords.rewind
    },
    user: postgresUser()
  }))
  return {
    name,
    pgPort,
    apiPort: daemon.port,
    dataDir,
    probe: (path) => restStatus(daemon.port, path),
    async kill () {
      daemon.child.kill('SIGKILL')
      await killPostmaster(dataDir)
      await daemon.stop()
    },
    output: daemon.output,
    async stop () {
      await daemon.stop()
      await killPostmaster(dataDir)
    }
  }
}

/**
 * A single-member etcd (Debian's etcd-server), the store Patroni keeps its leader lock in, for
 * the high-availability topology (tools/topology/ha.ts). Production runs three or five members on
 * machines of their own; one is enough to test what the service does in a failover.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startDaemon } from './daemon.js'
import { findProgram } from '../system-programs.js'
import { freePort } from './free-port.js'

export interface Etcd {
  /** `127.0.0.1:<client port>`, as Patroni's `etcd3.hosts` takes it. */
  host: string
  output: () => string
  stop: () => Promise<void>
}

/**
 * Starts etcd on free loopback ports (clients and peers) with its data in a new directory. The
 * directory is on tmpfs where there is one: a test machine's disk, loaded by other work, can
 * stall etcd's fsyncs for seconds, and Patroni takes a leader that cannot renew its lock within
 * `retry_timeout` for a dead one.
 */
export async function startEtcd (): Promise<Etcd> {
  const binary = findProgram('etcd')
  const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir()
  const dir = fs.mkdtempSync(path.join(base, 'bookkeeping-etcd-'))
  const peerPort = await freePort()
  const peer = `http://127.0.0.1:${peerPort}`
  const daemon = await startDaemon('etcd', (port) => ({
    command: binary,
    args: [
      '--name', 'bookkeeping',
      '--data-dir', path.join(dir, 'data'),
      '--listen-client-urls', `http://127.0.0.1:${port}`,
      '--advertise-client-urls', `http://127.0.0.1:${port}`,
      '--listen-peer-urls', peer,
      '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `bookkeeping=${peer}`,
      '--initial-cluster-state', 'new',
      // Another test's etcd must never be taken for a member of this one
      '--initial-cluster-token', randomBytes(8).toString('hex'),
      '--log-level', 'warn'
    ],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }
  }))
  return {
    host: `127.0.0.1:${daemon.port}`,
    output: daemon.output,
    async stop () {
      await daemon.stop()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

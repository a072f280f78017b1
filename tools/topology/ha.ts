/**
 * The high-availability topology of PostgreSQL on one machine (docs/deployment.md, "High
 * availability"): etcd, PostgreSQL 15 nodes managed by Patroni with synchronous replication,
 * and HAProxy sending connections to the node that is the primary now. The service's `DB_URL`
 * is HAProxy's `url()`. For the failover tests.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import { startEtcd, type Etcd } from './etcd.js'
import { postgresServerName, startPostgresHaproxy, type PostgresHaproxy } from './haproxy.js'
import { startPatroniNode, type PatroniNode } from './patroni.js'
import { postgresDirectory } from './postgres.js'

/** The superuser of docs/deploy/patroni.yml. */
const SUPERUSER = 'postgres'

/** How long the nodes may take to bootstrap (initdb, pg_basebackup) on a busy machine. */
const BOOTSTRAP_WITHIN_MS = 90_000

export interface HaTopology {
  nodes: PatroniNode[]
  haproxy: PostgresHaproxy
  /** `postgres://` URL of `database` through HAProxy, for the service's DB_URL. */
  url: (database: string) => string
  /** `postgres://` URL of `database` on `node` itself, bypassing HAProxy. */
  nodeUrl: (node: PatroniNode, database: string) => string
  /** HAProxy's name of `node`'s server line (pg1, pg2, ...). */
  serverName: (node: PatroniNode) => string
  /** The node whose Patroni answers `GET /primary` with 200 now, if any. */
  leader: () => Promise<PatroniNode | undefined>
  /**
   * Resolves once a node other than `not` is the leader (`GET /primary` 200), with it and the
   * milliseconds it took; rejects after `ms`.
   */
  waitForLeader: (options: { not?: PatroniNode, ms: number }) => Promise<{ node: PatroniNode, ms: number }>
  /** Resolves once `node` is the synchronous standby (`GET /sync` 200); rejects after `ms`. */
  waitForSyncStandby: (node: PatroniNode, ms: number) => Promise<number>
  /** SIGKILL of everything of `node`: see `PatroniNode.kill`. */
  kill: (node: PatroniNode) => Promise<void>
  stop: () => Promise<void>
}

async function pollUntil<T> (find: () => Promise<T | undefined>, ms: number, label: string): Promise<{ value: T, ms: number }> {
  const started = performance.now()
  for (;;) {
    const value = await find()
    if (value !== undefined) return { value, ms: Math.round(performance.now() - started) }
    if (performance.now() - started > ms) throw new Error(`not within ${ms} ms: ${label}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * Starts etcd, `nodes` Patroni nodes (two: a primary and its synchronous standby) and HAProxy,
 * and resolves once one node is the primary, every other one its synchronous standby, and
 * HAProxy sends connections to the primary. Passwords are new for each topology.
 */
export async function startHaTopology ({ nodes: count = 2 }: { nodes?: number } = {}): Promise<HaTopology> {
  const password = () => randomBytes(12).toString('hex')
  const passwords = { superuser: password(), replication: password(), rewind: password() }
  const dir = postgresDirectory('bookkeeping-patroni-')
  const started: Array<{ stop: () => Promise<void>, output: () => string }> = []
  const stop = async () => {
    // Last started, first stopped: HAProxy, the nodes, etcd
    for (const one of started.reverse()) await one.stop().catch(() => {})
    started.length = 0
    fs.rmSync(dir, { recursive: true, force: true })
  }
  try {
    const etcd: Etcd = await startEtcd()
    started.push(etcd)
    const launched = await Promise.allSettled(Array.from({ length: count }, (_, i) =>
      startPatroniNode({ name: postgresServerName(i), etcdHost: etcd.host, passwords, dir })))
    const nodes: PatroniNode[] = []
    for (const result of launched) {
      if (result.status === 'fulfilled') {
        nodes.push(result.value)
        started.push(result.value)
      }
    }
    const failed = launched.find((result) => result.status === 'rejected')
    if (failed !== undefined) throw failed.reason
    const leader = async () => {
      const statuses = await Promise.all(nodes.map((node) => node.probe('/primary')))
      return nodes.find((_, i) => statuses[i] === 200)
    }
    const waitForSyncStandby = async (node: PatroniNode, ms: number) =>
      (await pollUntil(async () => (await node.probe('/sync')) === 200 || undefined, ms, `${node.name} to be the synchronous standby`)).ms
    const bootstrapped = performance.now()
    const first = (await pollUntil(leader, BOOTSTRAP_WITHIN_MS, 'a leader')).value
    for (const node of nodes.filter((node) => node !== first)) {
      await waitForSyncStandby(node, BOOTSTRAP_WITHIN_MS - (performance.now() - bootstrapped))
    }
    const haproxy = await startPostgresHaproxy({ nodes: nodes.map((node) => ({ address: `127.0.0.1:${node.pgPort}`, apiPort: node.apiPort })) })
    started.push(haproxy)
    const serverName = (node: PatroniNode) => postgresServerName(nodes.indexOf(node))
    await haproxy.waitFor(serverName(first), 'UP', 10_000)
    // HAProxy starts with every server up, until its checks fail (`fall` of them): until then it
    // would send connections to a standby too
    for (const node of nodes.filter((node) => node !== first)) await haproxy.waitFor(serverName(node), 'DOWN', 10_000)
    return {
      nodes,
      haproxy,
      url: (database) => haproxy.url(database, SUPERUSER, passwords.superuser),
      nodeUrl: (node, database) =>
        `postgres://${SUPERUSER}:${passwords.superuser}@127.0.0.1:${node.pgPort}/${encodeURIComponent(database)}`,
      serverName,
      leader,
      async waitForLeader ({ not, ms }) {
        const { value: node, ms: took } = await pollUntil(async () => {
          const now = await leader()
          return now === not ? undefined : now
        }, ms, `a leader other than ${not?.name ?? 'none'}`)
        return { node, ms: took }
      },
      waitForSyncStandby,
      kill: (node) => node.kill(),
      stop
    }
  } catch (err) {
    const output = started.map((one) => one.output()).join('\n')
    await stop()
    throw new Error(`${(err as Error).message}\n${output}`, { cause: err })
  }
}

/**
 * A database of its own on a Citus cluster that is already running, for a test file or a
 * benchmark: the database is made on the coordinator and on each worker, each gets the `citus`
 * extension, and the coordinator learns its workers. Citus keeps its node list per database, so
 * a new database knows no workers until it is told. Citus is not in Debian: how to build it and
 * start a cluster is in docs/development.md (Citus).
 */
import pg from 'pg'

export interface CitusWorker {
  host: string
  port: number
}

/** `serverUrl` with another host, port and database. */
export function onNode (serverUrl: string, host: string, port: number, database: string): string {
  const url = new URL(serverUrl)
  Object.assign(url, { hostname: host, port: String(port), pathname: `/${database}` })
  return url.toString()
}

async function run (url: string, statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  client.on('error', () => {})
  await client.connect()
  try {
    for (const statement of statements) await client.query(statement)
  } finally {
    await client.end()
  }
}

/**
 * The workers of the cluster whose coordinator `adminUrl` names (a database there with the
 * extension and its nodes); none when that server has no Citus.
 */
export async function citusWorkers (adminUrl: string): Promise<CitusWorker[]> {
  const client = new pg.Client({ connectionString: adminUrl })
  client.on('error', () => {})
  await client.connect()
  try {
    const { rows: [present] } = await client.query("SELECT to_regclass('pg_dist_node') IS NOT NULL AS citus")
    if (present.citus !== true) return []
    const { rows } = await client.query<CitusWorker>('SELECT nodename AS host, nodeport AS port FROM pg_dist_node WHERE groupid > 0 ORDER BY nodeid')
    return rows
  } finally {
    await client.end()
  }
}

/**
 * Makes database `name`, already created on the coordinator of `adminUrl`, a cluster over
 * `workers`. Answers the function that drops it from the workers again (the caller drops it on
 * the coordinator first).
 */
export async function spreadOverCitus (adminUrl: string, name: string, workers: CitusWorker[]): Promise<() => Promise<void>> {
  // One database at a time, whoever asks (test files run in parallel): adding a node alters the
  // server's roles on the worker, and two at once fail with "tuple concurrently updated"
  const lock = new pg.Client({ connectionString: adminUrl })
  lock.on('error', () => {})
  await lock.connect()
  try {
    await lock.query('SELECT pg_advisory_lock($1)', [CLUSTER_MAKING_LOCK])
    return await spread(adminUrl, name, workers)
  } finally {
    await lock.end()
  }
}

/** Arbitrary but fixed, on the coordinator's admin database: see `spreadOverCitus`. */
const CLUSTER_MAKING_LOCK = 7_301_455_100

async function spread (adminUrl: string, name: string, workers: CitusWorker[]): Promise<() => Promise<void>> {
  const created: CitusWorker[] = []
  const drop = async () => {
    for (const { host, port } of created) await run(onNode(adminUrl, host, port, 'postgres'), [`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`])
  }
  try {
    for (const worker of workers) {
      await run(onNode(adminUrl, worker.host, worker.port, 'postgres'), [`CREATE DATABASE ${name}`])
      created.push(worker)
      await run(onNode(adminUrl, worker.host, worker.port, name), ['CREATE EXTENSION citus'])
    }
    const coordinator = new URL(adminUrl)
    await run(onNode(adminUrl, coordinator.hostname, Number(coordinator.port || 5432), name), [
      'CREATE EXTENSION citus',
      `SELECT citus_set_coordinator_host('${coordinator.hostname}', ${Number(coordinator.port || 5432)})`,
      ...workers.map(({ host, port }) => `SELECT citus_add_node('${host}', ${port})`)
    ])
  } catch (err) {
    await drop().catch(() => {})
    throw err
  }
  return drop
}

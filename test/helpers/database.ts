/**
 * The database of a test file: a fresh one per file on the PostgreSQL server, or an in-memory
 * PGlite of its own, and what tests do to it from outside the service.
 */
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import type { Test } from 'tap'
import { startEmbedded } from '../../src/db/embedded.js'
import { INITDB_ARGS } from '../../src/db/embedded-settings.js'
import { RECORD, SCHEMA_MIGRATIONS } from '../../src/db/migrate.js'
import { migrations, statementsOf, type Migration } from '../../src/db/migrations.js'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { citusWorkers, onNode, spreadOverCitus, type CitusWorker } from '../../tools/topology/citus.js'
import { startPgbouncer } from '../../tools/topology/pgbouncer.js'
import { acceptsConnections, sleep, waitUntil, withTimeout } from './wait.js'

export const ADMIN_URL = process.env.TEST_DB_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

/**
 * The store the tests run on: `TEST_STORE=postgres` or `pglite`, or `pgbouncer` (the server,
 * reached through PgBouncer in transaction pooling, tools/topology/pgbouncer.ts); unset, the
 * PostgreSQL server at TEST_DB_URL when one answers, else PGlite (src/db/embedded.ts), started
 * per test file.
 */
const STORES = ['postgres', 'pglite', 'pgbouncer'] as const
export const STORE: typeof STORES[number] = STORES.find((store) => store === process.env.TEST_STORE) ??
  ((await acceptsConnections(ADMIN_URL, 5432)) ? 'postgres' : 'pglite')

/**
 * For `t.test(name, { skip: NEEDS_DIRECT_SERVER }, ...)`: tests that put a PgBouncer of their
 * own in front of the PostgreSQL server (with TEST_STORE=pgbouncer the others already run
 * through one).
 */
export const NEEDS_DIRECT_SERVER = STORE !== 'postgres' && 'starts its own PgBouncer in front of the PostgreSQL server'

/**
 * For `t.test(name, { skip: NEEDS_SERVER }, ...)`: what only a PostgreSQL server can do (other
 * sessions, locks, terminating backends, refusing connections to one database). PGlite is one
 * session shared by every connection.
 */
export const NEEDS_SERVER = STORE === 'pglite' && 'needs a PostgreSQL server (PGlite is a single session)'

/** For `t.test(name, { skip: NEEDS_EMBEDDED }, ...)`: what only the embedded store does (PGlite's one session). */
export const NEEDS_EMBEDDED = STORE !== 'pglite' && 'the embedded store\'s own behaviour: runs with TEST_STORE=pglite'

/**
 * For `t.test(name, { skip: STORE_INDEPENDENT }, ...)`: tests of the HTTP layer and of the
 * process (connections, headers, tokens, ports, signals, memory) whose outcome does not depend on
 * the store, nor on the way to it. On PGlite or through PgBouncer they would only repeat the run
 * on the server, at the cost of a database (an embedded one, or a PgBouncer) each.
 */
export const STORE_INDEPENDENT = STORE !== 'postgres' && 'does not depend on the store: runs with TEST_STORE=postgres'

/**
 * For `t.test(name, { skip: OWN_STORE }, ...)`: tests that start a PGlite of their own whatever
 * the store (`npm run dev`, `DB_URL=pglite:...`). A pass with `TEST_STORE=pglite` (CI's second)
 * would only run them again unchanged; without TEST_STORE they run on any machine.
 */
export const OWN_STORE = process.env.TEST_STORE === 'pglite' && 'starts a PGlite of its own whatever the store: runs with TEST_STORE=postgres'

/**
 * An empty PGlite cluster, dumped by the first store the tests start: loading it takes a
 * fraction of the seconds that creating a cluster does. Keyed by PGlite's version and by how
 * src/db/embedded-settings.ts has initdb create a cluster.
 */
const PGLITE_VERSION = (JSON.parse(fs.readFileSync(
  path.join(PROJECT_ROOT, 'node_modules', '@electric-sql', 'pglite', 'package.json'), 'utf8')) as { version: string }).version
const INITDB_KEY = createHash('sha256').update(INITDB_ARGS.join(' ')).digest('hex').slice(0, 8)
const PGLITE_TEMPLATE = path.join(os.tmpdir(), `bookkeeping-pglite-${PGLITE_VERSION}-${INITDB_KEY}.tar`)

/** `postgres://...` of a database named `name` on the admin URL's server. */
function databaseUrl (name: string): string {
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  return url.toString()
}

export function databaseName (url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1))
}

async function admin<T> (fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL })
  await client.connect()
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}

/** The workers of a Citus coordinator at TEST_DB_URL, asked once (none on plain PostgreSQL). */
let citusWorkersOnce: Promise<CitusWorker[]> | undefined
const workersOfCitus = () => (citusWorkersOnce ??= citusWorkers(ADMIN_URL))

/**
 * Drops database `name`, ending its sessions. On Citus the coordinator's maintenance daemon may
 * connect again between the two: the drop is then tried again.
 */
async function dropDatabase (name: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await admin(async (client) => { await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) })
    } catch (err) {
      if ((err as { code?: string }).code !== '55006' || attempt === 5) throw err
      await sleep(200)
    }
  }
}

/**
 * A new in-memory PGlite, served on a loopback port the way the service serves `pglite:` itself
 * (src/db/embedded.ts), stopped when the test ends: its `postgres://` URL.
 */
export async function embeddedDatabase (t: Test): Promise<string> {
  const template = fs.existsSync(PGLITE_TEMPLATE) ? PGLITE_TEMPLATE : undefined
  const store = await startEmbedded('memory', (err) => t.fail(`the embedded database failed: ${err.message}`), { template })
  t.teardown(() => store.stop())
  if (template === undefined) {
    // The first store of the run keeps its empty cluster for the next ones. Written aside
    // and linked into place, so a test file starting meanwhile never loads half a file; and
    // only where no other file put one first: a store reads its template lazily, by path
    // (fs.openAsBlob), and fails when the file there was replaced after it opened it
    const partial = `${PGLITE_TEMPLATE}.${process.pid}`
    fs.writeFileSync(partial, await store.dump())
    try {
      fs.linkSync(partial, PGLITE_TEMPLATE)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    } finally {
      fs.rmSync(partial, { force: true })
    }
  }
  return store.url
}

/**
 * A fresh, empty database for this test file, dropped when the file ends. On PGlite: a new
 * in-memory PGlite (`embeddedDatabase`).
 */
export async function createDatabase (t: Test): Promise<string> {
  if (STORE === 'pglite') return embeddedDatabase(t)
  const name = `bookkeeping_test_${process.pid}_${randomBytes(4).toString('hex')}`
  const workers = ON_CITUS ? await workersOfCitus() : []
  await admin((client) => client.query(`CREATE DATABASE ${name}`))
  t.teardown(() => dropDatabase(name))
  // On a Citus coordinator each test database is a cluster of its own on the same servers
  if (workers.length > 0) t.teardown(await spreadOverCitus(ADMIN_URL, name, workers))
  if (STORE === 'pgbouncer') {
    const pgbouncer = await startPgbouncer(ADMIN_URL)
    t.teardown(() => pgbouncer.stop())
    return pgbouncer.url(databaseUrl(name))
  }
  return databaseUrl(name)
}

/**
 * Makes the server refuse connections to the database at `dbUrl` and ends the sessions it has:
 * every query of the service then fails as with a database that is gone. The returned function
 * lets connections in again; it also runs when the test ends, before the database is dropped.
 */
export async function refuseConnections (t: Test, dbUrl: string): Promise<() => Promise<void>> {
  const name = databaseName(dbUrl)
  const allow = () => admin((client) => client.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`))
  t.teardown(allow)
  await admin(async (client) => {
    await client.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`)
    // With a timeout it returns once each session has ended, not once each was signalled
    await client.query('SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = $1', [name])
  })
  return async () => { await allow() }
}

/**
 * Inserts `count` books titled `Title <n>` by `Author <n>` (years 0 to 2999), in one statement.
 * Each row also goes into the indexes of every sort and the two trigram indexes: for many books,
 * `createDatabaseWithBooks` is far cheaper.
 */
export async function seedBooks (db: pg.Client, count: number): Promise<void> {
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'Title ' || g, 'Author ' || g, g % 3000 FROM generate_series(1, $1::int) g`, [count])
}

/**
 * A fresh database (`createDatabase`) holding `count` books (`seedBooks`), in the tables of the
 * migration steps `wanted` picks (by default every step but those that run alone), as a
 * migration cut short would leave them: the service that starts on it applies the others over
 * the books. By default it then builds its indexes over them at once: inserting a few hundred
 * thousand books one by one into eight indexes (two of trigrams) is slow, and loads the machine
 * under every other test file. On PGlite the store comes with every step applied
 * (src/db/embedded-create.ts): the steps that run alone are undone; others cannot be.
 */
export async function createDatabaseWithBooks (
  t: Test, count: number, wanted: (step: Migration) => boolean = ({ alone }) => alone === undefined
): Promise<string> {
  const dbUrl = await createDatabase(t)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 120_000 })
  await db.query(SCHEMA_MIGRATIONS)
  const applied = new Set((await db.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map(({ version }) => version))
  for (const step of migrations) {
    if (wanted(step) === applied.has(step.version)) continue
    if (applied.has(step.version)) {
      if (step.alone === undefined) throw new Error(`createDatabaseWithBooks: step ${step.version} is applied already, and cannot be undone`)
      if (step.index !== undefined) await db.query(`DROP INDEX ${step.index}`)
      await db.query('DELETE FROM schema_migrations WHERE version = $1', [step.version])
    } else {
      for (const statement of statementsOf(step)) await db.query(statement)
      await db.query(RECORD, [step.version, step.name])
    }
  }
  await seedBooks(db, count)
  await db.end()
  return dbUrl
}

/**
 * A connected pg client with bounded waits, ended when the test ends. The bounds are the
 * client's own: a startup parameter would be refused by PgBouncer (TEST_STORE=pgbouncer).
 * `queryTimeoutMs`: longer for a client that seeds hundreds of thousands of rows, which PGlite
 * beside other test files can take longer than the default to write; 0 for none, for a client
 * that streams `COPY ... TO STDOUT` (pg arms the timeout, the stream never clears it).
 */
export async function pgClient (t: Test, connectionString: string, { queryTimeoutMs = 10_000 } = {}): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString,
    connectionTimeoutMillis: 5000,
    query_timeout: queryTimeoutMs,
    application_name: 'bookkeeping-test'
  })
  // A backend terminated under us (the tests do that) must not end the test process
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => withTimeout(client.end(), 5000, 'ending a pg client').catch(() => {}))
  return client
}

/**
 * How many of the service's sessions on the database at `dbUrl` are in the state `condition` (SQL
 * on a row of `pg_stat_activity`); `application_name` is the service's, see
 * plugins/external/postgres.ts.
 */
async function serviceSessions (client: pg.Client, dbUrl: string, condition: string): Promise<number> {
  const { rows } = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = $1 AND application_name = 'bookkeeping' AND ${condition}`, [databaseName(dbUrl)])
  return rows[0]!.n
}

/** How many of the service's sessions run a statement now (a page of a listing being read, say). */
export const serviceQueriesRunning = (client: pg.Client, dbUrl: string) => serviceSessions(client, dbUrl, "state <> 'idle'")

/**
 * Whether the service has stopped reading for its listings: no statement of it running, seen
 * twice half a second apart (once can fall between two pages that still fitted a socket's
 * buffers). For `waitUntil`: how soon it stops depends on the machine's load.
 */
export async function serviceStoppedReading (client: pg.Client, dbUrl: string): Promise<boolean> {
  return await serviceQueriesRunning(client, dbUrl) === 0 && (await sleep(500), await serviceQueriesRunning(client, dbUrl) === 0)
}

/** Whether TEST_DB_URL names a Citus coordinator (never the default server, so never asked there). */
export const ON_CITUS = process.env.TEST_DB_URL !== undefined && STORE !== 'pglite' && (await workersOfCitus()).length > 0

/** On Citus (ON_CITUS): the test database at `dbUrl` as each worker serves it. */
export async function citusWorkerUrls (dbUrl: string): Promise<string[]> {
  return (await workersOfCitus()).map(({ host, port }) => onNode(dbUrl, host, port, databaseName(dbUrl)))
}

/**
 * The condition, on a row of `pg_stat_activity`, that its session waits for a lock. Read from the
 * lock manager, not `wait_event_type = 'Lock'`: a waiting backend that is woken (by its own
 * deadlock check after a second, by the signal every DROP DATABASE sends to all backends, and
 * the test files drop theirs all the time) shows no wait event until it sleeps again, while it
 * stays queued on the lock all along. On Citus a session of the coordinator waits through its
 * connection to a worker, which Citus reports in `citus_lock_waits`.
 */
export const WAITS_ON_A_LOCK = ON_CITUS
  ? `(cardinality(pg_blocking_pids(pid)) > 0 OR pid IN (SELECT citus_pid_for_gpid(waiting_gpid) FROM citus_lock_waits
      WHERE waiting_nodeid = (SELECT nodeid FROM pg_dist_node WHERE groupid = 0)))`
  : 'cardinality(pg_blocking_pids(pid)) > 0'

/** How many of the service's sessions wait for a lock. */
export const serviceSessionsOnLock = (client: pg.Client, dbUrl: string) => serviceSessions(client, dbUrl, WAITS_ON_A_LOCK)

/**
 * Resolves, with the milliseconds it took, once at least `count` of the service's sessions on
 * this test's database wait for a lock (a statement blocked by a row or table lock the test
 * holds); rejects after `ms`.
 */
export function waitForSessionsOnLock (client: pg.Client, dbUrl: string, count: number, ms = 4000): Promise<number> {
  return waitUntil(async () => await serviceSessionsOnLock(client, dbUrl) >= count, ms, `${count} of the service's sessions waiting on a lock`, 10)
}

/**
 * Brings the table structure of a database up to date (the steps of src/db/migrations.ts): for
 * the service before it listens (plugins/app/migrate.ts), and for the embedded store in the
 * process that creates a new cluster (src/db/embedded-create.ts). Instances starting together
 * on one database apply each step exactly once: one at a time, each holds a transaction-level
 * advisory lock in a transaction of its own for as long as it migrates (the lock ends with that
 * transaction, so it holds through a pooler in transaction mode, where a session lock would stay
 * with a server connection that is then handed to someone else). The others wait, asking for the
 * lock again every 250 ms in a short transaction of its own: `CREATE INDEX CONCURRENTLY` waits
 * for the transaction of every statement that holds a snapshot older than its own, so a
 * statement blocked on the lock, or a waiting transaction kept open, would have two instances
 * wait on each other for ever.
 *
 * Each step runs in a transaction of its own with the row that records it, so a failed step
 * leaves nothing half done. Its locks are asked for with a 500 ms `lock_timeout`, and it runs
 * within the 3 s `statement_timeout` of every transaction (src/db/time-bounds.ts), both retried:
 * a step that waits for a long transaction to end, or holds its lock while it is held up, would
 * otherwise queue every read and write of the table behind it. A step that runs alone (an index
 * built with `CREATE INDEX CONCURRENTLY`, which lets reads and writes go on while it builds; an
 * `ANALYZE`) runs outside any transaction and without a time bound; an index left invalid by a
 * build cut short is dropped and built again. The steps run on connections of their own, not
 * the pool's, whose client-side time bound (3.1 s) would cut an index build short.
 *
 * On Citus, the transaction of each step then distributes every table that exists and is not
 * yet distributed (src/db/migrations.ts `distribution`), so a cluster needs nothing run by hand
 * and a second start changes nothing. DDL on Citus goes through the coordinator, and so do the
 * service's advisory locks (this one and the idempotency keys'): a lock is seen only on the node
 * that takes it, so the service refuses to start on a worker.
 *
 * PGlite is one session, which a second connection shares (and a lock taken there would be its
 * own; pglite-socket serves a connection's transaction before the next connection's queries):
 * on PGlite the migration runs on one connection, without the lock. For the embedded store the
 * data directory's lock already keeps a second instance away (src/db/data-dir-lock.ts).
 */
import pg from 'pg'
import { IS_PGLITE } from './embedded.js'
import { distribution, migrations, onCoordinator, statementsOf, type Migration } from './migrations.js'
import { BEGIN_BOUNDED, CONNECT_TIMEOUT_MS } from './time-bounds.js'

/** Arbitrary but fixed: every instance of the service must take the same lock. */
const MIGRATION_LOCK_KEY = 7_301_455_001
const LOCK_POLL_MS = 250
/** How often an instance waiting for another's migration says so. */
const WAITING_LOG_MS = 10_000
/** A step's wait for its locks, and how often it is tried again after waiting that long. */
const STEP_LOCK_TIMEOUT_MS = 500
const STEP_LOCK_ATTEMPTS = 40
/** How often a step is tried again after running past the statement bound: a stall passes, a step that needs longer fails soon. */
const STEP_TIMEOUT_ATTEMPTS = 3
/** SQLSTATE lock_not_available: `lock_timeout` ran out. */
const LOCK_NOT_AVAILABLE = '55P03'
/** SQLSTATE query_canceled: the statement ran past its `statement_timeout` (or was cancelled). */
const QUERY_CANCELED = '57014'

// Whether the database is a Citus cluster, and whether this is its coordinator
const CITUS = 'SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = \'citus\') AS citus'
const COORDINATOR = 'SELECT citus_is_coordinator() AS coordinator'
// create_distributed_table copies rows a table already holds (one that ran on PostgreSQL before
// Citus was installed) to the shards; the local copy is then emptied, as Citus asks
const DISTRIBUTE = `SELECT create_distributed_table(t.name, t.column_name),
                           truncate_local_data_after_distributing_table(t.name)
                    FROM unnest($1::text[], $2::text[]) AS t(name, column_name)
                    WHERE to_regclass(t.name) IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t.name::regclass)`
// The local tables Citus is told of (src/db/migrations.ts `onCoordinator`); it needs the
// coordinator in its metadata (citus_set_coordinator_host, docs/deployment.md)
const KEEP_ON_COORDINATOR = `SELECT citus_add_local_table_to_metadata(t.name)
                             FROM unnest($1::text[]) AS t(name)
                             WHERE to_regclass(t.name) IS NOT NULL
                               AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t.name::regclass)`
/** The table that records the steps applied, and how a step is recorded (tests make tables as a migration cut short leaves them). */
export const SCHEMA_MIGRATIONS = `CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`
export const RECORD = 'INSERT INTO schema_migrations (version, name) VALUES ($1, $2)'
const INVALID_INDEX = 'SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid'

class NotCoordinatorError extends Error {
  constructor () {
    super('DB_URL names a Citus worker; point it at the coordinator (docs/deployment.md, Citus)')
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** What the migration says as it goes: the service's logger, or nothing. */
export interface MigrationLog {
  info (details: object, message: string): void
  warn (details: object, message: string): void
}

/**
 * Applies the steps the database at `connectionString` has not had yet. Says whether it is a
 * Citus cluster. Throws NotCoordinatorError on a Citus worker, and an error that says what to
 * check for anything else.
 */
export async function migrate (
  { connectionString, applicationName, log }: { connectionString: string, applicationName: string, log: MigrationLog }
): Promise<{ citus: boolean }> {
  // A connection of the migration's own has no pool listener: a dropped one must not end the process
  const onError = (err: Error) => log.warn({ err }, 'database connection lost while migrating')
  const clients: pg.Client[] = []
  async function connect (): Promise<pg.Client> {
    const client = new pg.Client({ connectionString, application_name: applicationName, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, keepAlive: true })
    client.on('error', onError)
    clients.push(client)
    await client.connect()
    return client
  }

  /**
   * `work` in a bounded transaction of `client`'s, tried again while it waits too long for a lock
   * or runs past the statement bound: no step rewrites a table, so one that runs that long was
   * held up (by a server whose disk stalls, say), and holding its lock longer would hold up the
   * table's reads and writes with it.
   */
  async function inTransaction (client: pg.Client, work: () => Promise<unknown>) {
    let lockWaits = 0
    let timeouts = 0
    for (;;) {
      try {
        await client.query(`${BEGIN_BOUNDED}; SET LOCAL lock_timeout = ${STEP_LOCK_TIMEOUT_MS}`)
        await work()
        await client.query('COMMIT')
        return
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {})
        const code = (err as { code?: string }).code
        if (code === LOCK_NOT_AVAILABLE) lockWaits++
        else if (code === QUERY_CANCELED) timeouts++
        else throw err
        if (lockWaits === STEP_LOCK_ATTEMPTS || timeouts === STEP_TIMEOUT_ATTEMPTS) throw err
        log.info({ attempt: lockWaits + timeouts }, code === LOCK_NOT_AVAILABLE
          ? 'a migration step waited too long for a lock; trying again'
          : 'a migration step ran past its time bound; trying again')
        await sleep(STEP_LOCK_TIMEOUT_MS)
      }
    }
  }

  /** Holds the migration lock in an open transaction of `holder`'s, once no other instance holds it. */
  async function takeLock (holder: pg.Client) {
    for (let waited = 0; ; waited += LOCK_POLL_MS) {
      // READ COMMITTED whatever the database's default: a REPEATABLE READ transaction keeps its
      // snapshot for as long as it lasts, and index builds would wait for it. Without
      // parameters: the simple protocol, whose portal ends with the statement (the extended
      // protocol's unnamed portal would keep the statement's snapshot while the transaction
      // idles)
      await holder.query('BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL idle_in_transaction_session_timeout = 0')
      const { rows: [row] } = await holder.query<{ locked: boolean }>(`SELECT pg_try_advisory_xact_lock(${MIGRATION_LOCK_KEY}) AS locked`)
      if (row!.locked) return
      // Ended before the wait: `CREATE INDEX CONCURRENTLY` waits for the whole transaction of any
      // statement that ran while it looked, and a transaction kept open across the waits would
      // end only once this instance had the lock, which the building instance holds
      await holder.query('ROLLBACK')
      if (waited % WAITING_LOG_MS === 0) log.info({ waitedMs: waited }, 'waiting for another instance to finish migrating')
      await sleep(LOCK_POLL_MS)
    }
  }

  /** On Citus, distributes the tables that exist and are not yet distributed, and tells it of those it keeps on the coordinator. */
  async function distribute (work: pg.Client) {
    const { rowCount } = await work.query(DISTRIBUTE, [distribution.map((d) => d.table), distribution.map((d) => d.column)])
    if (rowCount !== 0) log.info({ tables: rowCount }, 'distributed tables over the Citus workers')
    const { rowCount: kept } = await work.query(KEEP_ON_COORDINATOR, [onCoordinator])
    if (kept !== 0) log.info({ tables: kept }, 'added tables of the coordinator to Citus\'s metadata')
  }

  async function apply (work: pg.Client, migration: Migration, citus: boolean) {
    const { version, name, alone, index } = migration
    const record = () => work.query(RECORD, [version, name])
    const run = async () => {
      for (const statement of statementsOf(migration)) await work.query(statement)
    }
    if (alone === undefined) {
      await inTransaction(work, async () => {
        await run()
        await record()
        if (citus) await distribute(work)
      })
    } else {
      // Left invalid by a build cut short (the lock says no one else is building it)
      if (index !== undefined && (await work.query(INVALID_INDEX, [index])).rowCount === 1) await work.query(`DROP INDEX CONCURRENTLY ${index}`)
      await run()
      await inTransaction(work, record)
    }
    log.info({ version, name }, 'applied migration')
  }

  let work: pg.Client
  try {
    work = await connect()
  } catch (err) {
    await Promise.all(clients.map((client) => client.end().catch(() => {})))
    throw new Error(`cannot connect to the database at DB_URL: ${(err as Error).message}; check DB_URL, and that PostgreSQL runs there`, { cause: err })
  }
  let holder: pg.Client | null = null
  try {
    const citus = (await work.query<{ citus: boolean }>(CITUS)).rows[0]!.citus
    if (citus && !(await work.query<{ coordinator: boolean }>(COORDINATOR)).rows[0]!.coordinator) {
      throw new NotCoordinatorError()
    }
    if (!(await work.query<{ pglite: boolean }>(IS_PGLITE)).rows[0]!.pglite) {
      holder = await connect()
      await takeLock(holder)
    }
    await inTransaction(work, () => work.query(SCHEMA_MIGRATIONS))
    const { rows } = await work.query<{ version: number }>('SELECT version FROM schema_migrations')
    const applied = new Set(rows.map((row) => row.version))
    for (const migration of migrations) {
      if (!applied.has(migration.version)) await apply(work, migration, citus)
    }
    // Tables whose steps all ran before Citus was installed
    if (citus) await inTransaction(work, () => distribute(work))
    await holder?.query('COMMIT')
    return { citus }
  } catch (err) {
    if (err instanceof NotCoordinatorError) throw err
    throw new Error(`database migration failed: ${(err as Error).message}; check that the user DB_URL names may create tables in its database`, { cause: err })
  } finally {
    // Ending the holder's connection ends its transaction, and the lock with it
    await Promise.all(clients.map((client) => client.end().catch(() => {})))
    for (const client of clients) client.off('error', onError)
  }
}

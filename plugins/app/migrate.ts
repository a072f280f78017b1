/**
 * Adds nothing to the instance: while it registers, it brings the table structure up to date,
 * before the server listens. All pending steps run in one transaction under a transaction-level
 * advisory lock, so instances starting together on one database apply each step exactly once
 * and a failed step leaves nothing half done. Both the lock and the time bounds end with the
 * transaction: they hold through a pooler in transaction mode, where a session lock or setting
 * would stay with a server connection that is then handed to someone else.
 *
 * On Citus, the same transaction then distributes every table that is not yet (src/db/migrations.ts
 * `distribution`), so a cluster needs nothing run by hand and a second start changes nothing. DDL
 * on Citus goes through the coordinator, and so do the service's advisory locks (this one and the
 * idempotency keys'): a lock is seen only on the node that takes it, so the service refuses to
 * start on a worker. It decorates `fastify.sqlDialect`, the SQL the repository sends.
 *
 * Not `fastify.pg.transact`: it adds no `error` listener to the client it checks out, so a
 * connection dropped while migrating would end the process, and it reports a connection that
 * could not be made like a step that failed.
 */
import fp from 'fastify-plugin'
import type { PoolClient } from 'pg'
import { distribution, migrations } from '../../src/db/migrations.js'
import { BEGIN_BOUNDED } from '../../src/db/time-bounds.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** `citus`: the SQL that Citus runs across shards (plugins/app/books-repository.ts). */
    sqlDialect: 'postgres' | 'citus'
  }
}

/** Arbitrary but fixed: every instance of the service must take the same lock. */
const MIGRATION_LOCK_KEY = 7_301_455_001

// Whether the database is a Citus cluster, and whether this is its coordinator
const CITUS = 'SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = \'citus\') AS citus'
const COORDINATOR = 'SELECT citus_is_coordinator() AS coordinator'
// create_distributed_table copies rows a table already holds (one that ran on PostgreSQL before
// Citus was installed) to the shards; the local copy is then emptied, as Citus asks
const DISTRIBUTE = `SELECT create_distributed_table(t.name, t.column_name),
                           truncate_local_data_after_distributing_table(t.name)
                    FROM unnest($1::text[], $2::text[]) AS t(name, column_name)
                    WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t.name::regclass)`

class NotCoordinatorError extends Error {
  constructor () {
    super('DB_URL names a Citus worker; point it at the coordinator (docs/deployment.md, Citus)')
  }
}

export default fp(async function migrate (fastify) {
  let client: PoolClient
  try {
    client = await fastify.pg.connect()
  } catch (err) {
    throw new Error(`cannot connect to the database at DB_URL: ${(err as Error).message}; check DB_URL, and that PostgreSQL runs there`, { cause: err })
  }
  // A checked-out client has no pool listener: a dropped connection must not end the process
  const onError = (err: Error) => fastify.log.warn({ err }, 'database connection lost while migrating')
  client.on('error', onError)
  try {
    await client.query(BEGIN_BOUNDED)
    const citus = (await client.query<{ citus: boolean }>(CITUS)).rows[0]!.citus
    if (citus && !(await client.query<{ coordinator: boolean }>(COORDINATOR)).rows[0]!.coordinator) {
      throw new NotCoordinatorError()
    }
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY])
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`)
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations')
    const applied = new Set(rows.map((row) => row.version))
    for (const { version, name, sql } of migrations) {
      if (applied.has(version)) continue
      await client.query(sql)
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [version, name])
      fastify.log.info({ version, name }, 'applied migration')
    }
    if (citus) {
      const { rowCount } = await client.query(DISTRIBUTE, [distribution.map((d) => d.table), distribution.map((d) => d.column)])
      if (rowCount !== 0) fastify.log.info({ tables: rowCount }, 'distributed tables over the Citus workers')
    }
    await client.query('COMMIT')
    fastify.decorate('sqlDialect', citus || fastify.config.DB_DIALECT === 'citus' ? 'citus' : 'postgres')
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {})
    if (err instanceof NotCoordinatorError) throw err
    throw new Error(`database migration failed: ${(err as Error).message}; check that the user DB_URL names may create tables in its database`, { cause: err })
  } finally {
    client.off('error', onError)
    client.release()
  }
}, { name: 'migrate', dependencies: ['postgres'] })

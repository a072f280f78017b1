/**
 * Adds nothing to the instance: while it registers, it brings the table structure up to date,
 * before the server listens. All pending steps run in one transaction under a transaction-level
 * advisory lock, so instances starting together on one database apply each step exactly once
 * and a failed step leaves nothing half done. Both the lock and the time bounds end with the
 * transaction: they hold through a pooler in transaction mode, where a session lock or setting
 * would stay with a server connection that is then handed to someone else.
 *
 * Not `fastify.pg.transact`: it adds no `error` listener to the client it checks out, so a
 * connection dropped while migrating would end the process, and it reports a connection that
 * could not be made like a step that failed.
 */
import fp from 'fastify-plugin'
import type { PoolClient } from 'pg'
import { migrations } from '../../src/db/migrations.js'
import { BEGIN_BOUNDED } from '../../src/db/time-bounds.js'

/** Arbitrary but fixed: every instance of the service must take the same lock. */
const MIGRATION_LOCK_KEY = 7_301_455_001

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
    await client.query('COMMIT')
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {})
    throw new Error(`database migration failed: ${(err as Error).message}; check that the user DB_URL names may create tables in its database`, { cause: err })
  } finally {
    client.off('error', onError)
    client.release()
  }
}, { name: 'migrate', dependencies: ['postgres'] })

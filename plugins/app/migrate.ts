/**
 * Adds nothing to the instance but `fastify.sqlDialect`: while it registers, it brings the table
 * structure up to date (src/db/migrate.ts), before the server listens and before anything
 * queries the database.
 */
import fp from 'fastify-plugin'
import { CITUS, POSTGRES, type SqlDialect } from '../../src/db/dialect.js'
import { migrate } from '../../src/db/migrate.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Citus's SQL on a Citus coordinator or with `DB_DIALECT=citus`, PostgreSQL's otherwise (src/db/dialect.ts). */
    sqlDialect: SqlDialect
  }
}

export default fp(async function migrateTables (fastify) {
  const { connectionString, application_name: applicationName } = fastify.pg.pool.options
  const { citus } = await migrate({ connectionString: connectionString!, applicationName: applicationName!, log: fastify.log })
  fastify.decorate('sqlDialect', citus || fastify.config.DB_DIALECT === 'citus' ? CITUS : POSTGRES)
}, { name: 'migrate', dependencies: ['postgres'] })

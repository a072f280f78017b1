/**
 * Adds nothing to the instance but `fastify.sqlDialect`: while it registers, it brings the table
 * structure up to date (src/db/migrate.ts), before the server listens and before anything
 * queries the database.
 */
import fp from 'fastify-plugin'
import { migrate } from '../../src/db/migrate.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** `citus`: the SQL that Citus runs across shards (plugins/app/books-repository.ts). */
    sqlDialect: 'postgres' | 'citus'
  }
}

export default fp(async function migrateTables (fastify) {
  const { connectionString, application_name: applicationName } = fastify.pg.pool.options
  const { citus } = await migrate({ connectionString: connectionString!, applicationName: applicationName!, log: fastify.log })
  fastify.decorate('sqlDialect', citus || fastify.config.DB_DIALECT === 'citus' ? 'citus' : 'postgres')
}, { name: 'migrate', dependencies: ['postgres'] })

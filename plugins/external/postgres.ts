import fastifyPostgres from '@fastify/postgres'
import fp from 'fastify-plugin'

/**
 * The PostgreSQL pool as `fastify.pg`, closed when the server closes.
 *
 * @fastify/postgres adds no `error` listener to the pool: an idle client dropped by the server
 * (restart, `pg_terminate_backend`) would then emit an unhandled `error` and end the process.
 * The pool discards such a client by itself; we only log it.
 *
 * @see https://github.com/fastify/fastify-postgres
 */
export default fp(async function postgres (fastify) {
  const { DB_URL, DB_POOL_MAX } = fastify.config
  await fastify.register(fastifyPostgres, {
    connectionString: DB_URL,
    max: DB_POOL_MAX,
    application_name: 'bookkeeping',
    // Without these a lost database makes requests wait forever
    connectionTimeoutMillis: 5000,
    statement_timeout: 5000,
    idle_in_transaction_session_timeout: 5000,
    keepAlive: true
  })
  fastify.pg.pool.on('error', (err) => {
    fastify.log.warn({ err }, 'idle database connection lost')
  })
}, { name: 'postgres', dependencies: ['@fastify/env'] })

import fastifyPostgres from '@fastify/postgres'
import fp from 'fastify-plugin'

export const DB_CONNECT_TIMEOUT_MS = 2_000
export const DB_QUERY_TIMEOUT_MS = 3_000

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
    application_name: 'bookkeeping',
    // A lost database must cost a request at most 5 s: 2 s to get a connection, 3 s for the
    // query. The server cancels a slow statement itself; the client-side timeout covers a
    // network that swallows packets, and its connection is then discarded, not reused.
    connectionTimeoutMillis: DB_CONNECT_TIMEOUT_MS,
    statement_timeout: DB_QUERY_TIMEOUT_MS,
    query_timeout: DB_QUERY_TIMEOUT_MS + 100,
    idle_in_transaction_session_timeout: DB_QUERY_TIMEOUT_MS,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    max: DB_POOL_MAX
  })
  fastify.pg.pool.on('error', (err) => {
    fastify.log.warn({ err }, 'idle database connection lost')
  })
}, { name: 'postgres', dependencies: ['@fastify/env'] })

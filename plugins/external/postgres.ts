import fastifyPostgres from '@fastify/postgres'
import fp from 'fastify-plugin'
import { EMBEDDED_PREFIX, isEmbedded, startEmbedded } from '../../src/db/embedded.js'
import { CONNECT_TIMEOUT_MS, STATEMENT_TIMEOUT_MS } from '../../src/db/time-bounds.js'

/**
 * The PostgreSQL pool as `fastify.pg`, closed when the server closes.
 *
 * With `DB_URL=pglite:<directory>` or `pglite:memory` the database is PGlite, started here in a
 * worker thread and reached over a loopback socket (src/db/embedded.ts): everything above the
 * driver is the same code as with a PostgreSQL server. PGlite is one session, which every
 * connection to it shares, so the pool then has one connection: two would collide on the
 * names of the prepared statements.
 *
 * @fastify/postgres adds no `error` listener to the pool: an idle client dropped by the server
 * (restart, `pg_terminate_backend`) would then emit an unhandled `error` and end the process.
 * The pool discards such a client by itself; we only log it.
 *
 * @see https://github.com/fastify/fastify-postgres
 */
export default fp(async function postgres (fastify) {
  const { DB_URL, DB_POOL_MAX } = fastify.config
  let connectionString = DB_URL
  if (isEmbedded(DB_URL)) {
    const store = await startEmbedded(DB_URL.slice(EMBEDDED_PREFIX.length), (err) => {
      fastify.log.error({ err }, 'the embedded database failed')
    })
    connectionString = store.url
    // onClose hooks run last-added first: added before the pool's, this runs after the pool
    // has closed its connection
    fastify.addHook('onClose', () => store.stop())
  }
  await fastify.register(fastifyPostgres, {
    connectionString,
    application_name: 'bookkeeping',
    // A lost database must cost a request at most DATABASE_CALL_BOUND_MS (src/db/time-bounds.ts).
    // The server cancels a slow statement itself; the client-side timeout, a little later,
    // covers a network that swallows packets, and its connection is then discarded, not reused.
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    statement_timeout: STATEMENT_TIMEOUT_MS,
    query_timeout: STATEMENT_TIMEOUT_MS + 100,
    idle_in_transaction_session_timeout: STATEMENT_TIMEOUT_MS,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    max: isEmbedded(DB_URL) ? 1 : DB_POOL_MAX
  })
  fastify.pg.pool.on('error', (err) => {
    fastify.log.warn({ err }, 'idle database connection lost')
  })
  if (isEmbedded(DB_URL)) {
    // The one PGlite session outlives connections: the prepared statements of a connection
    // the pool replaced (idle, failed) are still there, and preparing them again would fail.
    // This runs before any query of the new connection, which prepares its own as needed
    fastify.pg.pool.on('connect', (client) => {
      client.query('DEALLOCATE ALL').catch(() => {})
    })
  }
}, { name: 'postgres', dependencies: ['env'] })

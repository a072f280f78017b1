/**
 * Adds `fastify.pg` (@fastify/postgres): the PostgreSQL pool, ended by the plugin's `onClose`
 * hook when the server closes, with an `error` listener of ours. With the embedded database,
 * also an `onClose` hook that stops it. (`request.pg` and the `pg.transact` route option come
 * along, unused here.)
 *
 * With `DB_URL=pglite:<directory>` or `pglite:memory` the database is PGlite, started here in a
 * worker thread and reached over a loopback socket (src/db/embedded.ts): everything above the
 * driver is the same code as with a PostgreSQL server. PGlite is one session, which every
 * connection to it shares, so the pool then has one connection: the transactions of two would
 * interleave in that one session.
 *
 * Nothing here depends on the state of a session, so `DB_URL` may point at a pooler in
 * transaction mode (PgBouncer, docs/deployment.md): no startup parameters besides
 * `application_name` (which PgBouncer knows), no named statements, and the server-side time
 * bounds are set per transaction (src/db/bounded-query.ts).
 *
 * @fastify/postgres adds no `error` listener to the pool or its clients: a connection dropped by
 * the server (restart, `pg_terminate_backend`) would then emit an unhandled `error` and end the
 * process. Ours are added as the pool makes its connections (src/db/lost-connections.ts); the pool
 * discards an idle one that was lost by itself, and we log it.
 *
 * @see https://github.com/fastify/fastify-postgres
 */
import fastifyPostgres from '@fastify/postgres'
import fp from 'fastify-plugin'
import { EMBEDDED_PREFIX, isEmbedded, startEmbedded } from '../../src/db/embedded.js'
import { listenForLostConnections } from '../../src/db/lost-connections.js'
import { CONNECT_TIMEOUT_MS, STATEMENT_TIMEOUT_MS } from '../../src/db/time-bounds.js'

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
    // The server cancels a slow statement itself (BEGIN_BOUNDED); the client-side timeout, a
    // little later, covers a network that swallows packets, and its connection is then
    // discarded, not reused.
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: STATEMENT_TIMEOUT_MS + 100,
    // The commands of a bounded statement go out in one write (src/db/bounded-query.ts)
    pipeline: true,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    max: isEmbedded(DB_URL) ? 1 : DB_POOL_MAX
  })
  listenForLostConnections(fastify.pg.pool, (err) => fastify.log.warn({ err }, 'idle database connection lost'))
}, { name: 'postgres', dependencies: ['env'] })

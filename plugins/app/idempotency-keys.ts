/**
 * Adds `fastify.idempotencyKeys`, made by `createIdempotencyKeys` (below) on the pool of
 * @fastify/postgres once migrate has brought the tables up to date: the removal of the keys past
 * their retention (plugins/app/idempotency-keys-sweep.ts). The keys are written and read by the
 * creates that carry them (src/db/books-sql.ts).
 */
import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import { boundedQuery } from '../../src/db/bounded-query.js'
import type { SqlDialect } from '../../src/db/dialect.js'

declare module 'fastify' {
  interface FastifyInstance {
    idempotencyKeys: ReturnType<typeof createIdempotencyKeys>
  }
}

// One short transaction per batch of expired keys, its row locks held for moments; rows another
// instance's sweep holds are skipped, not waited for (`skipLockedRows`). Citus locks no rows
// across shards: there a sweep waits for another one's delete, then removes what that one left.
// Citus runs one multi-shard write at a time on a shard, taking the shards in order, so two
// sweeps never deadlock
const sweepKeys = (skipLockedRows: string) => `DELETE FROM idempotency_keys WHERE key IN (
           SELECT key FROM idempotency_keys
           WHERE created_at < now() - make_interval(secs => $1)
           ORDER BY created_at LIMIT $2${skipLockedRows}
         )`

function createIdempotencyKeys (pg: PostgresDb, dialect: SqlDialect) {
  const SWEEP_KEYS = sweepKeys(dialect.skipLockedRows)

  return {
    /**
     * Removes up to `limit` keys older than `retentionSeconds`, oldest first, in one short
     * transaction; answers how many.
     */
    async sweep (retentionSeconds: number, limit: number): Promise<number> {
      const { rowCount } = await boundedQuery(pg.pool, { text: SWEEP_KEYS, values: [retentionSeconds, limit] })
      return rowCount ?? 0
    }
  }
}

export default fp(async function idempotencyKeys (fastify) {
  fastify.decorate('idempotencyKeys', createIdempotencyKeys(fastify.pg, fastify.sqlDialect))
}, { name: 'idempotency-keys', dependencies: ['postgres', 'migrate'] })

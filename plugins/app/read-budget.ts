/**
 * Adds `fastify.readBudget`: the pool's connections that long reads may hold at once, the pages
 * of the listings (plugins/app/listings-repository.ts) and the pages of the feeds that catch up
 * from the change log (plugins/app/changes-feed.ts) together, half of them at most
 * (`listingConnections`). A thousand such reads then wait for their turn in this process's queue
 * (one query at most per listing or feed, without a time limit), not in the pool's queue ahead of
 * every other request, where the 2 s connection bound would cut them off and everyone else would
 * wait behind them. One budget for both: two would together hold every connection of the pool.
 */
import fp from 'fastify-plugin'
import pLimit, { type LimitFunction } from 'p-limit'

declare module 'fastify' {
  interface FastifyInstance {
    readBudget: LimitFunction
  }
}

/** The share of the pool's connections that long reads may use at once: half, at least one. */
export function listingConnections (poolMax: number): number {
  return Math.max(1, Math.floor(poolMax / 2))
}

export default fp(async function readBudget (fastify) {
  fastify.decorate('readBudget', pLimit(listingConnections(fastify.pg.pool.options.max)))
}, { name: 'read-budget', dependencies: ['postgres'] })

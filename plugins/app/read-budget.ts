/**
 * Adds `fastify.readBudget`: the pool's connections that long reads may hold at once, the pages
 * of the listings (plugins/app/listings-repository.ts) and the pages of the feeds that catch up
 * from the change log (plugins/app/changes-feed.ts) together, half of them at most
 * (`listingConnections`). A thousand such reads then wait for their turn in this process's queue
 * (one query at most per listing or feed, without a time limit), not in the pool's queue ahead of
 * every other request, where the 2 s connection bound would cut them off and everyone else would
 * wait behind them. One budget for both: two would together hold every connection of the pool.
 *
 * The budget is fair between clients (src/listing-slots.ts): `readBudget.of(client)` runs a
 * read for one client address, which holds at most half of these connections at once, and the
 * clients that wait are served in turn; `readBudget(fn)` runs one for no client in particular
 * (each such call counts as a client of its own, so they keep their order). `readBudget.slots`
 * tells what is held and what waits.
 */
import fp from 'fastify-plugin'
import { ListingSlots, type SlotRunner } from '../../src/listing-slots.js'

type ReadBudget = SlotRunner & {
  /** Runs reads for `client` (`clientOf(request)`, src/listing-slots.ts). */
  of (client: string): SlotRunner
  readonly slots: ListingSlots
}

declare module 'fastify' {
  interface FastifyInstance {
    readBudget: ReadBudget
  }
}

/** The share of the pool's connections that long reads may use at once: half, at least one. */
export function listingConnections (poolMax: number): number {
  return Math.max(1, Math.floor(poolMax / 2))
}

function createReadBudget (connections: number): ReadBudget {
  const slots = new ListingSlots(connections)
  const budget: SlotRunner = (fn) => slots.run(fn)
  return Object.assign(budget, {
    of: (client: string): SlotRunner => (fn) => slots.run(fn, client),
    slots
  })
}

export default fp(async function readBudget (fastify) {
  fastify.decorate('readBudget', createReadBudget(listingConnections(fastify.pg.pool.options.max)))
}, { name: 'read-budget', dependencies: ['postgres'] })

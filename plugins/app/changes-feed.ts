/**
 * Adds `fastify.changesFeed`, the feed of changes that GET /books/changes sends (routes/changes.ts;
 * docs/api.md, Live changes): a `ChangesFeed` (src/changes-feed.ts, which says how it works) on
 * the change log (plugins/app/change-log.ts), with Node's timers and the
 * `changes_feed_subscribers` gauge; its catch-ups read the log within the read budget that the
 * listings share (plugins/app/read-budget.ts), and take the CPU in slices of this instance's
 * catch-up scheduler (src/catch-up-scheduler.ts), a share of it that live requests keep the
 * rest of (an `onRequest` hook counts them). A `preClose` hook ends every feed as the close
 * begins, so its client resumes on another instance; an `onClose` hook stops its reader. The log
 * is pruned in batches (src/db/batched-removal.ts): what it keeps is CHANGES_KEPT_HOURS and
 * CHANGES_KEPT_COUNT.
 */
import fp from 'fastify-plugin'
import { Gauge } from 'prom-client'
import { changeIds } from '../../src/changes.js'
import { CatchUpScheduler } from '../../src/catch-up-scheduler.js'
import { acceptedSecrets } from '../../src/config.js'
import { ChangesFeed } from '../../src/changes-feed.js'
import { removeInBatches } from '../../src/db/batched-removal.js'
import { nodeTimers } from '../../src/timers.js'

declare module 'fastify' {
  interface FastifyInstance {
    changesFeed: Pick<ChangesFeed, 'open' | 'closing' | 'ids'>
  }
}

export default fp(async function changesFeed (fastify) {
  const { changeLog, readBudget, log, config } = fastify
  const subscribers = new Gauge({ name: 'changes_feed_subscribers', help: 'Open feeds of GET /books/changes in this instance', registers: [] })
  fastify.metrics.registry.registerMetric(subscribers)
  // The requests taken in, so that catch-ups know when none comes (src/catch-up-scheduler.ts)
  let requests = 0
  fastify.addHook('onRequest', function (request, reply, done) {
    requests++
    done()
  })
  const feed = new ChangesFeed({
    changeLog,
    ids: changeIds(config.SECRET_TOKEN, acceptedSecrets(config)),
    catchUpQueries: readBudget,
    catchUpScheduler: new CatchUpScheduler(nodeTimers, undefined, undefined, () => requests),
    timers: nodeTimers,
    log,
    subscribers,
    tracing: fastify.tracing
  })
  fastify.decorate('changesFeed', feed)

  fastify.addHook('preClose', async () => feed.endFeeds())
  fastify.addHook('onClose', async () => { await feed.close() })
  removeInBatches(fastify, 'changes past the feed\'s retention', (limit) => feed.pruneBatch(limit))
}, { name: 'changes-feed', dependencies: ['change-log', 'read-budget', 'metrics', 'env'] })

/**
 * Adds `fastify.changesFeed`, the feed of changes that GET /books/changes sends (routes/changes.ts;
 * docs/api.md, Live changes), and the hooks that run it:
 *
 * - one reader per instance, while it has feeds open: every POLL_MS it places the committed
 *   changes in the feed's order (plugins/app/change-log.ts, `readChanges`) and reads those
 *   after the last it has sent, then hands them to every subscriber of this process. The
 *   database work does not grow with the subscribers, and an instance without any does none.
 *   Polling, not LISTEN: a pooler in transaction mode (PgBouncer) delivers no notifications;
 * - the last RECENT_CHANGES changes in memory, so that a client that reconnects (after a dropped
 *   connection, or a restart of another instance) resumes without a query; one further behind
 *   catches up from the log, a page at a time as it reads them;
 * - a subscriber that takes none of what it was sent beyond MAX_PENDING_BYTES gets `reset` and
 *   its response ends; a token that expires ends its feed with `token-expired`;
 * - a keep-alive comment every KEEP_ALIVE_MS on every feed;
 * - at close (a `preClose` hook), every feed ends, so its client resumes on another instance;
 *   an `onClose` hook stops the reader;
 * - the log pruned in batches (src/db/batched-removal.ts), its changes placed first (no reader
 *   may have placed them): what it keeps is CHANGES_KEPT_HOURS and CHANGES_KEPT_COUNT.
 */
import type { ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import fp from 'fastify-plugin'
import { Gauge } from 'prom-client'
import { KEEP_ALIVE, TOKEN_EXPIRED, changeIds, event, feedStart, reset, type ChangeIds } from '../../src/changes.js'
import { removeInBatches } from '../../src/db/batched-removal.js'
import type { Change } from './change-log.js'

/** The log keeps every change for at least this long, and at least the last CHANGES_KEPT_COUNT. */
export const CHANGES_KEPT_HOURS = 24
export const CHANGES_KEPT_COUNT = 1_000_000
/** How often each instance looks for new changes: a change reaches its feeds within about this. */
export const POLL_MS = 200
/** After a failed poll: the database is down or failing over. */
const POLL_RETRY_MS = 1000
/**
 * Changes placed and read per poll. A full one is followed by the next at once, unless a feed's
 * client has not taken it yet: then after POLL_MS, so that a client that reads on is not reset
 * during a burst.
 */
const POLL_BATCH = 1000
/** Changes placed per transaction where no feed reads them (before each prune). */
const PLACE_BATCH = 10_000
/** Changes kept in memory for feeds that resume: about 1.5 MB at 150 bytes each. */
export const RECENT_CHANGES = 10_000
/** Changes per page of a feed that catches up. */
const CATCH_UP_PAGE = 500
/** Between two comments on every feed: below SEND_TIMEOUT_MS's minimum (10 s), which would cut an idle feed. */
export const KEEP_ALIVE_MS = 5000
/**
 * What a feed may hold that its client has not taken (Node's buffers, not the kernel's) when the
 * next changes come: about 1,600 changes. Beyond it the feed ends with `reset`. A feed then holds
 * this and one poll's changes at most.
 */
export const MAX_PENDING_BYTES = 256 * 1024

declare module 'fastify' {
  interface FastifyInstance {
    changesFeed: {
      /**
       * A new feed, for a client whose token expires at `expiresAt` (ms), starting after the
       * change at `after` (a `Last-Event-ID`), or with the next change. Rejects when the
       * database cannot say where to start (503), or when the instance is closing.
       */
      open: (after: number | undefined, expiresAt: number, response: ServerResponse) => Promise<Readable>
      /** Whether the feeds are closing: a new one is answered 503. */
      closing: () => boolean
      /** The change ids of the events, signed for this deployment (src/changes.ts). */
      ids: ChangeIds
    }
  }
}

/** One client's feed: the stream its response sends, and the last position it was sent. */
class Subscription {
  readonly stream: Readable
  /** Waiting for the client to take what it was sent (`roomFor`). */
  private drained: (() => void) | null = null
  private expiry: NodeJS.Timeout | undefined
  /** Ended by the service, or its client gone: nothing more is sent. */
  ended = false

  constructor (public position: number, private readonly response: ServerResponse, private readonly onEnd: () => void) {
    this.stream = new Readable({
      highWaterMark: 0,
      read: () => this.wake(),
      destroy: (err, callback) => {
        this.finish()
        callback(err)
      }
    })
    response.on('drain', () => this.wake())
  }

  private finish () {
    this.ended = true
    clearTimeout(this.expiry)
    this.wake()
    this.onEnd()
  }

  private wake () {
    const drained = this.drained
    this.drained = null
    drained?.()
  }

  /** Bytes sent and not yet taken by the client (what Node holds, beyond the kernel's buffers). */
  pending (): number {
    return this.stream.readableLength + this.response.writableLength
  }

  send (text: string) {
    if (!this.ended) this.stream.push(text)
  }

  /** Sends `last` and ends the feed: the response ends once its client has taken what it holds. */
  end (last = '') {
    if (this.ended) return
    if (last !== '') this.stream.push(last)
    this.stream.push(null)
    this.finish()
  }

  expireAt (expiresAt: number) {
    this.expiry = setTimeout(() => this.end(TOKEN_EXPIRED), Math.max(0, expiresAt - Date.now()))
    this.expiry.unref()
  }

  /** Resolves once the client has taken what it was sent, down to half the bound. */
  async roomFor (): Promise<void> {
    while (!this.ended && this.pending() > MAX_PENDING_BYTES / 2) {
      await new Promise<void>((resolve) => { this.drained = resolve })
    }
  }
}

export default fp(async function changesFeed (fastify) {
  const { changeLog: repository, readBudget, log, config } = fastify
  const ids = changeIds(config.SECRET_TOKEN)
  const subscriptions = new Set<Subscription>()
  const live = new Set<Subscription>()

  /** The last position this instance has sent its feeds; null until the first read. */
  let position: number | null = null
  /** The changes after `recentFrom` up to `position`, as their events' text. */
  let recent: Array<{ position: number, text: string }> = []
  let recentFrom = 0
  let closing = false

  fastify.metrics.registry.registerMetric(new Gauge({
    name: 'changes_feed_subscribers',
    help: 'Open feeds of GET /books/changes in this instance',
    registers: [],
    collect () { this.set(subscriptions.size) }
  }))

  const text = (change: Change) => event(change.kind, change.book, ids.encode(change.position))

  /** Where the feed stands after a read of the log: every feed starts over from `last` after reset. */
  function startOver (last: number, why: string) {
    log.warn({ last, sent: position }, why)
    position = last
    recent = []
    recentFrom = last
    for (const subscription of live) {
      subscription.position = last
      subscription.send(reset(ids.encode(last)))
    }
  }

  /** Hands changes read from the log, the ones right after `position`, to the live feeds. */
  function fanOut (changes: Change[]) {
    const from = changes[0]!.position
    const last = changes.at(-1)!.position
    const texts = changes.map(text)
    for (let i = 0; i < changes.length; i++) recent.push({ position: changes[i]!.position, text: texts[i]! })
    position = last
    if (recent.length > 2 * RECENT_CHANGES) recent = recent.slice(-RECENT_CHANGES)
    recentFrom = recent[0]!.position - 1
    const all = texts.join('')
    for (const subscription of live) {
      // A feed that resumed from an id another instance sent may be ahead of this one
      if (subscription.position >= last) continue
      // Looked at before sending: a client that keeps up has taken the last poll's changes by
      // now, however many they were
      if (subscription.pending() > MAX_PENDING_BYTES) {
        log.info({ pending: subscription.pending() }, 'a feed\'s client took too little of it: sent reset and ended')
        subscription.end(reset(ids.encode(last)))
        continue
      }
      subscription.send(subscription.position < from ? all : texts.slice(subscription.position - from + 1).join(''))
      subscription.position = last
    }
  }

  async function poll (): Promise<number> {
    if (position === null) {
      position = (await repository.changesKept()).last
      recentFrom = position
    }
    const { changes, last } = await repository.readChanges(position, POLL_BATCH)
    if (last < position) {
      startOver(last, 'the change log ends before the last change this instance sent (a database restored, or a failover that lost commits): every feed is reset')
      return 0
    }
    if (changes.length === 0) return 0
    if (changes[0]!.position !== position + 1) {
      startOver(position, 'changes this instance had not sent were pruned: every feed is reset')
      return 0
    }
    fanOut(changes)
    return changes.length
  }

  // The reader runs while the instance has feeds: an instance that has none does no work for them
  let timer: NodeJS.Timeout | undefined
  let polling: Promise<void> = Promise.resolve()
  let reading: Promise<void> | null = null
  let starting: Promise<void> | null = null
  let failing = false

  /** Starts the reader, where the log ends now, unless it runs; rejects when the database cannot say. */
  async function startReading (): Promise<void> {
    if (reading !== null) return
    starting ??= (async () => {
      position = null
      recent = []
      await poll()
      reading = polling = Promise.resolve()
      timer = setTimeout(() => { polling = pollOnce() }, POLL_MS).unref()
    })().finally(() => { starting = null })
    await starting
  }

  function stopReading () {
    clearTimeout(timer)
    reading = null
    position = null
    recent = []
  }

  async function pollOnce () {
    if (subscriptions.size === 0 || closing) return stopReading()
    let delay = POLL_MS
    try {
      if (await poll() === POLL_BATCH && ![...live].some((subscription) => subscription.pending() > MAX_PENDING_BYTES)) delay = 0
      if (failing) log.info('reading the change log again')
      failing = false
    } catch (err) {
      if (!failing) log.warn({ err }, 'reading the change log failed; feeds wait and it is tried again')
      failing = true
      delay = POLL_RETRY_MS
    }
    if (reading === null) return
    timer = setTimeout(() => { polling = pollOnce() }, delay).unref()
  }

  /** Sends `subscription` what it is behind, from memory or a page at a time from the log, then makes it live. */
  async function catchUp (subscription: Subscription) {
    while (!subscription.ended) {
      if (subscription.position >= position!) {
        live.add(subscription)
        return
      }
      if (subscription.position >= recentFrom) {
        // From memory: the entries are consecutive positions
        const start = subscription.position - recentFrom
        const page = recent.slice(start, start + CATCH_UP_PAGE)
        subscription.send(page.map((entry) => entry.text).join(''))
        subscription.position = page.at(-1)!.position
      } else {
        const after = subscription.position
        const changes = await readBudget(() => subscription.ended ? [] : repository.changesAfter(after, CATCH_UP_PAGE))
        if (subscription.ended) return
        if (changes.length === 0 || changes[0]!.position !== after + 1) {
          // Pruned while this feed caught up: what it missed is no longer there
          subscription.position = position!
          subscription.send(reset(ids.encode(position!)))
          continue
        }
        subscription.send(changes.map(text).join(''))
        subscription.position = changes.at(-1)!.position
      }
      await subscription.roomFor()
    }
  }

  async function open (after: number | undefined, expiresAt: number, response: ServerResponse): Promise<Readable> {
    await startReading()
    if (position === null) throw new Error('the feed\'s reader stopped as a feed opened')
    let start = after ?? position
    let resetting = false
    if (after !== undefined && !(after >= recentFrom && after <= position)) {
      // Not in memory: older, or sent by an instance whose reader is ahead of this one's
      const kept = await repository.changesKept()
      if (after > kept.last || (after < position && after + 1 < kept.first)) {
        start = position
        resetting = true
      }
    }
    const first = feedStart(ids.encode(start)) + (resetting ? reset(ids.encode(start)) : '')
    const subscription = new Subscription(start, response, () => {
      subscriptions.delete(subscription)
      live.delete(subscription)
    })
    subscriptions.add(subscription)
    subscription.send(first)
    subscription.expireAt(expiresAt)
    catchUp(subscription).catch((err: Error) => {
      log.warn({ err }, 'a feed could not catch up: ended, its client resumes')
      subscription.end()
    })
    return subscription.stream
  }

  fastify.decorate('changesFeed', { open, closing: () => closing, ids })

  const keepAlive = setInterval(() => {
    for (const subscription of subscriptions) subscription.send(KEEP_ALIVE)
  }, KEEP_ALIVE_MS).unref()

  // Every feed ends as the instance closes, so that its client resumes on another one
  fastify.addHook('preClose', async () => {
    closing = true
    for (const subscription of subscriptions) subscription.end()
  })
  fastify.addHook('onClose', async () => {
    stopReading()
    clearInterval(keepAlive)
    await polling
  })

  const keepSeconds = CHANGES_KEPT_HOURS * 3600
  removeInBatches(fastify, 'changes past the feed\'s retention', async (limit) => {
    // Placed first: while no instance has a feed open, no reader places the changes, and what
    // is kept is counted in positions
    while (await repository.placeChanges(PLACE_BATCH) === PLACE_BATCH);
    return repository.pruneChanges(keepSeconds, CHANGES_KEPT_COUNT, limit)
  })
}, { name: 'changes-feed', dependencies: ['change-log', 'read-budget', 'metrics', 'env'] })

/**
 * The feed of changes of one instance, that GET /books/changes sends (routes/changes.ts;
 * docs/api.md, Live changes), on the change log it is given (`ChangeLog`, src/changes.ts:
 * plugins/app/change-log.ts in production): plugins/app/changes-feed.ts wires it,
 * test/unit/changes-feed.test.ts drives it on a log in memory and a clock of its own. Each
 * client's feed is a `Subscription` (src/changes-subscription.ts: its catch-up, its token's
 * expiry, a client that takes too little).
 *
 * - One reader while the instance has feeds open: every POLL_MS it places the committed changes
 *   in the feed's order, reads those after the last it has sent (`readChanges`) and hands them to
 *   every subscriber: the database work does not grow with the subscribers. Polling, not LISTEN:
 *   a pooler in transaction mode (PgBouncer) delivers no notifications.
 * - The last RECENT_CHANGES changes in memory, so that a client that reconnects resumes without a
 *   query; one further behind catches up from the log, in turns at a bounded share of the CPU
 *   (src/catch-up-scheduler.ts), each change formatted once for all (src/catch-up-texts.ts).
 * - A poll that finds changes it had not sent pruned resets every live feed, on from the oldest kept.
 * - A subscriber that takes none of what it was sent beyond MAX_PENDING_BYTES gets `reset` as the
 *   next changes come, and its response ends. A keep-alive comment every KEEP_ALIVE_MS on each.
 * - At close, every feed ends, so its client resumes on another instance, and the reader stops.
 * - The log pruned a batch at a time (`pruneBatch`), its changes placed first (no reader may have
 *   placed them): what it keeps is CHANGES_KEPT_HOURS and CHANGES_KEPT_COUNT.
 */
import type { Readable } from 'node:stream'
import type { FastifyBaseLogger } from 'fastify'
import { KEEP_ALIVE, event, feedStart, reset, type Change, type ChangeIds, type ChangeLog } from './changes.js'
import type { CatchUpScheduler } from './catch-up-scheduler.js'
import { CatchUpTexts } from './catch-up-texts.js'
import { Subscription, type CatchUpSource, type FeedResponse, type QueryLimiter } from './changes-subscription.js'
import type { Timer, Timers } from './timers.js'
import { NO_TRACING, type Tracing } from './tracing.js'

/** The log keeps every change for at least this long, and at least the last CHANGES_KEPT_COUNT. */
export const CHANGES_KEPT_HOURS = 24
export const CHANGES_KEPT_COUNT = 1_000_000
/** How often each instance looks for new changes: a change reaches its feeds within about this. */
export const POLL_MS = 200
/** After a failed poll: the database is down or failing over. */
export const POLL_RETRY_MS = 1000
/**
 * Changes placed and read per poll. A full one is followed by the next at once, unless a feed's
 * client has not taken it yet: then after POLL_MS, so that a client that reads on is not reset
 * during a burst.
 */
export const POLL_BATCH = 1000
/** Changes placed per transaction where no feed reads them (before each prune). */
export const PLACE_BATCH = 10_000
/** Changes kept in memory for feeds that resume: about 1.5 MB at 150 bytes each. */
const RECENT_CHANGES = 10_000
/** Between two comments on every feed: below SEND_TIMEOUT_MS's minimum (10 s), which would cut an idle feed. */
export const KEEP_ALIVE_MS = 5000

export interface ChangesFeedOptions {
  changeLog: ChangeLog
  /** The change ids of the events, signed for this deployment (src/changes.ts). */
  ids: ChangeIds
  catchUpQueries: QueryLimiter
  catchUpScheduler: CatchUpScheduler
  timers: Timers
  log: Pick<FastifyBaseLogger, 'info' | 'warn'>
  /** Set to the number of open feeds as it changes (a Gauge). */
  subscribers: { set (value: number): void }
  /** Each poll of the log in a span `changes poll`: one of its own when no request asked for it. */
  tracing?: Tracing
}

export class ChangesFeed {
  readonly ids: ChangeIds
  private readonly changeLog: ChangeLog
  /** What a feed that opens behind catches up from: this instance's feed. */
  private readonly catchUpSource: CatchUpSource & { scheduler: CatchUpScheduler }
  private readonly timers: Timers
  private readonly log: ChangesFeedOptions['log']
  private readonly subscribers: ChangesFeedOptions['subscribers']
  private readonly tracing: Tracing

  private readonly subscriptions = new Set<Subscription>()
  /** The subscriptions that have caught up: each poll's changes go to them. */
  private readonly live = new Set<Subscription>()
  private position: number | null = null // the last sent to the feeds; null while no reader runs
  /** The changes after `recentFrom` up to `position`, as their events' text. */
  private recent: Array<{ position: number, text: string }> = []
  private recentFrom = 0
  private ending = false

  // The reader runs while the instance has feeds, open or opening: an instance that has none
  // does no work for them
  private reading = false
  private opening = 0
  private starting: Promise<void> | null = null
  private polling: Promise<void> = Promise.resolve()
  private pollTimer: Timer | undefined
  private failing = false // the last poll failed: logged once until one succeeds
  private keepAliveTimer: Timer

  constructor ({ changeLog, ids, catchUpQueries, catchUpScheduler, timers, log, subscribers, tracing = NO_TRACING }: ChangesFeedOptions) {
    this.changeLog = changeLog
    this.tracing = tracing
    this.ids = ids
    const catchUpTexts = new CatchUpTexts((change) => this.text(change))
    this.catchUpSource = {
      ids,
      catchUpQueries,
      sent: () => this.position!,
      recent: () => ({ from: this.recentFrom, entries: this.recent }),
      changesAfter: (position, limit) => changeLog.changesAfter(position, limit),
      text: (change) => catchUpTexts.text(change),
      scheduler: catchUpScheduler,
      live: (subscription) => { this.live.add(subscription) }
    }
    this.timers = timers
    this.log = log
    this.subscribers = subscribers
    const keepAlive = () => {
      this.keepAliveTimer = timers.setTimeout(keepAlive, KEEP_ALIVE_MS)
      for (const subscription of this.subscriptions) subscription.send(KEEP_ALIVE)
    }
    this.keepAliveTimer = timers.setTimeout(keepAlive, KEEP_ALIVE_MS)
  }

  /**
   * A new feed, for a client whose token expires at `expiresAt` (ms), starting after the change
   * at `after` (a `Last-Event-ID`), or with the next change. Rejects when the log cannot say
   * where to start (503), or when the instance is closing.
   */
  async open (after: number | undefined, expiresAt: number, response: FeedResponse): Promise<Readable> {
    // Opening from now on: the reader keeps running for this feed, which it does not count yet
    this.opening++
    let kept: { first: number, last: number } | undefined
    try {
      await this.startReading()
      if (after !== undefined && !(after >= this.recentFrom && after <= this.position!)) {
        // Not in memory: older, or sent by an instance whose reader is ahead of this one's
        kept = await this.changeLog.changesKept()
      }
    } finally {
      this.opening--
    }
    // From here to its counting nothing waits
    const position = this.position
    if (position === null) throw new Error('the feed\'s reader stopped as a feed opened')
    const resetting = after !== undefined && kept !== undefined && (after > kept.last || (after < position && after + 1 < kept.first))
    const start = resetting ? position : after ?? position
    const first = feedStart(this.ids.encode(start)) + (resetting ? reset(this.ids.encode(start)) : '')
    const subscription = new Subscription(start, response, this.timers, () => {
      this.subscriptions.delete(subscription)
      this.live.delete(subscription)
      this.subscribers.set(this.subscriptions.size)
    })
    this.subscriptions.add(subscription)
    this.subscribers.set(this.subscriptions.size)
    subscription.send(first)
    subscription.expireAt(expiresAt)
    subscription.catchUp(this.catchUpSource).catch((err: Error) => {
      this.log.warn({ err }, 'a feed could not catch up: ended, its client resumes')
      subscription.end()
    })
    return subscription.stream
  }

  /** Whether the feeds are closing: a new one is answered 503. */
  closing (): boolean {
    return this.ending
  }

  /** Ends every feed, so that its client resumes on another instance; a new one is refused from now on. */
  endFeeds () {
    this.ending = true
    for (const subscription of this.subscriptions) subscription.end()
  }

  /** Ends every feed, stops the reader and the keep-alives, and waits for a poll under way. */
  async close (): Promise<void> {
    this.endFeeds()
    this.catchUpSource.scheduler.close()
    this.stopReading()
    this.timers.clearTimeout(this.keepAliveTimer)
    await this.polling
  }

  /**
   * One batch of the log's pruning (src/db/batched-removal.ts runs them): up to `limit` of the
   * changes past what the log keeps; answers how many.
   */
  async pruneBatch (limit: number): Promise<number> {
    // Placed first: while no instance has a feed open, no reader places the changes, and what
    // is kept is counted in positions
    while (await this.changeLog.placeChanges(PLACE_BATCH) === PLACE_BATCH);
    return this.changeLog.pruneChanges(CHANGES_KEPT_HOURS * 3600, CHANGES_KEPT_COUNT, limit)
  }

  private text (change: Change): string {
    return event(change.kind, change.book, this.ids.encode(change.position))
  }

  /** Where the feed stands after a read of the log: every feed starts over from `last` after reset. */
  private startOver (last: number, why: string) {
    this.log.warn({ last, sent: this.position }, why)
    this.position = last
    this.recent = []
    this.recentFrom = last
    for (const subscription of this.live) {
      subscription.position = last
      subscription.send(reset(this.ids.encode(last)))
    }
  }

  /** Hands changes read from the log, the ones right after `position`, to the live feeds. */
  private fanOut (changes: Change[]) {
    const from = changes[0]!.position
    const last = changes.at(-1)!.position
    const texts = changes.map((change) => this.text(change))
    for (let i = 0; i < changes.length; i++) this.recent.push({ position: changes[i]!.position, text: texts[i]! })
    this.position = last
    if (this.recent.length > 2 * RECENT_CHANGES) this.recent = this.recent.slice(-RECENT_CHANGES)
    this.recentFrom = this.recent[0]!.position - 1
    const all = texts.join('')
    for (const subscription of this.live) {
      // A feed that resumed from an id another instance sent may be ahead of this one
      if (subscription.position >= last) continue
      // Looked at before sending: a client that keeps up has taken the last poll's changes by
      // now, however many they were
      if (subscription.tooFarBehind()) {
        this.log.info({ pending: subscription.pending() }, 'a feed\'s client took too little of it: sent reset and ended')
        subscription.end(reset(this.ids.encode(last)))
        continue
      }
      subscription.send(subscription.position < from ? all : texts.slice(subscription.position - from + 1).join(''))
      subscription.position = last
    }
  }

  /** Reads the log once and hands what it read on; answers how many changes that was. */
  private async poll (): Promise<number> {
    if (this.position === null) {
      this.position = (await this.changeLog.changesKept()).last
      this.recentFrom = this.position
    }
    const { changes, last } = await this.changeLog.readChanges(this.position, POLL_BATCH)
    if (last < this.position) {
      this.startOver(last, 'the change log ends before the last change this instance sent (a database restored, or a failover that lost commits): every feed is reset')
      return 0
    }
    if (changes.length === 0) return 0
    if (changes[0]!.position !== this.position + 1) {
      this.startOver(changes[0]!.position - 1, 'changes this instance had not sent were pruned: every feed is reset')
      return 0
    }
    this.fanOut(changes)
    return changes.length
  }

  /** Starts the reader, where the log ends now, unless it runs; rejects when the log cannot say. */
  private async startReading (): Promise<void> {
    if (this.reading) return
    this.starting ??= (async () => {
      this.position = null
      this.recent = []
      // For the feed that opens: a span of its request
      await this.tracing.inSpan('changes poll', {}, () => this.poll())
      this.reading = true
      this.polling = Promise.resolve()
      this.pollTimer = this.timers.setTimeout(() => { this.polling = this.pollOnce() }, POLL_MS)
    })().finally(() => { this.starting = null })
    await this.starting
  }

  private stopReading () {
    this.timers.clearTimeout(this.pollTimer)
    this.reading = false
    this.position = null
    this.recent = []
  }

  private async pollOnce () {
    if ((this.subscriptions.size === 0 && this.opening === 0) || this.ending) return this.stopReading()
    let delay = POLL_MS
    try {
      if (await this.tracing.inSpan('changes poll', { parent: null }, () => this.poll()) === POLL_BATCH && ![...this.live].some((subscription) => subscription.tooFarBehind())) delay = 0
      if (this.failing) this.log.info('reading the change log again')
      this.failing = false
    } catch (err) {
      if (!this.failing) this.log.warn({ err }, 'reading the change log failed; feeds wait and it is tried again')
      this.failing = true
      delay = POLL_RETRY_MS
    }
    if (!this.reading) return
    this.pollTimer = this.timers.setTimeout(() => { this.polling = this.pollOnce() }, delay)
  }
}

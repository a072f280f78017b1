/**
 * The CPU that the feeds catching up may take (src/changes-subscription.ts), one scheduler per
 * instance's feed (src/changes-feed.ts), shared by all its feeds and by nothing else.
 *
 * - Each feed's catch-up work is done in slices: a slice formats and sends changes until
 *   SLICE_MS have passed (or its page ends), then hands back. The next slice runs from
 *   `setImmediate`, so the event loop takes in every request and answer that came meanwhile, and
 *   runs their callbacks, before it: a live request waits for one slice at most.
 * - One slice at a time, in the order they were asked for: a feed asks for its next slice only
 *   once its last is done, so the feeds that have work take turns (round-robin), whatever their
 *   number or how far behind each is.
 * - All slices together take at most CATCH_UP_SHARE of the time (a token bucket: time is credited
 *   at that rate, up to one slice ahead, and each slice spends what it took, its sends' writes
 *   included); when the credit is spent, the next slice waits for it with a timer. What a
 *   catch-up costs beyond its slices (reading its pages from the database, the collection of
 *   what they allocated) is about as much again, or more: so when the event loop has been busy
 *   besides the slices more than BUSY_UTILIZATION of the last UTILIZATION_WINDOW_MS, with live
 *   requests or with that cost, the slices get BUSY_SHARE only. The rest of the CPU stays with
 *   live requests and the live feeds, however many feeds catch up.
 * - While no request has come for UTILIZATION_WINDOW_MS, there is nothing for the slices to leave
 *   the time to: they take what they need (IDLE_SHARE), still one at a time from `setImmediate`,
 *   so that the first request to come waits for one slice at most, and the next look gives the
 *   share back.
 */
import { performance } from 'node:perf_hooks'
import type { Timer, Timers } from './timers.js'

/** The longest a slice runs before it hands back: what it adds at most to a live request's wait. */
export const SLICE_MS = 2
/** The share of the time that the slices of all catch-ups of an instance may take together. */
export const CATCH_UP_SHARE = 0.25
/** Their share while the event loop is busy: what keeps every catch-up going, however busy. */
export const BUSY_SHARE = 0.05
/** Their share while no request comes: all the time there is. */
export const IDLE_SHARE = 1
/** The event loop's utilization (busy time over time) besides the slices above which it is busy. */
export const BUSY_UTILIZATION = 0.5
/** How often the utilization is looked at, over the time since the last look. */
const UTILIZATION_WINDOW_MS = 100

/** A slice's work: sends what it can while `more()` holds, synchronously. */
export type SliceWork = (more: () => boolean) => void

interface Waiting {
  work: SliceWork
  done: () => void
  failed: (err: unknown) => void
}

export class CatchUpScheduler {
  private readonly waiting: Waiting[] = []
  /** A slice is due, from setImmediate or a timer. */
  private due = false
  private timer: Timer | undefined
  private closed = false
  /** The slice time not yet spent, in ms (negative: spent ahead). */
  private credit = SLICE_MS
  private creditedAt: number
  /** The share now: CATCH_UP_SHARE, or BUSY_SHARE while the event loop is busy. */
  private share = CATCH_UP_SHARE
  private lookedAt: number
  /** The slices' time since the utilization was last looked at. */
  private sliced = 0
  /** The requests counted when it was. */
  private requestsSeen: number | undefined

  /**
   * `clock`: a monotonic clock in ms with sub-millisecond precision (performance.now in
   * production); `utilization`: the event loop's utilization since it was last asked (from
   * performance.eventLoopUtilization in production); `requests`: how many requests the instance
   * has taken in so far (without it, requests are taken to come all the time).
   */
  constructor (
    private readonly timers: Timers,
    private readonly clock: () => number = () => performance.now(),
    private readonly utilization: () => number = eventLoopUtilization(),
    private readonly requests?: () => number
  ) {
    this.creditedAt = clock()
    this.lookedAt = this.creditedAt
    this.requestsSeen = requests?.()
  }

  /**
   * Runs `work` in a slice of its own once the slices asked for before it have run and the share
   * allows; resolves after it. After `close()`, resolves without running it.
   */
  slice (work: SliceWork): Promise<void> {
    if (this.closed) return Promise.resolve()
    return new Promise((resolve, reject) => {
      this.waiting.push({ work, done: resolve, failed: reject })
      this.schedule()
    })
  }

  /** The slices waiting resolve without running; none runs any more. */
  close () {
    this.closed = true
    this.timers.clearTimeout(this.timer)
    this.timer = undefined
    for (const { done } of this.waiting.splice(0)) done()
  }

  private refill (now: number) {
    this.credit = Math.min(SLICE_MS, this.credit + (now - this.creditedAt) * this.share)
    this.creditedAt = now
    if (now - this.lookedAt >= UTILIZATION_WINDOW_MS) {
      const besides = this.utilization() - this.sliced / (now - this.lookedAt)
      const requests = this.requests?.()
      const idle = requests !== undefined && requests === this.requestsSeen
      this.requestsSeen = requests
      this.share = idle ? IDLE_SHARE : besides > BUSY_UTILIZATION ? BUSY_SHARE : CATCH_UP_SHARE
      this.lookedAt = now
      this.sliced = 0
    }
  }

  private schedule () {
    if (this.due || this.closed || this.waiting.length === 0) return
    this.due = true
    this.refill(this.clock())
    // Idle, no credit is kept: the next slice follows at once
    if (this.credit > 0 || this.share === IDLE_SHARE) {
      setImmediate(() => this.run())
    } else {
      this.timer = this.timers.setTimeout(() => {
        this.timer = undefined
        this.run()
      }, Math.ceil(-this.credit / this.share))
    }
  }

  private run () {
    const next = this.closed ? undefined : this.waiting.shift()
    if (next === undefined) {
      this.due = false
      return
    }
    const started = this.clock()
    const until = started + SLICE_MS
    try {
      next.work(() => this.clock() < until)
      next.done()
    } catch (err) {
      next.failed(err)
    }
    // After the writes of what the slice sent: a response writes on the next tick
    process.nextTick(() => {
      this.due = false
      const ended = this.clock()
      this.refill(ended)
      this.credit -= ended - started
      this.sliced += ended - started
      this.schedule()
    })
  }
}

/** The event loop's utilization since the last call, from Node's own measure. */
function eventLoopUtilization (): () => number {
  let last = performance.eventLoopUtilization()
  return () => {
    const now = performance.eventLoopUtilization()
    const { utilization } = performance.eventLoopUtilization(now, last)
    last = now
    return utilization
  }
}

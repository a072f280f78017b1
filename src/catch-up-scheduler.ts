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
 *   at that rate, up to one slice ahead, and each slice spends what it took); when the credit is
 *   spent, the next slice waits for it with a timer. The rest of the CPU stays with live requests
 *   and the live feeds, however many feeds catch up.
 */
import type { Timer, Timers } from './timers.js'

/** The longest a slice runs before it hands back: what it adds at most to a live request's wait. */
export const SLICE_MS = 2
/** The share of the time that all catch-ups of an instance may take together. */
export const CATCH_UP_SHARE = 0.25

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

  /**
   * `clock`: a monotonic clock in ms with sub-millisecond precision (performance.now in
   * production); `immediate`: what runs a callback after the event loop's pending I/O.
   */
  constructor (
    private readonly timers: Timers,
    private readonly clock: () => number = () => performance.now(),
    private readonly immediate: (callback: () => void) => void = setImmediate
  ) {
    this.creditedAt = clock()
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
    this.credit = Math.min(SLICE_MS, this.credit + (now - this.creditedAt) * CATCH_UP_SHARE)
    this.creditedAt = now
  }

  private schedule () {
    if (this.due || this.closed || this.waiting.length === 0) return
    this.due = true
    this.refill(this.clock())
    if (this.credit > 0) {
      this.immediate(() => this.run())
    } else {
      this.timer = this.timers.setTimeout(() => {
        this.timer = undefined
        this.run()
      }, Math.ceil(-this.credit / CATCH_UP_SHARE))
    }
  }

  private run () {
    this.due = false
    if (this.closed) return
    const next = this.waiting.shift()
    if (next === undefined) return
    const started = this.clock()
    const until = started + SLICE_MS
    try {
      next.work(() => this.clock() < until)
      next.done()
    } catch (err) {
      next.failed(err)
    }
    const ended = this.clock()
    this.refill(ended)
    this.credit -= ended - started
    this.schedule()
  }
}

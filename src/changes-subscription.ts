/**
 * One client's feed of changes, from its start to its end: the stream its response sends, and
 * the last position it was sent. src/changes-feed.ts opens it and hands it each poll's changes;
 * test/unit/changes-feed.test.ts drives both on a log in memory and a clock of its own.
 *
 * - A feed that starts behind where its instance's feed stands catches up first: from the changes
 *   the instance keeps in memory, without a query, or from the log, a page at a time as its
 *   client reads them, within the catch-ups' budget of queries; each page formatted and sent in
 *   the slices of CPU time the instance's catch-up scheduler gives its feeds in turn
 *   (src/catch-up-scheduler.ts); then it is live.
 * - What its client has not taken yet is watched: a catch-up sends its next page once its client
 *   has taken what it holds down to half MAX_PENDING_BYTES; a subscriber that holds more than
 *   MAX_PENDING_BYTES as the next changes come gets `reset` and its response ends.
 * - A token that expires ends its feed with `token-expired`.
 */
import { Readable } from 'node:stream'
import { TOKEN_EXPIRED, reset, type Change, type ChangeIds } from './changes.js'
import type { CatchUpScheduler } from './catch-up-scheduler.js'
import type { Timer, Timers } from './timers.js'

/** Changes per page of a feed that catches up. */
export const CATCH_UP_PAGE = 500
/**
 * What a feed may hold that its client has not taken (Node's buffers, not the kernel's) when the
 * next changes come: about 1,600 changes. Beyond it the feed ends with `reset`. A feed then holds
 * this and one poll's changes at most.
 */
export const MAX_PENDING_BYTES = 256 * 1024

/** Runs `fn` once a query may start (p-limit's call shape): what bounds the catch-ups' connections. */
export type QueryLimiter = <T>(fn: () => PromiseLike<T> | T) => Promise<T>

/** What a feed's response (a `ServerResponse`) tells of its client: what Node holds that it has not taken, and when it took it. */
export interface FeedResponse {
  readonly writableLength: number
  on (event: 'drain', listener: () => void): unknown
}

/** What a feed catches up from: the feed of its instance (src/changes-feed.ts). */
export interface CatchUpSource {
  readonly ids: ChangeIds
  readonly catchUpQueries: QueryLimiter
  /** The last position the instance has sent its live feeds. */
  sent (): number
  /** The changes in memory: consecutive positions after `from`, as their events' text. */
  recent (): { from: number, entries: ReadonlyArray<{ position: number, text: string }> }
  /** Up to `limit` changes after `position`, read from the log. */
  changesAfter (position: number, limit: number): Promise<Change[]>
  /** A change's event. */
  text (change: Change): string
  /** The slices that catch-ups format and send their changes in, shared by the instance's feeds. */
  readonly scheduler: Pick<CatchUpScheduler, 'slice'>
  /** From now on each poll's changes go to `subscription`. */
  live (subscription: Subscription): void
}

/** One client's feed: the stream its response sends, and the last position it was sent. */
export class Subscription {
  readonly stream: Readable
  /** Waiting for the client to take what it was sent (`roomFor`). */
  private drained: (() => void) | null = null
  private expiry: Timer | undefined
  /** Ended by the service, or its client gone: nothing more is sent. */
  ended = false

  constructor (public position: number, private readonly response: FeedResponse, private readonly timers: Timers, private readonly onEnd: () => void) {
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
    this.timers.clearTimeout(this.expiry)
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

  /** Whether its client took too little of what it was sent: beyond MAX_PENDING_BYTES. */
  tooFarBehind (): boolean {
    return this.pending() > MAX_PENDING_BYTES
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
    this.expiry = this.timers.setTimeout(() => this.end(TOKEN_EXPIRED), Math.max(0, expiresAt - this.timers.now()))
  }

  /** Resolves once the client has taken what it was sent, down to half the bound. */
  private async roomFor (): Promise<void> {
    while (!this.ended && this.pending() > MAX_PENDING_BYTES / 2) {
      await new Promise<void>((resolve) => { this.drained = resolve })
    }
  }

  /**
   * Sends what it is behind, from memory or a page at a time from the log, then goes live. The
   * changes are formatted and sent in the slices of the instance's catch-up scheduler
   * (src/catch-up-scheduler.ts): a page may take several, each feed's turn coming after the
   * others'. Whether it is live is decided in the same synchronous step as its last send, so no
   * poll's changes fall between the two.
   */
  async catchUp (feed: CatchUpSource) {
    while (!this.ended) {
      if (this.position >= feed.sent()) {
        feed.live(this)
        return
      }
      if (this.position >= feed.recent().from) {
        // From memory, read within the slice: the entries may have moved on since
        await feed.scheduler.slice((more) => this.sendRecent(feed, more))
      } else {
        const after = this.position
        const changes = await feed.catchUpQueries(() => this.ended ? [] : feed.changesAfter(after, CATCH_UP_PAGE))
        if (this.ended) return
        if (changes.length === 0 || changes[0]!.position !== after + 1) {
          // Pruned while this feed caught up: what it missed is no longer there
          this.position = feed.sent()
          this.send(reset(feed.ids.encode(feed.sent())))
          continue
        }
        let next = 0
        while (next < changes.length && !this.ended) {
          await feed.scheduler.slice((more) => {
            if (this.ended) return
            const texts: string[] = []
            do texts.push(feed.text(changes[next++]!))
            while (next < changes.length && more())
            this.send(texts.join(''))
            this.position = changes[next - 1]!.position
          })
        }
      }
      await this.roomFor()
    }
  }

  /** Sends up to CATCH_UP_PAGE of the changes in memory after its position, while `more()` holds. */
  private sendRecent (feed: CatchUpSource, more: () => boolean) {
    const recent = feed.recent()
    if (this.ended || this.position < recent.from || this.position >= feed.sent()) return
    // The entries are consecutive positions
    const start = this.position - recent.from
    const end = Math.min(recent.entries.length, start + CATCH_UP_PAGE)
    const texts: string[] = []
    let next = start
    do texts.push(recent.entries[next++]!.text)
    while (next < end && more())
    this.send(texts.join(''))
    this.position = recent.entries[next - 1]!.position
  }
}

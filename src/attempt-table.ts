import type { FastifyRateLimitStore } from '@fastify/rate-limit'

/**
 * How many keys (client addresses, usernames) one limit counts in a process: enough for the
 * addresses of a flood, few enough that a full table stays small beside the rest of the process
 * (its size: docs/performance.md, Other figures).
 */
const ATTEMPT_TABLE_SIZE = 50_000

export type Callback = Parameters<FastifyRateLimitStore['incr']>[1]
/** What the library passes to `child`: a limit's merged options (its types say route options). */
export type LimitOptions = Parameters<FastifyRateLimitStore['child']>[0] & {
  cache?: number
  continueExceeding?: boolean
  exponentialBackoff?: boolean
  routeInfo?: { method?: string | string[], url?: string }
}
/**
 * A store with `read` (a count without counting), which `{ increment: false }` calls: the
 * library's README requires it of a custom store, its types do not list it.
 */
export type ReadableStore = FastifyRateLimitStore & { read: FastifyRateLimitStore['incr'] }

interface Window { count: number, endsAt: number }

/**
 * The counts of one attempt limit in this process, as @fastify/rate-limit's store: a fixed
 * window per key, at most `size` keys. The library's own store is an LRU: `size` newer keys
 * evict an entry, blocked or not, and its key starts again at zero. Here an entry is removed
 * only once its window has ended, so a key over the limit stays over it for its whole window
 * whatever other keys do. While all `size` entries are live, new keys share one overflow count
 * with the same limit: limited together rather than not at all, and no live entry is touched.
 */
export class AttemptTable implements ReadableStore {
  readonly #windows = new Map<string, Window>()
  #overflow: Window = { count: 0, endsAt: 0 }

  constructor (readonly size = ATTEMPT_TABLE_SIZE) {}

  incr (key: string, callback: Callback, timeWindow: number) {
    const now = Date.now()
    const window = this.#liveWindow(key, now, timeWindow)
    window.count++
    callback(null, { current: window.count, ttl: window.endsAt - now })
  }

  /** The count without counting (a key counted in the overflow reads 0). */
  read (key: string, callback: Callback) {
    const now = Date.now()
    const window = this.#windows.get(key)
    const live = window !== undefined && window.endsAt > now
    callback(null, live ? { current: window.count, ttl: window.endsAt - now } : { current: 0, ttl: 0 })
  }

  child (routeOptions: LimitOptions) {
    return new AttemptTable(routeOptions.cache ?? ATTEMPT_TABLE_SIZE)
  }

  #liveWindow (key: string, now: number, timeWindow: number): Window {
    const current = this.#windows.get(key)
    if (current !== undefined && current.endsAt > now) return current
    // One table, one window length: the Map's insertion order is the order the windows end in,
    // so the ended ones (this key's too, if it had one) are at its front
    for (const [ended, window] of this.#windows) {
      if (window.endsAt > now) break
      this.#windows.delete(ended)
    }
    if (this.#windows.size >= this.size) {
      if (this.#overflow.endsAt <= now) this.#overflow = { count: 0, endsAt: now + timeWindow }
      return this.#overflow
    }
    const window = { count: 0, endsAt: now + timeWindow }
    this.#windows.set(key, window)
    return window
  }
}

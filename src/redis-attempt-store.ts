/**
 * The attempt counts of @fastify/rate-limit kept in Redis, so that every instance of the service
 * counts together. Ours because the library's own Redis store is not among what the package
 * exports: reached by its file path, it would break on a minor release without a word. This one
 * uses only the store interface the library documents (README: "Custom `store`", and `read`
 * under "Manual Rate Limit").
 *
 * It counts as the library's Redis store does with its defaults: a fixed window per key, started
 * by the key's first attempt and ended by the key's expiry in Redis, so attempts during it
 * neither lengthen nor renew it. It does not renew (`continueExceeding`) or lengthen
 * (`exponentialBackoff`) windows; the plugin refuses those options.
 */
import type { Redis } from 'ioredis'
import type { Callback, LimitOptions, ReadableStore } from './attempt-table.js'

/**
 * One attempt at KEYS[1], in a window of ARGV[1] ms: its count and the ms left of its window.
 * A script, so that the count and its expiry change together whatever other instances do. A key
 * without an expiry gets one: it could only be a new key, or one written by hand, which would
 * otherwise refuse its client for ever.
 */
const COUNT = `
local count = redis.call('INCR', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
  left = tonumber(ARGV[1])
  redis.call('PEXPIRE', KEYS[1], left)
end
return { count, left }
`

/** The count at KEYS[1] and the ms left of its window, changing nothing: 0 and 0 for none. */
const READ = `
local count = redis.call('GET', KEYS[1])
if not count then return { 0, 0 } end
return { tonumber(count), math.max(redis.call('PTTL', KEYS[1]), 0) }
`

interface AttemptCommands {
  countAttempt (key: string, timeWindow: number): Promise<unknown>
  readAttempts (key: string): Promise<unknown>
}

/**
 * The client with our two scripts as commands (ioredis's `defineCommand`: sent by their SHA,
 * the text only when Redis does not know them, after a restart). Defined once per client,
 * whatever the number of stores on it.
 */
function withCommands (redis: Redis): Redis & AttemptCommands {
  if (!('countAttempt' in redis)) {
    redis.defineCommand('countAttempt', { numberOfKeys: 1, lua: COUNT })
    redis.defineCommand('readAttempts', { numberOfKeys: 1, lua: READ })
  }
  return redis as Redis & AttemptCommands
}

/** The scripts' reply as the library wants it; anything else is an error, not a count of 0. */
function answer (callback: Callback) {
  return (reply: unknown) => {
    const [current, ttl] = Array.isArray(reply) ? reply : []
    if (Number.isSafeInteger(current) && Number.isSafeInteger(ttl)) callback(null, { current, ttl })
    else callback(new Error(`unexpected reply from Redis to an attempt count: ${JSON.stringify(reply)}`))
  }
}

export class RedisAttemptStore implements ReadableStore {
  readonly #redis: Redis & AttemptCommands

  /** Counts under `prefix` followed by the limit's key, on `redis`. */
  constructor (redis: Redis, readonly prefix: string) {
    this.#redis = withCommands(redis)
  }

  incr (key: string, callback: Callback, timeWindow: number) {
    this.#redis.countAttempt(this.prefix + key, timeWindow).then(answer(callback), callback)
  }

  /**
   * What `createRateLimit(...)(request, { increment: false })` calls (the README says a custom
   * store must have it; the package's types do not list it): the count without counting.
   */
  read (key: string, callback: Callback) {
    this.#redis.readAttempts(this.prefix + key).then(answer(callback), callback)
  }

  /**
   * A route's limit counts under keys naming the route (`POST/token-`), as the library's store
   * names them. A limit made with `createRateLimit` has no route (the library passes an empty
   * `routeInfo`): it counts under the prefix alone, and its key generator names its keys.
   */
  child (routeOptions: LimitOptions) {
    const { method, url } = routeOptions.routeInfo ?? {}
    if (url === undefined) return new RedisAttemptStore(this.#redis, this.prefix)
    return new RedisAttemptStore(this.#redis, `${this.prefix}${String(method)}${url}-`)
  }
}

/**
 * Adds @fastify/rate-limit with our store: `fastify.createRateLimit` and `fastify.rateLimit`
 * (limits applied in code, not per route), and its `onRoute` hook, which gives an `onRequest`
 * attempt limit per client address to the routes that ask for one in their `config.rateLimit`
 * (POST /token, against password guessing) and to no other. Over the limit: 429 in the
 * envelope, with `Retry-After`. With `REDIS_URL`, also an `onClose` hook that disconnects from
 * Redis.
 *
 * Without `REDIS_URL` each process counts for itself. With it, the attempts are counted in Redis,
 * so all instances together allow what one does. Redis not answering, at start-up or later,
 * never stops the service: each process counts for itself meanwhile, and the counts go back to
 * Redis once it answers.
 *
 * @see https://github.com/fastify/fastify-rate-limit
 */
import { once } from 'node:events'
import fastifyRateLimit, { type FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import type { FastifyBaseLogger } from 'fastify'
import fp from 'fastify-plugin'
import type { Redis } from 'ioredis'
import { AttemptTable, type Callback, type LimitOptions, type ReadableStore } from '../../src/attempt-table.js'
import { Message } from '../../src/envelope.js'
import { ApiError } from '../../src/errors.js'
import { RedisAttemptStore } from '../../src/redis-attempt-store.js'

/** The longest a request waits for Redis before it is counted in the process instead. */
export const REDIS_COMMAND_TIMEOUT_MS = 500
/** The longest a connection to Redis may take to be established, at start-up and after. */
export const REDIS_CONNECT_TIMEOUT_MS = 1000

/**
 * Every instance of a deployment counts under the same keys: this prefix, the route
 * (`POST/token-`) and the client address. Deployments that share a Redis server keep apart by
 * using different databases of it (`redis://host:6379/1`).
 */
export const KEY_NAMESPACE = 'bookkeeping:rate-limit:'

/** What the log says, once, when the counting moves between Redis and the process. */
export const LogMessage = {
  Shared: 'attempt limit shared: Redis answers',
  Local: 'attempt limit per process: Redis does not answer'
} as const

/** What the library passes to a store's constructor: the plugin's options. */
type StoreOptions = Pick<LimitOptions, 'cache' | 'continueExceeding' | 'exponentialBackoff'>

/**
 * Both our stores count fixed windows. The library's own would renew or lengthen a window with
 * these options; ours refuse them when the limit is made (at start-up) rather than ignore them.
 */
function fixedWindowOnly (options: StoreOptions) {
  if (options.continueExceeding === true || options.exponentialBackoff === true) {
    throw new Error('attempt limits count fixed windows: continueExceeding and exponentialBackoff are not supported')
  }
}

/** The counts in the process: alone without REDIS_URL, else while Redis does not answer. */
class LocalStore extends AttemptTable {
  constructor (options: StoreOptions) {
    fixedWindowOnly(options)
    super(options.cache)
  }

  override child (routeOptions: LimitOptions) {
    fixedWindowOnly(routeOptions)
    return super.child(routeOptions)
  }
}

/**
 * What the log may say of a Redis error: its message and code. ioredis errors also carry the
 * command, whose arguments are the password when authentication failed.
 */
function cause (err: Error) {
  return { type: err.name, message: err.message, code: (err as NodeJS.ErrnoException).code }
}

/**
 * Whether the counts are in Redis, and the log lines when that changes: one line per change, not
 * one per request.
 */
class SharedCounting {
  shared = false
  #lastError: Error | undefined

  constructor (readonly redis: Redis, readonly log: FastifyBaseLogger) {
    // Without a listener ioredis prints every failed reconnection attempt to stderr
    redis.on('error', (err) => {
      this.#lastError = err
      log.debug({ err: cause(err) }, 'Redis connection error')
    })
    redis.on('close', () => this.lost(this.#lastError ?? new Error('the connection to Redis closed')))
    redis.on('ready', () => this.answered())
  }

  /** Redis did not answer: logged when the counts were in Redis until now. */
  lost (err: Error) {
    if (!this.shared) return
    this.shared = false
    this.warn(err)
  }

  warn (err: Error) {
    this.log.warn({ err: cause(err) }, LogMessage.Local)
  }

  answered () {
    if (this.shared) return
    this.shared = true
    this.log.info(LogMessage.Shared)
  }
}

/**
 * The counts in Redis when it answers, in the process when it does not. The library offers only
 * `skipOnError`, which lets every attempt through while Redis is away: no limit at all. Here a
 * brute force keeps meeting at least the per-process limit.
 */
class SharedOrLocalStore implements ReadableStore {
  constructor (readonly counting: SharedCounting, readonly remote: ReadableStore, readonly local: ReadableStore) {}

  incr (key: string, callback: Callback, timeWindow: number, max: number) {
    this.#use('incr', key, callback, timeWindow, max)
  }

  read (key: string, callback: Callback, timeWindow: number, max: number) {
    this.#use('read', key, callback, timeWindow, max)
  }

  #use (method: 'incr' | 'read', key: string, callback: Callback, timeWindow: number, max: number) {
    const countLocally = () => this.local[method](key, callback, timeWindow, max)
    // Not connected (or reconnecting): no command is sent, nothing waits
    if (this.counting.redis.status !== 'ready') {
      countLocally()
      return
    }
    this.remote[method](key, (err, result) => {
      if (err !== null) {
        // Also a Redis that stalls, after REDIS_COMMAND_TIMEOUT_MS; its connection is then
        // replaced (socketTimeout), and counting stays local until the new one is ready
        this.counting.lost(err)
        countLocally()
        return
      }
      this.counting.answered()
      callback(null, result)
    }, timeWindow, max)
  }

  child (routeOptions: LimitOptions) {
    // The local store's child refuses a window that is not fixed, for both
    const local = this.local.child(routeOptions) as ReadableStore
    return new SharedOrLocalStore(this.counting, this.remote.child(routeOptions) as ReadableStore, local)
  }
}

/**
 * A client that never makes a request wait on a Redis that is away: commands fail at once when
 * not connected (no offline queue) or when the connection drops (no retry), and a command
 * unanswered after REDIS_COMMAND_TIMEOUT_MS fails and gets its connection replaced. It keeps
 * reconnecting in the background (ioredis's default backoff, at most about 5 s apart).
 */
async function createClient (url: string): Promise<Redis> {
  // Loaded only when REDIS_URL is set: loading it costs CPU that every start-up without Redis
  // would pay for nothing
  const { Redis } = await import('ioredis')
  try {
    return new Redis(url, {
      connectionName: 'bookkeeping',
      connectTimeout: REDIS_CONNECT_TIMEOUT_MS,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
      socketTimeout: REDIS_COMMAND_TIMEOUT_MS,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      // The counts of the requests that arrive together go out in one write, not one each
      enableAutoPipelining: true
    })
  } catch (err) {
    // The schema checks the form; the port and host are checked here, before anything starts
    throw new Error(`REDIS_URL is not a valid Redis URL: ${(err as Error).message}`)
  }
}

export default fp(async function rateLimit (fastify) {
  const { REDIS_URL } = fastify.config
  let store: FastifyRateLimitStoreCtor = LocalStore
  if (REDIS_URL !== '') {
    const redis = await createClient(REDIS_URL)
    fastify.addHook('onClose', async () => {
      // Closing is not Redis going away: no warning
      redis.removeAllListeners('close')
      redis.disconnect()
    })
    const counting = new SharedCounting(redis, fastify.log)
    try {
      // Rejects on the first connection error: a Redis that is down does not hold the start-up.
      // The bound covers a connection established but never answered
      await once(redis, 'ready', { signal: AbortSignal.timeout(REDIS_CONNECT_TIMEOUT_MS + REDIS_COMMAND_TIMEOUT_MS) })
    } catch (err) {
      counting.warn(err as Error)
    }
    store = class extends SharedOrLocalStore {
      constructor (options: StoreOptions) {
        // The local store refuses a window that is not fixed, for both
        const local = new LocalStore(options)
        super(counting, new RedisAttemptStore(redis, KEY_NAMESPACE), local)
      }
    }
  }
  await fastify.register(fastifyRateLimit, {
    global: false,
    store,
    errorResponseBuilder: () => new ApiError(429, Message.TooManyRequests)
  })
}, { name: 'rate-limit', dependencies: ['env'] })

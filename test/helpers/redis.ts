/**
 * The machine's Redis for the tests of the shared attempt limit, and the counts kept in it.
 * Tests share that Redis with each other and with whatever else uses it, so each client a test
 * plays is an address no other test picks, counted under keys of its own, removed when the test
 * ends.
 */
import { randomInt } from 'node:crypto'
import { normalizeIP } from '@fastify/rate-limit'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { KEY_NAMESPACE } from '../../plugins/external/rate-limit.js'
import { acceptsConnections } from './wait.js'

export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
export const TEST_REDIS_PORT = Number(new URL(TEST_REDIS_URL).port || 6379)

/**
 * For `t.test(name, { skip: NEEDS_REDIS }, ...)`. Like the database, Redis is used when one
 * answers, so that `npm test` needs nothing but Node.js; a TEST_REDIS_URL given explicitly
 * insists on it.
 */
export const NEEDS_REDIS = !(await acceptsConnections(TEST_REDIS_URL, TEST_REDIS_PORT)) && `needs Redis at ${TEST_REDIS_URL} (none answers)`
if (NEEDS_REDIS !== false && process.env.TEST_REDIS_URL !== undefined) throw new Error(`TEST_REDIS_URL is set and ${NEEDS_REDIS}`)

/** The test's own connection to Redis, to read and remove keys; closed when the test ends. */
export function redisClient (t: Test): Redis {
  const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 })
  t.teardown(() => redis.quit())
  return redis
}

export interface Client {
  /** What `inject` gives as `remoteAddress`. */
  address: string
  /** Its attempts counted in Redis and the milliseconds left of that count, or null if none. */
  counted: () => Promise<{ count: number, ttl: number } | null>
}

/**
 * A client address of this test alone: a random /64 (the unit the limit counts IPv6 clients by)
 * of the documentation prefix 2001:db8::/32, one in 2^32. Its keys are removed when the test ends.
 */
export function newClient (t: Test, redis: Redis): Client {
  const address = `2001:db8:${randomInt(0x1000, 0x10000).toString(16)}:${randomInt(0x1000, 0x10000).toString(16)}::1`
  // Every limited route has a key of its own ending in the client's key; POST /token is the one
  const pattern = `${KEY_NAMESPACE}*-${normalizeIP(address)}`
  const keys = async () => {
    const found: string[] = []
    let cursor = '0'
    do {
      const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      found.push(...batch)
      cursor = next
    } while (cursor !== '0')
    return found
  }
  t.teardown(async () => {
    const found = await keys()
    if (found.length > 0) await redis.del(...found)
  })
  return {
    address,
    counted: async () => {
      const [key, ...more] = await keys()
      if (key === undefined) return null
      if (more.length > 0) throw new Error(`more than one key matches ${pattern}`)
      const [count, ttl] = await Promise.all([redis.get(key), redis.pttl(key)])
      return { count: Number(count), ttl }
    }
  }
}

/**
 * Our Redis store of attempt counts, against the machine's Redis: a fixed window per key (its
 * expiry set by the first attempt, never renewed by later ones), `read` that changes nothing,
 * exact counts from two clients at once, the keys it counts under, and errors that are errors.
 * Each test counts under a prefix of its own, removed when it ends.
 */
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import type { LimitOptions } from '../../src/attempt-table.js'
import { RedisAttemptStore } from '../../src/redis-attempt-store.js'
import { NEEDS_REDIS, redisClient } from '../helpers/redis.js'
import { sleep, waitUntil } from '../helpers/wait.js'

const WINDOW = 1000
/** Room for a busy machine between a command and the check of what it did. */
const SLACK = 150

interface Counted { current: number, ttl: number }

function incr (store: RedisAttemptStore, key: string, window = WINDOW): Promise<Counted> {
  return new Promise((resolve, reject) => store.incr(key, (err, result) => err === null ? resolve(result!) : reject(err), window))
}

function read (store: RedisAttemptStore, key: string): Promise<Counted> {
  return new Promise((resolve, reject) => store.read(key, (err, result) => err === null ? resolve(result!) : reject(err)))
}

/** The keys under `prefix` (SCAN: the Redis is shared, KEYS would hold it for all). */
async function keysUnder (redis: Redis, prefix: string): Promise<string[]> {
  const found: string[] = []
  let cursor = '0'
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
    found.push(...batch)
    cursor = next
  } while (cursor !== '0')
  return found.sort()
}

/** A store on `redis` under a prefix of this test alone, whose keys go when the test ends. */
function testStore (t: Test, redis: Redis) {
  const prefix = `bookkeeping-test:${randomUUID()}:`
  t.teardown(async () => {
    const keys = await keysUnder(redis, prefix)
    if (keys.length > 0) await redis.del(...keys)
  })
  return { store: new RedisAttemptStore(redis, prefix), prefix }
}

t.test('a fixed window: the first attempt sets the expiry, later ones count without renewing it, then a new window', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const { store, prefix } = testStore(t, redis)
  const first = await incr(store, 'a')
  t.equal(first.current, 1, 'the first attempt counts 1')
  t.ok(first.ttl > WINDOW - SLACK && first.ttl <= WINDOW, `its window is the whole window (${first.ttl} ms)`)
  const pttl = await redis.pttl(`${prefix}a`)
  t.ok(pttl > WINDOW - SLACK && pttl <= WINDOW, `the key expires with it (${pttl} ms)`)

  await sleep(WINDOW / 2)
  const later = [await incr(store, 'a'), await incr(store, 'a')]
  t.strictSame(later.map((counted) => counted.current), [2, 3], 'later attempts count on')
  for (const counted of later) t.ok(counted.ttl <= WINDOW / 2, `with what is left of the window (${counted.ttl} ms)`)
  t.ok(await redis.pttl(`${prefix}a`) <= WINDOW / 2, 'whose expiry they did not renew')

  t.pass(`gone after ${await waitUntil(async () => await redis.exists(`${prefix}a`) === 0, WINDOW, 'the key to expire')} ms more`)
  const next = await incr(store, 'a')
  t.equal(next.current, 1, 'the next attempt starts a new window at 1')
  t.ok(next.ttl > WINDOW - SLACK, `a whole one (${next.ttl} ms)`)
})

t.test('read: the count and what is left of its window, changing neither; a key never counted reads 0 and 0', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const { store, prefix } = testStore(t, redis)
  t.strictSame(await read(store, 'a'), { current: 0, ttl: 0 }, 'nothing counted yet')
  t.equal(await redis.exists(`${prefix}a`), 0, 'and reading created no key')

  await incr(store, 'a', 60_000)
  await incr(store, 'a', 60_000)
  await sleep(50)
  const before = await redis.pttl(`${prefix}a`)
  const reads = [await read(store, 'a'), await read(store, 'a'), await read(store, 'a')]
  t.strictSame(reads.map((counted) => counted.current), [2, 2, 2], 'two attempts, however often read')
  for (const counted of reads) t.ok(counted.ttl > 0 && counted.ttl <= before, `what is left of the window (${counted.ttl} ms)`)
  t.equal(await redis.get(`${prefix}a`), '2', 'nothing counted in Redis')
  t.ok(await redis.pttl(`${prefix}a`) <= before, 'nor the expiry renewed')
})

t.test('two clients, as two instances, count one key together and exactly', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const { prefix } = testStore(t, redis)
  const stores = [new RedisAttemptStore(redis, prefix), new RedisAttemptStore(redisClient(t), prefix)]
  const counted = await Promise.all(stores.flatMap((store) => Array.from({ length: 20 }, () => incr(store, 'a', 60_000))))
  t.strictSame(counted.map(({ current }) => current).sort((a, b) => a - b), Array.from({ length: 40 }, (_, i) => i + 1),
    'each of the 40 attempts got a count of its own')
  t.equal(await redis.get(`${prefix}a`), '40', 'and Redis holds them all')
})

t.test('the keys: a route\'s limit counts under its method and URL, one made with createRateLimit under the prefix alone', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const { store, prefix } = testStore(t, redis)
  // What the library passes: a route's options, or an empty routeInfo for createRateLimit
  const route = store.child({ routeInfo: { method: 'POST', url: '/token' } } as LimitOptions)
  const manual = store.child({ routeInfo: {} } as LimitOptions)
  await incr(route, '192.0.2.1')
  await incr(manual, 'username:x')
  t.strictSame(await keysUnder(redis, prefix), [`${prefix}POST/token-192.0.2.1`, `${prefix}username:x`], 'POST/token-<key> and <key>')
  t.equal((await read(route, '192.0.2.1')).current, 1, 'the route\'s limit reads its key')
  t.equal((await read(manual, 'username:x')).current, 1, 'and so does the other')
})

t.test('a key left without an expiry gets the window at its next attempt, rather than refusing for ever', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const { store, prefix } = testStore(t, redis)
  await redis.set(`${prefix}a`, '7')
  const counted = await incr(store, 'a')
  t.equal(counted.current, 8, 'counted on')
  t.ok(counted.ttl > WINDOW - SLACK && counted.ttl <= WINDOW, `in a whole window (${counted.ttl} ms)`)
  t.ok(await redis.pttl(`${prefix}a`) > 0, 'the key expires now')
})

t.test('a value Redis cannot count is an error, not a count', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const { store, prefix } = testStore(t, redis)
  await redis.set(`${prefix}a`, 'not a number', 'PX', 60_000)
  await t.rejects(incr(store, 'a'), /not an integer/, 'counting')
  await t.rejects(read(store, 'a'), /unexpected reply/, 'reading')
})

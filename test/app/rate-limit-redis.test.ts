/**
 * The attempt limit counted in Redis (REDIS_URL), with the machine's Redis: instances together
 * allow what one does; Redis going away, stalling or missing at start-up never stops the
 * service (each process counts alone meanwhile, the log says so once) and the counts go back to
 * Redis when it answers; the connection is closed with the app; a bad REDIS_URL stops the
 * start-up. Redis is made to go away through a TCP proxy, never by touching the shared server.
 */
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { LogMessage, REDIS_COMMAND_TIMEOUT_MS, REDIS_CONNECT_TIMEOUT_MS } from '../../plugins/external/rate-limit.js'
import { build, USERNAME } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { NEEDS_REDIS, newClient, redisClient, TEST_REDIS_PORT, TEST_REDIS_URL, type Client } from '../helpers/redis.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { sleep, waitUntil, withTimeout } from '../helpers/wait.js'

const LIMIT = 5
/** Room for a busy machine above the bound under test. */
const SLACK = 500
/** ioredis reconnects with a backoff of at most 5 s (plus jitter): Redis back is seen within it. */
const BACK_WITHIN = 10_000

interface Attempt { status: number, ms: number, retryAfter: string | undefined }

async function attempt (app: FastifyInstance, client: Client): Promise<Attempt> {
  const started = performance.now()
  const response = await app.inject({
    method: 'POST', url: '/token', remoteAddress: client.address, payload: { username: USERNAME, password: 'wrong' }
  })
  const ms = Math.round(performance.now() - started)
  const retryAfter = response.headers['retry-after'] as string | undefined
  return { status: response.statusCode, ms, retryAfter }
}

function capture () {
  const lines: Array<{ level: number, msg: string, err?: { message: string } }> = []
  return { lines, stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } }
}

/** An app counting in the Redis behind `url`, with its log lines. */
async function sharedApp (t: Test, dbUrl: string, url: string) {
  const { lines, stream } = capture()
  const app = await build(t, dbUrl, { REDIS_URL: url, TOKEN_RATE_LIMIT: String(LIMIT) }, { logger: { level: 'info', stream } })
  const count = (msg: string) => lines.filter((line) => line.msg === msg).length
  return { app, lines, count }
}

/**
 * Once the app's log says Redis answers, a first attempt from a client of its own. On a busy
 * machine a build or a first request (schemas compiled on first use) can hold the event loop
 * past REDIS_COMMAND_TIMEOUT_MS, and a test would then see an attempt counted in the process
 * rather than what it is about. Call it once every app of the test is built.
 */
async function warm (t: Test, redis: Redis, { app, count }: Awaited<ReturnType<typeof sharedApp>>) {
  await waitUntil(() => count(LogMessage.Shared) > 0, BACK_WITHIN, 'the log to say Redis answers', 50)
  await attempt(app, newClient(t, redis))
}

/** `n` attempts one after the other; the statuses, and the longest any took. */
async function attempts (app: FastifyInstance, client: Client, n: number) {
  const results: Attempt[] = []
  for (let i = 0; i < n; i++) results.push(await attempt(app, client))
  return { statuses: results.map((result) => result.status), slowest: Math.max(...results.map((result) => result.ms)) }
}

const answered = (n: number) => Array<number>(n).fill(401)
const limited = (n: number) => Array<number>(n).fill(429)

t.test('three instances sharing REDIS_URL allow TOKEN_RATE_LIMIT attempts together, not three times as many', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const dbUrl = await createDatabase(t)
  const instances = await Promise.all([1, 2, 3].map(() => sharedApp(t, dbUrl, TEST_REDIS_URL)))
  for (const instance of instances) await warm(t, redis, instance)
  const apps = instances.map((instance) => instance.app)
  const client = newClient(t, redis)

  // Four attempts at each instance at once: the count in Redis is atomic
  const results = await Promise.all(apps.flatMap((app) => [1, 2, 3, 4].map(() => attempt(app, client))))
  const statuses = results.map((result) => result.status).sort()
  t.strictSame(statuses, [...answered(LIMIT), ...limited(12 - LIMIT)], `${LIMIT} answered of 12 over three instances`)
  for (const [i, app] of apps.entries()) {
    const next = await attempt(app, client)
    t.equal(next.status, 429, `instance ${i + 1} refuses the next one`)
    t.ok(Number(next.retryAfter) > 0 && Number(next.retryAfter) <= 60, `with Retry-After: ${next.retryAfter}`)
  }
  const counted = await client.counted()
  t.equal(counted?.count, 15, 'every attempt is counted in Redis')
  t.ok(counted !== null && counted.ttl > 0 && counted.ttl <= 60_000, `for the rest of the minute (${counted?.ttl} ms)`)

  const other = newClient(t, redis)
  t.equal((await attempt(apps[0]!, other)).status, 401, 'another address has its own budget')
  t.strictSame(instances.map(({ count }) => count(LogMessage.Local)), [0, 0, 0], 'Redis answered every attempt in time')
})

t.test('Redis going away: still answered, limited per process, one warning; back: counted in Redis again', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  const instance = await sharedApp(t, await createDatabase(t), `redis://127.0.0.1:${proxy.port}`)
  await warm(t, redis, instance)
  const { app, lines, count } = instance
  t.equal(count(LogMessage.Shared), 1, 'the start-up says the limit is shared')
  const client = newClient(t, redis)

  t.strictSame((await attempts(app, client, 2)).statuses, answered(2), 'two attempts while Redis answers')
  t.equal((await client.counted())?.count, 2, 'counted in Redis')

  await proxy.cut()
  t.pass(`warned after ${await waitUntil(() => count(LogMessage.Local) === 1, BACK_WITHIN, 'the log to say Redis is away', 50)} ms, before any request`)
  const away = await attempts(app, client, LIMIT + 2)
  t.strictSame(away.statuses, [...answered(LIMIT), ...limited(2)], `the process allows ${LIMIT} attempts on its own`)
  t.ok(away.slowest <= REDIS_COMMAND_TIMEOUT_MS + SLACK, `none waits for Redis (slowest ${away.slowest} ms)`)
  t.equal((await client.counted())?.count, 2, 'nothing counted in Redis meanwhile')
  const warnings = lines.filter((line) => line.msg === LogMessage.Local)
  t.equal(warnings.length, 1, `one warning for ${LIMIT + 2} attempts`)
  t.match(warnings[0], { level: 40, err: { message: String } }, 'at warn, with the cause')

  await proxy.restore()
  t.pass(`shared again after ${await waitUntil(() => count(LogMessage.Shared) === 2, BACK_WITHIN, 'the log to say Redis answers', 50)} ms`)
  // The process has counted this client over the limit; Redis has two: Redis decides again
  t.equal((await attempt(app, client)).status, 401, 'answered by the count in Redis')
  t.equal((await client.counted())?.count, 3, 'and counted there')
  t.equal(count(LogMessage.Local), 1, 'still one warning in all')
})

t.test('Redis stalling: a request waits at most REDIS_COMMAND_TIMEOUT_MS, then counts per process', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  const instance = await sharedApp(t, await createDatabase(t), `redis://127.0.0.1:${proxy.port}`)
  await warm(t, redis, instance)
  const { app, count } = instance
  const client = newClient(t, redis)
  t.equal((await attempt(app, client)).status, 401, 'one attempt while Redis answers')

  await proxy.blackhole()
  const stalled = await withTimeout(attempts(app, client, LIMIT + 2), (LIMIT + 2) * (REDIS_COMMAND_TIMEOUT_MS + SLACK), 'attempts while Redis stalls')
  t.strictSame(stalled.statuses, [...answered(LIMIT), ...limited(2)], 'limited per process')
  t.ok(stalled.slowest <= REDIS_COMMAND_TIMEOUT_MS + SLACK, `the slowest took ${stalled.slowest} ms`)
  t.equal(count(LogMessage.Local), 1, 'one warning')

  await proxy.restore()
  t.pass(`shared again after ${await waitUntil(() => count(LogMessage.Shared) === 2, BACK_WITHIN, 'the log to say Redis answers', 50)} ms`)
  t.equal((await attempt(app, client)).status, 401, 'answered by the count in Redis')
  t.equal((await client.counted())?.count, 2, 'counted there')
})

t.test('Redis unreachable at start-up: the service starts, limits per process with a warning, shares once Redis answers', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  await proxy.cut()
  const started = performance.now()
  const { app, lines, count } = await sharedApp(t, await createDatabase(t), `redis://127.0.0.1:${proxy.port}`)
  t.pass(`started in ${Math.round(performance.now() - started)} ms`)
  const warnings = lines.filter((line) => line.msg === LogMessage.Local)
  t.equal(warnings.length, 1, 'one warning at start-up')
  t.match(warnings[0], { level: 40, err: { message: /ECONNREFUSED/ } }, 'with the cause')
  t.equal(count(LogMessage.Shared), 0, 'not shared')

  const client = newClient(t, redis)
  t.strictSame((await attempts(app, client, LIMIT + 1)).statuses, [...answered(LIMIT), 429], 'limited per process')
  t.equal(count(LogMessage.Local), 1, 'still one warning')

  await proxy.restore()
  t.pass(`shared after ${await waitUntil(() => count(LogMessage.Shared) === 1, BACK_WITHIN, 'the log to say Redis answers', 50)} ms`)
  t.equal((await attempt(app, client)).status, 401, 'answered by the count in Redis')
  t.equal((await client.counted())?.count, 1, 'counted there')
})

t.test('Redis refusing the credentials: per process, a warning with its answer and without the password', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const secret = 'redis-password-that-must-stay-private'
  const url = new URL(TEST_REDIS_URL)
  url.username = 'nobody-of-this-redis'
  url.password = secret
  const { app, lines, count } = await sharedApp(t, await createDatabase(t), url.toString())
  const warnings = lines.filter((line) => line.msg === LogMessage.Local)
  t.equal(warnings.length, 1, 'one warning')
  t.match(warnings[0], { err: { message: /WRONGPASS/ } }, 'with what Redis answered')
  t.notMatch(JSON.stringify(lines), secret, 'no line carries the password')
  t.equal(count(LogMessage.Shared), 0, 'not shared')
  t.strictSame((await attempts(app, newClient(t, redisClient(t)), LIMIT + 1)).statuses, [...answered(LIMIT), 429], 'limited per process')
})

t.test('Redis accepting but never answering at start-up holds the start-up for the connection bounds at most', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  // The first build migrates the database; the second, without Redis, is what a start-up costs
  await build(t, dbUrl)
  let started = performance.now()
  await build(t, dbUrl)
  const baseline = performance.now() - started

  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  await proxy.blackhole()
  started = performance.now()
  const { count } = await sharedApp(t, dbUrl, `redis://127.0.0.1:${proxy.port}`)
  const extra = Math.round(performance.now() - started - baseline)
  t.equal(count(LogMessage.Local), 1, 'one warning')
  t.ok(extra <= REDIS_CONNECT_TIMEOUT_MS + REDIS_COMMAND_TIMEOUT_MS + SLACK, `the start-up took ${extra} ms longer`)
})

t.test('closing the app closes its connection to Redis', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  const { app, count } = await sharedApp(t, await createDatabase(t), `redis://127.0.0.1:${proxy.port}`)
  t.ok(proxy.openSockets > 0, 'connected through the proxy')
  await app.close()
  t.pass(`closed after ${await waitUntil(() => proxy.openSockets === 0, 2000, 'the connection to close')} ms`)
  // A warning would be written within a tick of the socket's close: ample time for one to show
  await sleep(100)
  t.equal(count(LogMessage.Local), 0, 'closing is not logged as Redis going away')
})

t.test('an invalid REDIS_URL stops the start-up, naming the variable and nothing of its value', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const secret = 'redis-password-that-must-stay-private'
  for (const value of [
    'http://127.0.0.1:6379', 'redis://', '127.0.0.1:6379', ' redis://127.0.0.1:6379', 'redis://127.0.0.1:6379/x',
    'redis://127.0.0.1:6379/0?commandTimeout=60000', `redis://:${secret}@127.0.0.1:99999`, `redis://:${secret}@[::1:6379`
  ]) {
    const error = await build(t, dbUrl, { REDIS_URL: value }).then(() => null, (err: Error) => err)
    t.match(error?.message, /REDIS_URL/, `${JSON.stringify(value)} refused: ${error?.message}`)
    t.notMatch(error?.message, secret, 'without the password')
  }
})

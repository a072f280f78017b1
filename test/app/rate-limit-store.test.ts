/**
 * The attempt limits of POST /token through our Redis store, with the machine's Redis: two
 * instances count the per-address, per-username and known-address limits together, under the
 * keys and windows docs/operations.md names (the `read` of `{ increment: false }` included);
 * Redis going away moves those counts to the process and back; a limit asking for a window the
 * stores do not count stops the start-up. Redis is made to go away through a TCP proxy.
 */
import { createHash, randomUUID } from 'node:crypto'
import { normalizeIP } from '@fastify/rate-limit'
import Fastify, { type FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { TRUSTED_ADDRESS_MS, USERNAME_WINDOW_MS } from '../../plugins/app/login-attempts.js'
import rateLimit, { KEY_NAMESPACE, LogMessage, REDIS_COMMAND_TIMEOUT_MS } from '../../plugins/external/rate-limit.js'
import { build, PASSWORD } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { NEEDS_REDIS, newClient, redisClient, TEST_REDIS_PORT, TEST_REDIS_URL } from '../helpers/redis.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { sleep, waitUntil } from '../helpers/wait.js'

const ADDRESS_LIMIT = 3
const USERNAME_LIMIT = 3
/** The per-address window of POST /token (routes/token.ts). */
const ADDRESS_WINDOW_MS = 60_000
/** Room for a busy machine above a bound under test. */
const SLACK = 500
/** ioredis reconnects with a backoff of at most 5 s (plus jitter): Redis back is seen within it. */
const BACK_WITHIN = 10_000

const usernameKey = (username: string) => `${KEY_NAMESPACE}username:${createHash('sha256').update(username).digest('base64url')}`
const trustedKey = (address: string) => `${KEY_NAMESPACE}trusted:${normalizeIP(address)}`

/** A username of this test alone (its count in the shared Redis is its own), removed when it ends. */
function newUsername (t: Test, redis: Redis): string {
  const username = `librarian-${randomUUID()}`
  t.teardown(() => redis.del(usernameKey(username)))
  return username
}

/** An app counting in the Redis behind `url`, for the user `username`, with a count of its log lines. */
async function limitedApp (t: Test, dbUrl: string, url: string, username: string) {
  const lines: Array<{ msg: string }> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }
  const app = await build(t, dbUrl, {
    REDIS_URL: url,
    AUTH_USERNAME: username,
    TOKEN_RATE_LIMIT: String(ADDRESS_LIMIT),
    TOKEN_USERNAME_RATE_LIMIT: String(USERNAME_LIMIT)
  }, { logger: { level: 'info', stream } })
  const count = (msg: string) => lines.filter((line) => line.msg === msg).length
  return { app, count }
}

interface Answer { status: number, ms: number, retryAfter: string | undefined }

async function attempt (app: FastifyInstance, address: string, username: string, password = 'wrong'): Promise<Answer> {
  const started = performance.now()
  const response = await app.inject({ method: 'POST', url: '/token', remoteAddress: address, payload: { username, password } })
  return { status: response.statusCode, ms: Math.round(performance.now() - started), retryAfter: response.headers['retry-after'] as string | undefined }
}

/**
 * Once the log says Redis answers, a first attempt (schemas compile on first use, which on a busy
 * machine can outlast REDIS_COMMAND_TIMEOUT_MS and count that attempt in the process).
 */
async function warm (t: Test, redis: Redis, { app, count }: Awaited<ReturnType<typeof limitedApp>>) {
  await waitUntil(() => count(LogMessage.Shared) > 0, BACK_WITHIN, 'the log to say Redis answers', 50)
  await attempt(app, newClient(t, redis).address, newUsername(t, redis))
}

async function counted (redis: Redis, key: string) {
  const [count, ttl] = await Promise.all([redis.get(key), redis.pttl(key)])
  return { count: count === null ? null : Number(count), ttl }
}

t.test('two instances count every attempt limit in Redis together, under the documented keys and windows', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const dbUrl = await createDatabase(t)
  const username = newUsername(t, redis)
  const instances = [await limitedApp(t, dbUrl, TEST_REDIS_URL, username), await limitedApp(t, dbUrl, TEST_REDIS_URL, username)]
  for (const instance of instances) await warm(t, redis, instance)
  const [a, b] = instances.map(({ app }) => app) as [FastifyInstance, FastifyInstance]

  // Per address, under the route's key: a fixed window that later attempts do not renew
  const client = newClient(t, redis)
  const other = newUsername(t, redis)
  const statuses = [(await attempt(a, client.address, other)).status]
  await sleep(1000)
  for (const app of [b, a]) statuses.push((await attempt(app, client.address, other)).status)
  const refused = await attempt(b, client.address, other)
  t.strictSame([...statuses, refused.status], [401, 401, 401, 429], `${ADDRESS_LIMIT} attempts over both, then 429`)
  const perAddress = await counted(redis, `${KEY_NAMESPACE}POST/token-${normalizeIP(client.address)}`)
  t.equal(perAddress.count, ADDRESS_LIMIT + 1, 'every attempt counted under POST/token-<address>')
  t.ok(perAddress.ttl > 0 && perAddress.ttl <= ADDRESS_WINDOW_MS - 1000, `in the window of the first, not renewed (${perAddress.ttl} ms left)`)
  t.ok(Number(refused.retryAfter) > 0 && Number(refused.retryAfter) <= Math.ceil(perAddress.ttl / 1000) + 1, `Retry-After ${refused.retryAfter}: the rest of it`)

  // Per username, and the addresses that logged in (read with `{ increment: false }`)
  const home = newClient(t, redis).address
  t.teardown(() => redis.del(trustedKey(home)))
  t.equal((await attempt(a, home, username, PASSWORD)).status, 200, 'the user logs in at the first')
  const trusted = await counted(redis, trustedKey(home))
  t.equal(trusted.count, 1, 'which knows the address from now on, under trusted:<address>')
  t.ok(trusted.ttl > TRUSTED_ADDRESS_MS - 60_000 && trusted.ttl <= TRUSTED_ADDRESS_MS, `for 7 days (${trusted.ttl} ms)`)

  const guessers = [1, 2, 3].map(() => newClient(t, redis).address)
  const guesses = []
  for (const [i, address] of guessers.entries()) guesses.push((await attempt(i % 2 ? a : b, address, username)).status)
  t.strictSame(guesses, [401, 401, 429], 'the login and two guesses over both reach the per-username limit')
  const perUsername = await counted(redis, usernameKey(username))
  t.equal(perUsername.count, USERNAME_LIMIT + 1, 'all counted under username:<SHA-256>')
  t.ok(perUsername.ttl > 0 && perUsername.ttl <= USERNAME_WINDOW_MS, `for the rest of its minute (${perUsername.ttl} ms)`)
  t.strictSame(await Promise.all(guessers.map((address) => redis.exists(trustedKey(address)))), [0, 0, 0],
    'reading whether the guessers are known wrote nothing')

  t.equal((await attempt(b, home, username, PASSWORD)).status, 200, 'the second knows the user\'s address too')
  t.equal((await counted(redis, usernameKey(username))).count, USERNAME_LIMIT + 1, 'and did not count that login against the username')
  t.strictSame(instances.map(({ count }) => count(LogMessage.Local)), [0, 0], 'Redis answered every attempt in time')
})

/** An app of its own user whose Redis is behind a proxy the test can cut, once Redis answers it. */
async function appBehindProxy (t: Test) {
  const redis = redisClient(t)
  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  const username = newUsername(t, redis)
  const instance = await limitedApp(t, await createDatabase(t), `redis://127.0.0.1:${proxy.port}`, username)
  await warm(t, redis, instance)
  return { redis, proxy, username, ...instance }
}

t.test('Redis going away and back: the per-username counts and their reads move to the process and back', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const { redis, proxy, username, app, count } = await appBehindProxy(t)
  const guess = () => attempt(app, newClient(t, redis).address, username)

  t.equal((await guess()).status, 401, 'a guess while Redis answers')
  t.equal((await counted(redis, usernameKey(username))).count, 1, 'counted in Redis')

  await proxy.cut()
  await waitUntil(() => count(LogMessage.Local) === 1, BACK_WITHIN, 'the log to say Redis is away', 50)
  const away = []
  for (let i = 0; i <= USERNAME_LIMIT; i++) away.push(await guess())
  t.strictSame(away.map(({ status }) => status), [401, 401, 401, 429], `the process allows ${USERNAME_LIMIT} guesses on its own`)
  const slowest = Math.max(...away.map(({ ms }) => ms))
  t.ok(slowest <= REDIS_COMMAND_TIMEOUT_MS + SLACK, `none waits for Redis (slowest ${slowest} ms)`)

  await proxy.restore()
  await waitUntil(() => count(LogMessage.Shared) === 2, BACK_WITHIN, 'the log to say Redis answers', 50)
  t.equal((await counted(redis, usernameKey(username))).count, 1, 'nothing was counted in Redis meanwhile')
  t.equal((await guess()).status, 401, 'back: answered by the count in Redis')
  t.equal((await counted(redis, usernameKey(username))).count, 2, 'and counted there')
  t.equal(count(LogMessage.Local), 1, 'one warning in all')
})

t.test('Redis going away: an address that logged in through the process keeps its exemption from the per-username limit', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const { redis, proxy, username, app, count } = await appBehindProxy(t)
  const home = newClient(t, redis).address
  t.teardown(() => redis.del(trustedKey(home)))
  t.equal((await attempt(app, home, username, PASSWORD)).status, 200, 'the user logs in while Redis answers')
  t.equal((await counted(redis, trustedKey(home))).count, 1, 'the address is known in Redis')

  await proxy.cut()
  await waitUntil(() => count(LogMessage.Local) === 1, BACK_WITHIN, 'the log to say Redis is away', 50)
  const guesses = []
  for (let i = 0; i <= USERNAME_LIMIT; i++) guesses.push((await attempt(app, newClient(t, redis).address, username)).status)
  t.strictSame(guesses, [401, 401, 401, 429], 'other addresses spend the username\'s budget in the process')
  t.equal((await attempt(app, home, username, PASSWORD)).status, 200, 'the address that logged in still logs in')
  t.equal((await attempt(app, newClient(t, redis).address, username, PASSWORD)).status, 429, 'a new address with the right password does not')
})

/** The plugin alone, with the configuration it reads, and a route asking for `rateLimit`. */
async function withRoute (t: Test, REDIS_URL: string, rateLimitOptions: object) {
  const app = Fastify()
  t.teardown(() => app.close())
  // Of the whole configuration the plugin reads REDIS_URL alone
  await app.register(fp(async (fastify) => { fastify.decorate('config', { REDIS_URL } as FastifyInstance['config']) }, { name: 'env' }))
  await app.register(rateLimit)
  app.post('/token', { config: { rateLimit: { max: 3, timeWindow: 60_000, ...rateLimitOptions } } }, async () => 'ok')
  await app.ready()
}

t.test('a limit asking for a window that renews or grows stops the start-up, rather than being counted fixed', async (t) => {
  for (const REDIS_URL of NEEDS_REDIS === false ? ['', TEST_REDIS_URL] : ['']) {
    for (const option of ['continueExceeding', 'exponentialBackoff']) {
      await t.rejects(withRoute(t, REDIS_URL, { [option]: true }), /fixed windows/, `${option}, ${REDIS_URL === '' ? 'without' : 'with'} Redis`)
    }
    await t.resolves(withRoute(t, REDIS_URL, {}), `a fixed window, ${REDIS_URL === '' ? 'without' : 'with'} Redis`)
  }
})

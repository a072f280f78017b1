/**
 * The attempt limit in Redis with real processes started as `npm start` starts them (so `npm run
 * build` must have run): three instances on one REDIS_URL allow what one does (and still exit
 * 0 on SIGTERM), and an invalid REDIS_URL stops the start-up with one line.
 */
import t from 'tap'
import { LogMessage } from '../../plugins/external/rate-limit.js'
import { SECRET, testEnv, USERNAME } from '../helper.js'
import { createDatabase } from '../helpers/database.js'
import { NEEDS_REDIS, newClient, redisClient, TEST_REDIS_URL, type Client } from '../helpers/redis.js'
import { spawnService, startService } from '../helpers/service.js'

t.setTimeout(60_000)

const LIMIT = 5

t.test('three instances on one REDIS_URL allow TOKEN_RATE_LIMIT attempts together', { skip: NEEDS_REDIS }, async (t) => {
  const redis = redisClient(t)
  const dbUrl = await createDatabase(t)
  // The client address comes from X-Forwarded-For: every process sees 127.0.0.1 otherwise, and
  // so would every other test talking to the same Redis
  const env = { ...testEnv(dbUrl), REDIS_URL: TEST_REDIS_URL, TOKEN_RATE_LIMIT: String(LIMIT), FASTIFY_TRUST_PROXY_ENABLED: 'true' }
  const services = await Promise.all([1, 2, 3].map(() => startService(t, env)))
  await Promise.all(services.map((service) => service.waitFor(() => service.stdout.includes(LogMessage.Shared), 10_000, 'Redis to answer')))
  const attempt = async (url: string, client: Client) => (await fetch(`${url}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-forwarded-for': client.address },
    body: JSON.stringify({ username: USERNAME, password: 'wrong' }),
    signal: AbortSignal.timeout(10_000)
  })).status
  // A first request compiles what it uses: on a busy machine that can hold a process past the
  // time it waits for Redis, and its attempt would be counted in the process
  for (const service of services) await attempt(service.url, newClient(t, redis))

  const client = newClient(t, redis)
  const statuses: number[] = []
  for (let round = 0; round < 3; round++) {
    for (const service of services) statuses.push(await attempt(service.url, client))
  }
  t.strictSame(statuses, [401, 401, 401, 401, 401, 429, 429, 429, 429], `${LIMIT} answered of 9 over three instances`)
  t.equal((await client.counted())?.count, 9, 'every attempt counted in Redis')
  t.notOk(services.some((service) => service.stdout.includes(LogMessage.Local)), 'Redis answered every attempt in time')

  const exits = await Promise.all(services.map((service) => {
    service.child.kill('SIGTERM')
    return service.waitForExit()
  }))
  t.strictSame(exits, services.map(() => ({ code: 0, signal: null })), 'each exits 0 on SIGTERM, its Redis connection closed in time')
})

t.test('an invalid REDIS_URL stops the start-up with one line naming it, without its password', async (t) => {
  const secret = 'redis-password-that-must-stay-private'
  for (const value of [`redis://:${secret}@127.0.0.1:99999`, `redis://:${secret}@127.0.0.1:6379/0?db=1`]) {
    const service = await spawnService(t, { ...testEnv(await createDatabase(t)), REDIS_URL: value })
    const exit = await service.waitForExit()
    t.equal(exit.code, 1, `exit 1 for ${value.replace(secret, '...')}`)
    const lines = service.stderr.split('\n').filter((line) => line.trim() !== '')
    t.equal(lines.length, 1, 'one line on stderr')
    t.match(lines[0], /^bookkeeping: start-up failed: .*REDIS_URL/, 'naming the variable')
    t.notMatch(service.stdout + service.stderr, secret, 'no password in the output')
    t.notMatch(service.stdout + service.stderr, SECRET, 'nor the token secret')
  }
})

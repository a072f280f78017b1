/**
 * API_RATE_LIMIT counted in Redis (REDIS_URL), with the machine's Redis: two instances together
 * allow what one does, each request costs one command in Redis, and a Redis that does not answer
 * leaves each process limiting alone, as the POST /token limits do (rate-limit-redis.test.ts
 * tests that machinery through them).
 */
import { normalizeIP } from '@fastify/rate-limit'
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { LogMessage } from '../../plugins/external/rate-limit.js'
import { build, getToken } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { NEEDS_REDIS, newClient, redisClient, TEST_REDIS_PORT, TEST_REDIS_URL, type Client } from '../helpers/redis.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { waitUntil } from '../helpers/wait.js'

const LIMIT = 6

/** An app counting in the Redis at `url`, and how many of its log lines say `msg`. */
async function sharedApp (t: Test, dbUrl: string, url: string) {
  const lines: Array<{ msg: string }> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }
  const app = await build(t, dbUrl, { REDIS_URL: url, API_RATE_LIMIT: String(LIMIT) }, { logger: { level: 'info', stream } })
  const count = (msg: string) => lines.filter((line) => line.msg === msg).length
  return { app, count }
}

const read = (app: FastifyInstance, token: string, client: Client) =>
  app.inject({ method: 'GET', url: '/book/1', remoteAddress: client.address, headers: { authorization: token } })

t.test('two instances sharing REDIS_URL allow API_RATE_LIMIT requests together, one Redis command each', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const dbUrl = await createDatabase(t)
  const instances = [await sharedApp(t, dbUrl, TEST_REDIS_URL), await sharedApp(t, dbUrl, TEST_REDIS_URL)]
  for (const { count } of instances) await waitUntil(() => count(LogMessage.Shared) > 0, 10_000, 'the log to say Redis answers', 50)
  const apps = instances.map(({ app }) => app)
  const token = await getToken(apps[0]!)
  // A first request of each instance, from a client of its own: the script loaded into Redis
  // and the route's schemas compiled before what the test counts
  for (const app of apps) await read(app, token, newClient(t, redis))

  const client = newClient(t, redis)
  const monitor = await redis.monitor()
  t.teardown(() => monitor.disconnect())
  const commands: string[][] = []
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && args.some((arg) => arg.endsWith(`-${normalizeIP(client.address)}`))) commands.push(args)
  })

  // Six requests at each instance at once: the count in Redis is atomic
  const answers = await Promise.all(apps.flatMap((app) => Array.from({ length: LIMIT }, () => read(app, token, client))))
  const statuses = answers.map((answer) => answer.statusCode).sort()
  t.strictSame(statuses, [...Array<number>(LIMIT).fill(404), ...Array<number>(LIMIT).fill(429)], `${LIMIT} answered of ${2 * LIMIT} over two instances`)
  const remaining = answers.filter((answer) => answer.statusCode === 404).map((answer) => /r=(\d+)/.exec(String(answer.headers.ratelimit))![1]).sort()
  t.strictSame(remaining, ['0', '1', '2', '3', '4', '5'], 'each answered request saw its own place in the shared count')
  for (const [i, app] of apps.entries()) t.equal((await read(app, token, client)).statusCode, 429, `instance ${i + 1} refuses the next one`)
  await waitUntil(() => commands.length >= 2 * LIMIT + 2, 5000, 'Redis to have seen every request', 20)
  t.equal(commands.length, 2 * LIMIT + 2, 'one command in Redis per request, a single round trip')
  t.equal((await client.counted())?.count, 2 * LIMIT + 2, 'every request is counted in Redis, refused ones too')
  t.strictSame(instances.map(({ count }) => count(LogMessage.Local)), [0, 0], 'Redis answered every request in time')
})

t.test('Redis not answering: each process limits alone, as for POST /token', { skip: NEEDS_REDIS || STORE_INDEPENDENT }, async (t) => {
  const redis = redisClient(t)
  const proxy = await TcpProxy.start(t, TEST_REDIS_PORT)
  await proxy.cut()
  const { app, count } = await sharedApp(t, await createDatabase(t), `redis://127.0.0.1:${proxy.port}`)
  t.equal(count(LogMessage.Local), 1, 'the start-up warns')
  const token = await getToken(app)
  const client = newClient(t, redis)
  const statuses = []
  for (let i = 0; i <= LIMIT; i++) statuses.push((await read(app, token, client)).statusCode)
  t.strictSame(statuses, [...Array<number>(LIMIT).fill(404), 429], 'limited per process')
  t.equal(await client.counted(), null, 'nothing in Redis')
})

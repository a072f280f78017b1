/**
 * The health checks: live never asks the database; ready answers 503 within its own bound
 * (routes/health.ts READY_TIMEOUT_MS) when the database refuses, when the pool is exhausted and
 * when the network swallows packets, and from the moment shutdown begins; it comes back by
 * itself. Polls log at debug; a change of readiness is logged once.
 */
import { connect } from 'node:net'
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { READY_TIMEOUT_MS } from '../routes/health.js'
import { NEEDS_SERVER, build, call, createDatabase, getToken, refuseConnections, testEnv } from './helper.js'
import { databaseName, pgClient, probe, sleep, startService, withTimeout, type Service } from './server-helper.js'
import { TcpProxy } from './tcp-proxy.js'

t.setTimeout(60_000)

const LIVE = { status: 200, message: 'Service is live', data: null }
const READY = { status: 200, message: 'Service is ready', data: { database: 'up' } }
const UNAVAILABLE = { status: 503, message: 'Service unavailable', data: null }
/** Far below the pool's own 2 s to connect and 3 s per statement. */
const BOUND_SLACK = 500
/** What the database-free check may take, also while the database is gone. */
const QUICK = 300

async function timedInject (app: FastifyInstance, url: string) {
  const started = performance.now()
  const response = await app.inject({ method: 'GET', url })
  return { ms: Math.round(performance.now() - started), status: response.statusCode, body: response.json(), headers: response.headers }
}

async function timedRequest (service: Service, path: string) {
  const started = performance.now()
  const response = await service.request('GET', path, { ms: 8000 })
  return { ms: Math.round(performance.now() - started), status: response.status, body: response.body }
}

/** Polls `check` every 100 ms until it holds; fails the test after `ms`. */
async function eventually (t: Test, label: string, ms: number, check: () => Promise<boolean>) {
  const started = performance.now()
  while (!(await check())) {
    if (performance.now() - started > ms) {
      t.fail(`${label}: not within ${ms} ms`)
      return
    }
    await sleep(100)
  }
  t.pass(`${label} after ${Math.round(performance.now() - started)} ms`)
}

/** A pool gauge, as GET /metrics reports it (the app's decorators are not visible from here). */
async function poolGauge (app: FastifyInstance, name: string): Promise<number> {
  const text = (await app.inject({ method: 'GET', url: '/metrics' })).body
  const match = new RegExp(`^${name} (\\d+)$`, 'm').exec(text)
  if (match === null) throw new Error(`no ${name} in /metrics`)
  return Number(match[1])
}

function capture () {
  const lines: Array<Record<string, unknown>> = []
  return { lines, stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } }
}

t.test('live and ready answer in the envelope, without a token', async (t) => {
  const app = await build(t)
  const live = await app.inject({ method: 'GET', url: '/health/live' })
  t.equal(live.statusCode, 200)
  t.match(live.headers['content-type'], /^application\/json/)
  t.strictSame(live.json(), LIVE)
  const ready = await app.inject({ method: 'GET', url: '/health/ready' })
  t.equal(ready.statusCode, 200)
  t.strictSame(ready.json(), READY)
  const head = await app.inject({ method: 'HEAD', url: '/health/ready' })
  t.equal(head.statusCode, 200, 'HEAD works for probes that use it')
})

t.test('the database refuses: ready 503 at once, live 200; ready again afterwards, logged once each way', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const { lines, stream } = capture()
  const app = await build(t, dbUrl, {}, { logger: { level: 'info', stream } })

  t.strictSame((await timedInject(app, '/health/ready')).body, READY, 'ready before')
  const allowConnections = await refuseConnections(t, dbUrl)

  for (let poll = 1; poll <= 3; poll++) {
    const ready = await timedInject(app, '/health/ready')
    t.strictSame({ status: ready.status, body: ready.body }, { status: 503, body: UNAVAILABLE }, `poll ${poll}: 503`)
    t.ok(ready.ms <= READY_TIMEOUT_MS + BOUND_SLACK, `poll ${poll} answered in ${ready.ms} ms`)
    const live = await timedInject(app, '/health/live')
    t.strictSame({ status: live.status, body: live.body }, { status: 200, body: LIVE }, `poll ${poll}: still live`)
    t.ok(live.ms <= QUICK, `live answered in ${live.ms} ms`)
  }

  await allowConnections()
  await eventually(t, 'ready again', 5000, async () => (await timedInject(app, '/health/ready')).status === 200)
  t.strictSame((await timedInject(app, '/health/ready')).body, READY)

  const notReady = lines.filter((line) => line.msg === 'not ready: the database does not answer')
  t.equal(notReady.length, 1, 'one warning for three failed polls')
  t.match(notReady[0], { level: 40, err: { message: String } }, 'with the cause')
  t.equal(lines.filter((line) => line.msg === 'ready again: the database answers' && line.level === 30).length, 1, 'one line when it is back')
})

t.test('the pool is exhausted: ready 503 within its bound, one pooled query however many probes', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { DB_POOL_MAX: '1' })
  const token = await getToken(app)
  t.equal((await call(app, token, { method: 'POST', url: '/book', payload: { title: 'Dune', author: 'Frank Herbert', year: 1965 } })).status, 201)
  t.equal((await timedInject(app, '/health/ready')).status, 200, 'ready before')

  // A row lock held elsewhere: the PUT waits inside PostgreSQL on the pool's only connection
  const admin = await pgClient(t, dbUrl)
  await admin.query('BEGIN')
  await admin.query('SELECT id FROM books WHERE id = 1 FOR UPDATE')
  const put = call(app, token, { method: 'PUT', url: '/book/1', payload: { year: 2000 } })
  await eventually(t, 'the PUT waits on the lock', 2000, async () => {
    const { rows } = await admin.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'bookkeeping' AND wait_event_type = 'Lock'",
      [databaseName(dbUrl)])
    return rows[0].n === 1
  })
  t.equal(await poolGauge(app, 'db_pool_connections'), 1, 'precondition: the pool holds its one connection')
  t.equal(await poolGauge(app, 'db_pool_idle_connections'), 0, 'precondition: none idle')

  const probes = Array.from({ length: 5 }, () => timedInject(app, '/health/ready'))
  await sleep(200)
  t.equal(await poolGauge(app, 'db_pool_waiting_requests'), 1, 'five probes wait for one connection with one query')
  const live = await timedInject(app, '/health/live')
  t.equal(live.status, 200, `live meanwhile, in ${live.ms} ms`)
  t.ok(live.ms <= QUICK)
  for (const [i, ready] of (await Promise.all(probes)).entries()) {
    t.strictSame({ status: ready.status, body: ready.body }, { status: 503, body: UNAVAILABLE }, `probe ${i + 1}: 503`)
    // Below the bound would mean a failure that did not wait; above it, the bound did not hold
    t.ok(ready.ms >= READY_TIMEOUT_MS - 20 && ready.ms <= READY_TIMEOUT_MS + BOUND_SLACK, `probe ${i + 1} answered in ${ready.ms} ms`)
  }

  await admin.query('ROLLBACK')
  t.equal((await put).status, 200, 'the PUT completes once the lock is gone')
  await eventually(t, 'ready again', 3000, async () => (await timedInject(app, '/health/ready')).status === 200)
})

t.test('the network swallows packets: ready 503 within its bound, then 200 when it is back', async (t) => {
  const dbUrl = await createDatabase(t)
  const proxy = await TcpProxy.start(t, Number(new URL(dbUrl).port || 5432))
  const proxied = new URL(dbUrl)
  proxied.port = String(proxy.port)
  const service = await startService(t, testEnv(proxied.toString()))
  t.strictSame((await timedRequest(service, '/health/ready')).body, READY, 'ready before')
  t.ok(proxy.openSockets >= 2, 'precondition: the pool holds a connection through the proxy')

  await proxy.blackhole()
  // The second poll finds the first query still stuck (the pool gives up on it after 3 s)
  for (let poll = 1; poll <= 2; poll++) {
    const ready = await timedRequest(service, '/health/ready')
    t.strictSame({ status: ready.status, body: ready.body }, { status: 503, body: UNAVAILABLE }, `poll ${poll}: 503`)
    t.ok(ready.ms >= READY_TIMEOUT_MS - 20 && ready.ms <= READY_TIMEOUT_MS + BOUND_SLACK, `poll ${poll} answered in ${ready.ms} ms`)
    const live = await timedRequest(service, '/health/live')
    t.equal(live.status, 200, `live meanwhile, in ${live.ms} ms`)
    t.ok(live.ms <= QUICK)
  }
  t.ok(proxy.droppedBytes > 0, `precondition: the proxy swallowed bytes (${proxy.droppedBytes})`)

  await proxy.restore()
  await eventually(t, 'ready again', 6000, async () => (await timedRequest(service, '/health/ready')).status === 200)
  t.equal(service.exit, null, 'no restart was needed')

  // The log reaches us on its own pipe, maybe after the response
  await service.waitFor(() => service.stdout.includes('ready again'), 2000, 'the log line')
  const lines = service.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line))
  t.equal(lines.filter((line) => line.msg === 'not ready: the database does not answer').length, 1, 'one warning')
  t.equal(lines.filter((line) => line.msg === 'ready again: the database answers').length, 1, 'one line when back')
  t.equal(lines.filter((line) => line.msg === 'request' && String(line.route).startsWith('/health/')).length, 0,
    'no request line per poll at the default level')
})

t.test('ready answers 503 once shutdown begins', async (t) => {
  const app = await build(t)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  const { port } = address

  // A request whose headers are half sent when shutdown begins: its connection is busy, not idle,
  // so it stays open and the request is routed once complete
  const socket = connect({ port, host: '127.0.0.1' })
  t.teardown(() => { socket.destroy() })
  socket.setEncoding('latin1')
  let received = ''
  socket.on('data', (chunk: string) => { received += chunk })
  const ended = new Promise((resolve) => socket.once('close', resolve))
  await new Promise((resolve) => socket.once('connect', resolve))
  socket.write('GET /health/ready HTTP/1.1\r\nHost: localhost\r\n')
  await sleep(100)

  const closing = app.close()
  await withTimeout((async () => {
    while (await probe(port) !== 'refused') await sleep(20)
  })(), 5000, 'the listener to close')
  socket.write('\r\n')
  await withTimeout(ended, 5000, 'the response')
  await closing

  const [head = '', body = ''] = received.split('\r\n\r\n')
  t.match(head, /^HTTP\/1\.1 503 /, 'status 503')
  t.match(head, /\r\nconnection: close/i, 'the connection closes after it')
  t.strictSame(JSON.parse(body), UNAVAILABLE)
})

t.test('health request lines are logged at debug only', async (t) => {
  const dbUrl = await createDatabase(t)
  for (const level of ['info', 'debug']) {
    const { lines, stream } = capture()
    const app = await build(t, dbUrl, {}, { logger: { level, stream } })
    await app.inject({ method: 'GET', url: '/health/live' })
    await app.inject({ method: 'GET', url: '/health/ready' })
    await app.inject({ method: 'GET', url: '/nowhere' })
    const requests = lines.filter((line) => line.msg === 'request').map((line) => [line.route, line.level])
    t.strictSame(requests, level === 'info'
      ? [[null, 30]]
      : [['/health/live', 20], ['/health/ready', 20], [null, 30]], `at ${level}`)
  }
})

/**
 * The health checks: live never asks the database; ready answers 503 within its own bound
 * (routes/health.ts READY_TIMEOUT_MS) when the database refuses, when the pool is exhausted and
 * when the network swallows packets, and from the moment shutdown begins; it comes back by
 * itself. Polls log at debug; a change of readiness is logged once.
 */
import { connect } from 'node:net'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { READY_TIMEOUT_MS } from '../../routes/health.js'
import { build, call, getToken } from '../helper.js'
import { createDatabase, NEEDS_SERVER, pgClient, refuseConnections, waitForSessionsOnLock } from '../helpers/database.js'
import { BOUND_SLACK, LIVE, QUICK, READY, UNAVAILABLE } from '../helpers/health.js'
import { probe } from '../helpers/service.js'
import { sleep, waitUntil, withTimeout } from '../helpers/wait.js'

async function timedInject (app: FastifyInstance, url: string) {
  const started = performance.now()
  const response = await app.inject({ method: 'GET', url })
  return { ms: Math.round(performance.now() - started), status: response.statusCode, body: response.json(), headers: response.headers }
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
  t.pass(`ready again after ${await waitUntil(async () => (await timedInject(app, '/health/ready')).status === 200, 5000, 'ready again', 100)} ms`)
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
  await waitForSessionsOnLock(admin, dbUrl, 1, 2000)
  const { pool } = app.pg
  t.equal(pool.totalCount, 1, 'precondition: the pool holds its one connection')
  t.equal(pool.idleCount, 0, 'precondition: none idle')

  const probes = Array.from({ length: 5 }, () => timedInject(app, '/health/ready'))
  await waitUntil(() => pool.waitingCount > 0, 500, 'a probe to wait for the connection')
  t.equal(pool.waitingCount, 1, 'five probes wait for one connection with one query')
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
  t.pass(`ready again after ${await waitUntil(async () => (await timedInject(app, '/health/ready')).status === 200, 3000, 'ready again', 100)} ms`)
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
  // No event tells when the server's parser has read them: give it a moment
  await sleep(100)

  const closing = app.close()
  await withTimeout((async () => {
    await waitUntil(async () => await probe(port) === 'refused', 5000, 'the listener to close')
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

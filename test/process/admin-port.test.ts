/**
 * ADMIN_PORT on a real process over real sockets: /health/live, /health/ready and /metrics on
 * the admin listener only (404 on the public port), every other route on the public port only
 * (404 on the admin one), the admin listener on 127.0.0.1 unless ADMIN_HOST says otherwise, the
 * same edge answers on both, readiness 503 on the admin port from SIGTERM until the process
 * exits, and the start-up refused when the admin port cannot be had.
 */
import { connect } from 'node:net'
import t from 'tap'
import { PASSWORD, SECRET, testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { LIVE, READY, UNAVAILABLE } from '../helpers/health.js'
import { answered, body, closeAll, hold, type Held } from '../helpers/held-connections.js'
import { rawRequest } from '../helpers/raw-http.js'
import { expectStartupFailure, portInUse, type Service, startService } from '../helpers/service.js'
import { sleep, waitUntil, withTimeout } from '../helpers/wait.js'

// Each test a service and a database of its own: three side by side
t.jobs = 3

const ROUTE_NOT_FOUND = { status: 404, message: 'Route not found', data: null }
const OPERATIONS = ['/health/live', '/health/ready', '/metrics']

/** The admin listener's address, from the line it logs once it listens. */
async function adminAddress (service: Service): Promise<{ address: string, port: number }> {
  let found: { address: string, port: number } | undefined
  await service.waitFor(() => {
    const line = service.stdout.split('\n').slice(0, -1).find((line) => line.includes('"Admin server listening at http://'))
    if (line !== undefined) found = JSON.parse(line)
    return found !== undefined
  }, 5000, 'the admin listener to listen')
  return found!
}

/** One request on a connection of its own to `host`:`port`, closed after the answer. */
async function get (port: number, path: string, { method = 'GET', headers = '', host = '127.0.0.1' } = {}) {
  const response = await rawRequest(port, `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${headers}Connection: close\r\n\r\n`, { head: method === 'HEAD' })
  const json = () => JSON.parse(response.text)
  return { ...response, json }
}

/** Whether something listens on `host`:`port`. */
function connects (host: string, port: number): Promise<'connected' | 'refused'> {
  return withTimeout(new Promise((resolve, reject) => {
    const socket = connect({ host, port })
    socket.once('connect', () => { socket.destroy(); resolve('connected') })
    socket.once('error', (err: NodeJS.ErrnoException) => {
      socket.destroy()
      if (err.code === 'ECONNREFUSED') resolve('refused')
      else reject(err)
    })
  }), 2000, `connecting to ${host}:${port}`)
}

t.test('ADMIN_PORT=0: the operations endpoints on the admin port only, everything else on the public port only', { skip: STORE_INDEPENDENT }, async (t) => {
  // The public port on every address, as in production: the admin port stays on 127.0.0.1
  const service = await startService(t, { ...testEnv(await createDatabase(t)), HOST: '0.0.0.0', ADMIN_PORT: '0' })
  const admin = await adminAddress(service)
  t.equal(admin.address, '127.0.0.1', 'bound to 127.0.0.1 by default, logged with the port the system gave')
  t.not(admin.port, service.port, 'a port of its own')
  t.equal(await connects('127.0.0.2', service.port), 'connected', 'the public port answers on another local address')
  t.equal(await connects('127.0.0.2', admin.port), 'refused', 'the admin port does not')
  const token = await service.token()

  t.test('the operations endpoints: answered on the admin port, 404 on the public one', async (t) => {
    const live = await get(admin.port, '/health/live')
    t.equal(live.status, 200)
    t.strictSame(live.json(), LIVE)
    const ready = await get(admin.port, '/health/ready')
    t.equal(ready.status, 200)
    t.strictSame(ready.json(), READY)
    t.equal((await get(admin.port, '/health/ready', { method: 'HEAD' })).status, 200, 'HEAD too')
    const metrics = await get(admin.port, '/metrics')
    t.equal(metrics.status, 200)
    t.match(metrics.headers['content-type'], /^text\/plain/)
    t.match(metrics.text, /^db_pool_max_connections \d+$/m, 'the pool')
    t.match(metrics.text, /^nodejs_version_info\{/m, 'the Node.js version')
    t.match(metrics.text, /^http_request_duration_seconds_count\{method="POST",route="\/token",status_code="200"\} 1$/m,
      'the requests of the public port, counted by the one app')
    for (const path of OPERATIONS) {
      const onPublic = await get(service.port, path)
      t.equal(onPublic.status, 404, `${path} on the public port: 404`)
      t.strictSame(onPublic.json(), ROUTE_NOT_FOUND, `${path} on the public port: what an unknown path answers`)
      t.equal((await get(service.port, path, { method: 'POST' })).status, 404, `POST ${path} on the public port: 404, not 405`)
    }
    const wrongMethod = await get(admin.port, '/health/ready', { method: 'POST' })
    t.equal(wrongMethod.status, 405, 'POST /health/ready on the admin port: 405, as on the public port without ADMIN_PORT')
    t.equal(wrongMethod.headers.allow, 'GET, HEAD')
  })

  t.test('every other route: answered on the public port, 404 on the admin one', async (t) => {
    const unknown = await get(admin.port, '/no-such-path')
    t.strictSame({ status: unknown.status, body: unknown.json() }, { status: 404, body: ROUTE_NOT_FOUND }, 'an unknown path')
    const auth = `Authorization: ${token}\r\n`
    for (const [method, path, headers] of [
      ['GET', '/books', auth], ['GET', '/book/1', auth], ['POST', '/books', auth], ['DELETE', '/book/1', auth], ['GET', '/books/changes', auth],
      ['POST', '/token', ''], ['GET', '/openapi.json', ''], ['GET', '/docs', ''], ['GET', '/docs/static/index.css', '']
    ] as const) {
      const answer = await get(admin.port, path, { method, headers })
      t.strictSame({ status: answer.status, body: answer.json() }, { status: 404, body: ROUTE_NOT_FOUND }, `${method} ${path} on the admin port`)
    }
    t.equal((await get(service.port, '/books', { headers: auth })).status, 200, 'GET /books on the public port')
    t.equal((await get(service.port, '/docs')).status, 200, '/docs on the public port')
    const document = (await get(service.port, '/openapi.json')).json()
    t.strictSame(Object.keys(document.paths).sort(), ['/book', '/book/{id}', '/books', '/books/changes', '/token'],
      'the public OpenAPI document lists no route the public port does not answer')
  })

  t.test('the same service on both: headers, and the HTTP edge', async (t) => {
    const live = await get(admin.port, '/health/live')
    t.match(live.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'a request id')
    t.equal(live.headers['x-content-type-options'], 'nosniff', 'the service headers')
    const connectMethod = await rawRequest(admin.port, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n')
    t.equal(connectMethod.status, 405, 'CONNECT: the envelope, as on the public port')
    t.strictSame(JSON.parse(connectMethod.text), { status: 405, message: 'Method not allowed', data: null })
    const expectation = await rawRequest(admin.port, 'GET /health/live HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n')
    t.equal(expectation.status, 417, 'an unknown Expect: the envelope')
    const garbage = await rawRequest(admin.port, 'NOT HTTP AT ALL\r\n\r\n')
    t.equal(garbage.status, 400, 'what the parser rejects: the envelope')
    t.strictSame(JSON.parse(garbage.text), { status: 400, message: 'Bad request', data: null })
    const noHost = await rawRequest(admin.port, 'GET /health/live HTTP/1.1\r\nConnection: close\r\n\r\n')
    t.equal(noHost.status, 400, 'HTTP/1.1 without Host: 400, as on the public port')
    const fields = Array.from({ length: 101 }, (_, i) => `X-F${i}: x\r\n`).join('')
    const tooMany = await rawRequest(admin.port, `GET /health/live HTTP/1.1\r\nHost: x\r\n${fields}Connection: close\r\n\r\n`)
    t.equal(tooMany.status, 431, 'more than 100 header fields: 431, as on the public port')
    const http2 = await rawRequest(admin.port, 'GET /health/live HTTP/2.0\r\nHost: x\r\nConnection: close\r\n\r\n')
    t.equal(http2.status, 505, 'HTTP/2.0 in the request line: 505, as on the public port')
  })
})

t.test('the admin port has bounds of its own: 16 connections, 8 from one address, whatever MAX_CONNECTIONS says', { skip: STORE_INDEPENDENT }, async (t) => {
  // The bounds of the probe's report, far below what was held on the admin port then (40)
  const service = await startService(t, { ...testEnv(await createDatabase(t)), ADMIN_PORT: '0', MAX_CONNECTIONS: '10', MAX_CONNECTIONS_PER_ADDRESS: '5' })
  const admin = await adminAddress(service)
  const held: Held[] = []
  closeAll(t, held)
  const holdAdmin = (address: string) => hold(service, address, undefined, admin.port)
  for (let i = 0; i < 12; i++) held.push(await holdAdmin('127.0.0.2'))
  for (let i = 0; i < 12; i++) held.push(await holdAdmin('127.0.0.3'))
  await answered(held)
  const statuses = (from: number, to: number) => held.slice(from, to).map((one) => one.status())
  t.strictSame(statuses(0, 12), [...Array(8).fill(200), ...Array(4).fill(429)], 'one address: 8 served, then 429')
  t.strictSame(statuses(12, 24), [...Array(8).fill(200), ...Array(4).fill(503)], 'another: 8 more, then 503 (16 open in all)')
  t.strictSame(body(held[8]!.received()), { status: 429, message: 'Too many connections from this address', data: null })
  t.strictSame(body(held[20]!.received()), { status: 503, message: 'Too many connections', data: null })
  t.match(service.stdout, /"address":"127.0.0.2","held":8,"bound":8,"msg":"connection over the admin port's bound per address: answered 429 and closed"/, 'logged as the public bounds are')
  // The public port's own bounds are untouched by what the admin port holds
  const publicHeld = await Promise.all(Array.from({ length: 5 }, () => hold(service, '127.0.0.2', 'GET /nothing HTTP/1.1\r\nHost: localhost\r\n\r\n')))
  held.push(...publicHeld)
  await answered(publicHeld)
  t.strictSame(publicHeld.map((one) => one.status()), Array(5).fill(404), 'the public port still serves its 5 per address')
})

t.test('ADMIN_HOST: the admin port on that address only', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, { ...testEnv(await createDatabase(t)), ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.2' })
  const admin = await adminAddress(service)
  t.equal(admin.address, '127.0.0.2')
  t.equal(await connects('127.0.0.1', admin.port), 'refused', 'not on 127.0.0.1')
  const live = await rawRequest(admin.port, 'GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n').catch((err: Error) => err)
  t.ok(live instanceof Error, 'nothing answers there')
  t.equal(await connects('127.0.0.2', admin.port), 'connected', 'on 127.0.0.2')
})

t.test('a shutdown seen by a probe of the admin port: 503 from SIGTERM on, through the delay and the drain, then refused', { skip: STORE_INDEPENDENT }, async (t) => {
  const DELAY_MS = 2000
  const service = await startService(t, { ...testEnv(await createDatabase(t)), ADMIN_PORT: '0', SHUTDOWN_DELAY_MS: String(DELAY_MS) })
  const admin = await adminAddress(service)
  const token = await service.token()
  t.equal((await get(admin.port, '/health/ready')).status, 200, 'ready before the signal')

  // A kubelet-style probe: GET /health/ready on a new connection every 100 ms until refused
  const seen: Array<{ after: number, answer: number | 'refused' }> = []
  const signalled = Date.now()
  const prober = (async () => {
    // Bounded, so that a process that never exits does not keep it going after the test
    while (Date.now() - signalled < 20_000) {
      const state = await connects('127.0.0.1', admin.port)
      if (state === 'refused') {
        seen.push({ after: Date.now() - signalled, answer: 'refused' })
        return
      }
      const answer = await get(admin.port, '/health/ready').catch(() => null)
      // Closing between the connect and the request: the next round sees it refused
      if (answer !== null) seen.push({ after: Date.now() - signalled, answer: answer.status })
      await sleep(100)
    }
  })()
  service.child.kill('SIGTERM')

  // During the delay: not ready on the admin port, the public port serving as before
  await waitUntil(() => seen.some(({ answer }) => answer === 503), 2000, 'readiness 503 on the admin port')
  t.equal((await get(service.port, '/books', { headers: `Authorization: ${token}\r\n` })).status, 200, 'the public port still serves')
  t.equal((await get(admin.port, '/health/live')).status, 200, 'live on the admin port')

  // A request on the public port in flight past the delay holds the drain
  const body = JSON.stringify({ title: 'Slow', author: 'Sue', year: 3 })
  const slow = connect({ port: service.port, host: '127.0.0.1' })
  t.teardown(() => { slow.destroy() })
  let slowAnswer = ''
  slow.setEncoding('latin1').on('data', (chunk: string) => { slowAnswer += chunk })
  await new Promise((resolve) => slow.once('connect', resolve))
  slow.write(`POST /book HTTP/1.1\r\nHost: x\r\nAuthorization: ${token}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`)
  await waitUntil(async () => await connects('127.0.0.1', service.port) === 'refused', DELAY_MS + 3000, 'the public listener to close')
  const draining = await get(admin.port, '/health/ready')
  t.equal(draining.status, 503, 'while the public port drains, the admin port still answers: not ready')
  t.strictSame(draining.json(), UNAVAILABLE)
  t.equal((await get(admin.port, '/health/live')).status, 200, 'and live')

  slow.write(body.slice(10))
  await waitUntil(() => /\r\n\r\n\{.*\}$/s.test(slowAnswer), 5000, 'the request in flight to complete')
  t.match(slowAnswer, /^HTTP\/1\.1 201 /, 'the request in flight completes')
  t.strictSame(await service.waitForExit(5000), { code: 0, signal: null }, 'exit 0')
  await withTimeout(prober, 2000, 'the probe to see the port closed')

  const answers = seen.map(({ answer }) => answer)
  t.equal(answers.at(-1), 'refused', 'refused once the process is gone')
  t.ok(answers.slice(0, -1).length >= DELAY_MS / 200, `probed ${answers.length - 1} times before that`)
  t.strictSame(answers.slice(0, -1).filter((answer) => answer !== 503), [], 'every answer from the signal on was 503: never 200, never a reset')
  const lines = service.logLines().map(({ msg }) => msg)
  t.ok(lines.indexOf('admin server closed') > lines.findIndex((msg) => msg.startsWith('server closing')), 'the admin port closed after the public one')
})

t.test('the start-up fails when the admin port cannot be had, with one line naming ADMIN_PORT or ADMIN_HOST', { skip: STORE_INDEPENDENT }, async (t) => {
  const env = testEnv(await createDatabase(t))
  const takenPort = await portInUse(t)
  const secrets = [SECRET, PASSWORD]
  t.test('ADMIN_PORT taken', (t) => expectStartupFailure(t, { ...env, ADMIN_PORT: String(takenPort) },
    new RegExp(`^bookkeeping: start-up failed: port ${takenPort} on 127\\.0\\.0\\.1 is already in use by another process; stop that process or set ADMIN_PORT to a free port$`), { secrets }))
  t.test('ADMIN_PORT equal to PORT', (t) => expectStartupFailure(t, { ...env, PORT: String(takenPort), ADMIN_PORT: String(takenPort) },
    /^bookkeeping: start-up failed: ADMIN_PORT must differ from PORT/, { secrets }))
  t.test('ADMIN_PORT not a port', (t) => expectStartupFailure(t, { ...env, ADMIN_PORT: '70000' },
    /^bookkeeping: start-up failed: ADMIN_PORT is "70000"; set ADMIN_PORT to /, { secrets }))
  t.test('ADMIN_HOST not a host', (t) => expectStartupFailure(t, { ...env, ADMIN_PORT: '0', ADMIN_HOST: 'http://127.0.0.1/' },
    /^bookkeeping: start-up failed: ADMIN_HOST is "http:\/\/127\.0\.0\.1\/"; set ADMIN_HOST to /, { secrets }))
})

/**
 * Slow clients against the real process: headers trickled by many connections must not hold up
 * anyone else and are cut off by the headers timeout; a body sent byte by byte is cut off by the
 * request timeout. Both answer 408 in the envelope before the socket closes.
 */
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { type Service, startService } from '../helpers/service.js'
import { withTimeout } from '../helpers/wait.js'

t.jobs = 2

interface Trickler {
  socket: Socket
  received: () => string
  closed: Promise<number>
}

/** Opens a connection that sends `head` and then one more byte of `drip` every `everyMs`. */
function trickle (service: Service, head: string, drip: string, everyMs: number): Promise<Trickler> {
  return new Promise((resolve, reject) => {
    const started = Date.now()
    let received = ''
    const socket = connect({ port: service.port, host: '127.0.0.1' }, () => {
      socket.write(head)
      let sent = 0
      const timer = setInterval(() => {
        if (socket.destroyed || sent >= drip.length) return clearInterval(timer)
        socket.write(drip[sent++] ?? '')
      }, everyMs)
      socket.once('close', () => clearInterval(timer))
      resolve({ socket, received: () => received, closed })
    })
    const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now() - started)))
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { received += chunk })
    socket.on('error', () => {})
    socket.once('error', reject)
  })
}

function expect408 (t: Test, received: string) {
  t.match(received, /^HTTP\/1\.1 408 /, 'answered 408')
  t.strictSame(JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4)),
    { status: 408, message: 'Request timeout', data: null }, 'in the envelope')
}

t.test('200 connections trickling headers delay no one, and are cut off', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const token = await service.token()
  const tricklers = await Promise.all(Array.from({ length: 200 }, () =>
    trickle(service, 'GET /books HTTP/1.1\r\nHost: localhost\r\n', 'X-Slow: ' + 'a'.repeat(200), 250)))

  const latencies: number[] = []
  for (let i = 0; i < 50; i++) {
    const started = performance.now()
    const response = await service.request('GET', '/books', { token })
    latencies.push(performance.now() - started)
    t.equal(response.status, 200)
  }
  latencies.sort((a, b) => a - b)
  const p50 = latencies[25] ?? 0
  const worst = latencies[49] ?? 0
  t.comment(`normal requests beside 200 tricklers: p50 ${p50.toFixed(1)} ms, worst ${worst.toFixed(1)} ms`)
  // A generous functional bound, not a benchmark: blocked requests would wait for the 5 s timeout
  t.ok(worst < 1000, 'no normal request waited on the tricklers')

  const lifetimes = await withTimeout(Promise.all(tricklers.map(({ closed }) => closed)), 15_000, 'tricklers cut off')
  t.comment(`tricklers closed after ${Math.min(...lifetimes)}-${Math.max(...lifetimes)} ms`)
  t.ok(Math.max(...lifetimes) < 8000, 'all cut off soon after the 5 s headers timeout')
  t.ok(Math.min(...lifetimes) >= 4500, 'not before it')
  for (const trickler of tricklers.slice(0, 5)) expect408(t, trickler.received())
  t.ok(tricklers.every(({ received }) => received().startsWith('HTTP/1.1 408 ')), 'every trickler got the 408')
  t.equal(service.exit, null, 'the service is still running')
})

t.test('a body sent byte by byte is cut off by the request timeout', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const token = await service.token()
  const body = JSON.stringify({ title: 'Slow', author: 'Loris', year: 2000 })
  const head = `POST /book HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`
  // 500 ms a byte: the whole body would take about 25 s
  const slow = await trickle(service, head, body, 500)
  const lifetime = await withTimeout(slow.closed, 20_000, 'slow body cut off')
  t.comment(`slow body cut off after ${lifetime} ms`)
  t.ok(lifetime >= 9500 && lifetime < 13_000, 'cut off at the 10 s request timeout')
  expect408(t, slow.received())
  const books = await service.request('GET', '/books', { token })
  t.strictSame(books.body, { status: 200, message: 'Books retrieved successfully', data: [] }, 'nothing was stored')
})

/**
 * SHUTDOWN_DELAY_MS and repeated signals, on a real process over real sockets: from SIGTERM on,
 * readiness answers 503 while everything else is served as before, new connections included;
 * the listener closes once the delay is over; requests in flight then complete; exit 0. A
 * repeat of the signal within REPEAT_WINDOW_MS changes nothing, a later one closes at once, and
 * one more while closing forces the exit.
 */
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
// Only the constant: the module's listeners act on fastify-cli's close-with-grace, which this
// test process never installs
import { REPEAT_WINDOW_MS } from '../../src/signals.js'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { probe, type Service, startService } from '../helpers/service.js'
import { sleep, waitUntil, withTimeout } from '../helpers/wait.js'

const DELAY_MS = 3000

/** A raw connection, and every byte it received. */
async function rawConnection (t: Test, port: number) {
  const socket: Socket = connect({ port, host: '127.0.0.1' })
  t.teardown(() => { socket.destroy() })
  let received = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { received += chunk })
  await new Promise((resolve) => socket.once('connect', resolve))
  /** Resolves with the next whole response (its body is a JSON object). */
  const response = async () => {
    const before = received.length
    await waitUntil(() => {
      if (/\r\n\r\n\{.*\}$/s.test(received.slice(before))) return true
      if (socket.readableEnded || socket.destroyed) throw new Error(`closed without an answer: ${received.slice(before)}`)
      return false
    }, 5000, 'a response')
    return received.slice(before)
  }
  return {
    socket,
    closed: new Promise((resolve) => socket.once('close', resolve)),
    async get (path: string, token = '') {
      const answer = response()
      socket.write(`GET ${path} HTTP/1.1\r\nHost: localhost\r\n${token ? `Authorization: ${token}\r\n` : ''}\r\n`)
      return await answer
    },
    response
  }
}

function messages (service: Service, start: string) {
  return service.logLines().filter((line) => line.msg.startsWith(start))
}

t.test(`SHUTDOWN_DELAY_MS=${DELAY_MS}: not ready at once, everything else served until the delay is over, then drained`, { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, { ...testEnv(await createDatabase(t)), SHUTDOWN_DELAY_MS: String(DELAY_MS) })
  const token = await service.token()
  const kept = await rawConnection(t, service.port)
  t.match(await kept.get('/health/ready'), /^HTTP\/1\.1 200 /, 'ready before the signal, on a keep-alive connection')

  const signalled = Date.now()
  service.child.kill('SIGTERM')
  await service.waitFor(() => messages(service, 'shutdown begins').length > 0, 5000, 'shutdown to begin')
  t.match(messages(service, 'shutdown begins'), [{ signal: 'SIGTERM', delayMs: DELAY_MS }], 'logged with the signal and the delay')

  const ready = await service.request('GET', '/health/ready')
  t.equal(ready.status, 503, `not ready ${Date.now() - signalled} ms after SIGTERM, on a new connection`)
  t.strictSame(ready.body, { status: 503, message: 'Service unavailable', data: null })
  t.equal((await service.request('GET', '/health/live')).status, 200, 'live, on a new connection')
  const books = await service.request('GET', '/books', { token })
  t.equal(books.status, 200, 'the book routes answer, on a new connection')
  t.equal((await service.request('POST', '/book', { token, body: { title: 'Late', author: 'Lee', year: 2 } })).status, 201, 'writes too')
  const onKept = await kept.get('/books', token)
  t.match(onKept, /^HTTP\/1\.1 200 /, 'and on the keep-alive connection from before')
  t.match(onKept, /\r\nconnection: keep-alive\r\n/i, 'which stays open: nothing has changed for clients yet')

  // A request in flight when the delay ends: its headers and half of its body sent now
  const body = JSON.stringify({ title: 'Slow', author: 'Sue', year: 3 })
  const slow = await rawConnection(t, service.port)
  const slowAnswer = slow.response()
  slow.socket.write(`POST /book HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`)
  t.ok(Date.now() - signalled < DELAY_MS, 'all of that within the delay')

  await waitUntil(async () => await probe(service.port) === 'refused', DELAY_MS + 3000, 'the listener to close')
  const closedAfter = Date.now() - signalled
  t.ok(closedAfter >= DELAY_MS, `the listener closed ${closedAfter} ms after SIGTERM, not before the delay`)
  t.ok(closedAfter <= DELAY_MS + 1500, 'and soon after it')

  slow.socket.write(body.slice(10))
  const created = await withTimeout(slowAnswer, 5000, 'the request in flight')
  t.match(created, /^HTTP\/1\.1 201 /, 'the request in flight completes')
  t.match(created, /\r\nconnection: close\r\n/i, 'and its connection closes after it')
  const last = await kept.get('/health/live')
  t.match(last, /^HTTP\/1\.1 200 /, 'the keep-alive connection is still served, not reset')
  t.match(last, /\r\nconnection: close\r\n/i, 'and told to close')

  t.strictSame(await service.waitForExit(5000), { code: 0, signal: null }, 'exit 0')
  t.equal(messages(service, 'server closing').length, 1, 'one close')
})

t.test('a repeated signal: ignored within the repeat window, later it closes at once, and one more forces the exit', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, { ...testEnv(await createDatabase(t)), SHUTDOWN_DELAY_MS: '60000' })
  const token = await service.token()

  service.child.kill('SIGINT')
  await service.waitFor(() => messages(service, 'shutdown begins').length > 0, 5000, 'shutdown to begin')
  // As npm does after a terminal's Ctrl-C: the same signal once more, a moment later
  service.child.kill('SIGINT')
  await sleep(REPEAT_WINDOW_MS)
  t.equal(await probe(service.port), 'connected', 'the repeat within the window did not cut the delay short')
  t.equal(messages(service, 'server closing').length, 0, 'nothing is closing')

  // A request in flight, to keep the close busy: its body is never finished
  const slow = await rawConnection(t, service.port)
  slow.socket.write(`POST /book HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n` +
    'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{')
  await sleep(100)

  service.child.kill('SIGTERM')
  // The log line may reach the test after the listener is seen closed: wait for both
  await service.waitFor(() => messages(service, 'server closing').length > 0, 3000, 'the close to begin')
  await waitUntil(async () => await probe(service.port) === 'refused', 3000, 'the listener to close at once')
  t.equal(messages(service, 'server closing').length, 1, 'a deliberate second signal closes now')
  t.equal(service.exit, null, 'waiting for the request in flight')

  await sleep(REPEAT_WINDOW_MS)
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(5000), { code: 1, signal: null }, 'a third signal forces the exit: 1')
  t.match(service.stderr, 'second SIGTERM, exiting', 'and says so')
})

/**
 * SIGTERM while 16 keep-alive clients loop on requests, over real sockets, 20 times over (a reset
 * is a race: one run proves little): every request the server accepted is answered in full, no
 * request is ever reset, and the process exits 0 within 10 s. And a keep-alive connection idle
 * when the server stops accepting: usable for IDLE_CONNECTION_GRACE_MS, then closed.
 */
import { connect, type Socket } from 'node:net'
import { Agent } from 'node:http'
import t from 'tap'
import { IDLE_CONNECTION_GRACE_MS } from '../../plugins/app/connections.js'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { sendRequest, type Exchange } from '../helpers/keep-alive-request.js'
import { probe, startService } from '../helpers/service.js'
import { sleep, waitUntil, withTimeout } from '../helpers/wait.js'

const RUNS = 20

t.test(`SIGTERM under load, ${RUNS} times: accepted requests complete, none is reset, then exit 0`, { skip: STORE_INDEPENDENT }, async (t) => {
  // Three services side by side: the runs in about a third of the time, the machine still busy
  // (the file starts late in the tier, so its own time is the tier's tail)
  t.jobs = 3
  for (let run = 1; run <= RUNS; run++) {
    t.test(`run ${run}`, async (t) => {
      // A database each: two services on one PGlite session would collide
      const service = await startService(t, { ...testEnv(await createDatabase(t)), LOG_LEVEL: 'info' })
      const token = await service.token()
      const created = await service.request('POST', '/book', { token, body: { title: 'Busy', author: 'Bee', year: 1 } })
      const id = (created.body as { data: { id: number } }).data.id

      const url = new URL(service.url)
      const outcomes: Exchange[] = []
      const answers = Array.from({ length: 16 }, () => 0)
      let stop = false
      const clients = answers.map(async (_, client) => {
        const agent = new Agent({ keepAlive: true, maxSockets: 1 })
        for (let i = 0; ; i++) {
          if (stop) break
          const outcome = i % 2
            ? await sendRequest(url, agent, { method: 'PUT', path: `/book/${id}`, token, body: { year: client * 1000 + i } })
            : await sendRequest(url, agent, { method: 'GET', path: `/book/${id}`, token })
          outcomes.push(outcome)
          if (outcome.status !== undefined) answers[client] = (answers[client] ?? 0) + 1
          // Once nothing listens any more, this client is done
          if (outcome.error === 'ECONNREFUSED') break
        }
        agent.destroy()
      })

      // Every client busy on its keep-alive connection: answered on it twice, sending again
      await waitUntil(() => answers.every((count) => count >= 2), 10_000, 'every client to be busy')
      const signalled = performance.now()
      service.child.kill('SIGTERM')
      const exit = await service.waitForExit(12_000)
      const exitedAfter = Math.round(performance.now() - signalled)
      stop = true
      await Promise.all(clients)

      t.strictSame(exit, { code: 0, signal: null }, 'exit 0')
      t.ok(exitedAfter < 10_000, `exited ${exitedAfter} ms after SIGTERM`)

      const answered = outcomes.filter((outcome) => outcome.status !== undefined)
      const failed = outcomes.filter((outcome) => outcome.error !== undefined)
      const afterSignal = answered.filter((outcome) => outcome.endedAt >= signalled)
      t.comment(`${answered.length} answered (${afterSignal.length} after SIGTERM), ${failed.length} refused, exit after ${exitedAfter} ms`)
      t.ok(afterSignal.length > 0, 'requests in flight at SIGTERM were answered')
      t.ok(answered.every(({ status }) => status === 200), 'every answer is a success')
      t.ok(answered.every(({ body }) => JSON.parse(body ?? '').status === 200), 'every answer is a whole envelope')
      // A client may find nothing listening any more; it must never lose a request it sent
      t.strictSame([...new Set(failed.map(({ error }) => error))].filter((error) => error !== 'ECONNREFUSED'), [],
        'no request was reset: the only failure is a refused connection')

      const logged = service.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line))
        .filter((line) => line.msg === 'request' && line.route === '/book/:id')
      t.equal(logged.length, answered.length, 'every request the server handled reached its client')
      t.notMatch(service.stdout, 'request failed in transit', 'no response was cut off')
    })
  }
})

/** A raw keep-alive connection, and every byte it received. */
async function keepAliveConnection (port: number) {
  const socket: Socket = connect({ port, host: '127.0.0.1' })
  let received = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { received += chunk })
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())))
  await new Promise((resolve) => socket.once('connect', resolve))
  return {
    socket,
    closed,
    get received () { return received },
    /** A request for /health/live; resolves with its whole response. */
    async live () {
      const before = received.length
      socket.write('GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n')
      await waitUntil(() => {
        if (/\r\n\r\n\{.*\}$/s.test(received.slice(before))) return true
        if (socket.readableEnded || socket.destroyed) throw new Error(`the server closed the connection instead of answering: ${received.slice(before)}`)
        return false
      }, 5000, 'the response')
      return received.slice(before)
    }
  }
}

t.test(`a keep-alive connection idle at SIGTERM stays usable for ${IDLE_CONNECTION_GRACE_MS} ms, then is closed`, { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const used = await keepAliveConnection(service.port)
  const parked = await keepAliveConnection(service.port)
  t.teardown(() => { used.socket.destroy(); parked.socket.destroy() })
  t.match(await used.live(), /^HTTP\/1\.1 200 .*\r\nconnection: keep-alive\r\n/is, 'a keep-alive answer before')
  t.match(await parked.live(), /^HTTP\/1\.1 200 /, 'the other connection answered once too')

  service.child.kill('SIGTERM')
  await waitUntil(async () => await probe(service.port) === 'refused', 3000, 'the listener to close')
  const listenerClosed = Date.now()
  // Well inside the grace: a client still using its connection is served, and told to leave
  await sleep(IDLE_CONNECTION_GRACE_MS / 2)
  const answer = await used.live()
  t.match(answer, /^HTTP\/1\.1 200 /, 'a request on the idle connection after the listener closed is served')
  t.match(answer, /\r\nconnection: close\r\n/i, 'with Connection: close')
  await withTimeout(used.closed, 2000, 'the used connection to end after that answer')

  const parkedClosedAt = await withTimeout(parked.closed, IDLE_CONNECTION_GRACE_MS + 3000, 'the parked connection to be closed')
  const parkedAfter = parkedClosedAt - listenerClosed
  t.ok(parkedAfter >= IDLE_CONNECTION_GRACE_MS - 200, `the connection idle all along closed ${parkedAfter} ms after the listener, not before the grace`)
  t.ok(parkedAfter <= IDLE_CONNECTION_GRACE_MS + 2000, 'and not much after it')
  t.strictSame(await service.waitForExit(5000), { code: 0, signal: null }, 'exit 0')
})

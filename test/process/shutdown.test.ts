/**
 * SIGTERM while 16 keep-alive clients loop on requests, over real sockets: every request the
 * server accepted is answered in full, no connection is reset under a request, and the process
 * exits 0 within 10 s.
 */
import { Agent, request as httpRequest } from 'node:http'
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase } from '../helpers/database.js'
import { type Service, startService } from '../helpers/service.js'

t.setTimeout(60_000)

interface Outcome {
  at: number
  status?: number
  body?: string
  error?: string
}

function send (service: Service, agent: Agent, method: string, path: string, token: string, body?: object): Promise<Outcome> {
  return new Promise((resolve) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const req = httpRequest({
      host: '127.0.0.1',
      port: service.port,
      method,
      path,
      agent,
      headers: { authorization: token, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) }
    }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => resolve({ at: Date.now(), status: res.statusCode, body: text }))
      res.on('error', (err: NodeJS.ErrnoException) => resolve({ at: Date.now(), error: `response ${err.code ?? err.message}` }))
    })
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ at: Date.now(), error: err.code ?? err.message }))
    req.setTimeout(10_000, () => req.destroy(new Error('client timeout')))
    req.end(payload)
  })
}

t.test('SIGTERM under load: accepted requests complete, then exit 0', async (t) => {
  const service = await startService(t, { ...testEnv(await createDatabase(t)), LOG_LEVEL: 'info' })
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: { title: 'Busy', author: 'Bee', year: 1 } })
  const id = (created.body as { data: { id: number } }).data.id

  const outcomes: Outcome[] = []
  let stop = false
  const clients = Array.from({ length: 16 }, async (_, client) => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    for (let i = 0; ; i++) {
      if (stop) break
      const outcome = i % 2
        ? await send(service, agent, 'PUT', `/book/${id}`, token, { year: client * 1000 + i })
        : await send(service, agent, 'GET', `/book/${id}`, token)
      outcomes.push(outcome)
      // Once nothing listens any more, this client is done
      if (outcome.error === 'ECONNREFUSED') break
    }
    agent.destroy()
  })

  await new Promise((resolve) => setTimeout(resolve, 1500))
  const signalled = Date.now()
  service.child.kill('SIGTERM')
  const exit = await service.waitForExit(12_000)
  const exitedAfter = Date.now() - signalled
  stop = true
  await Promise.all(clients)

  t.strictSame(exit, { code: 0, signal: null }, 'exit 0')
  t.ok(exitedAfter < 10_000, `exited ${exitedAfter} ms after SIGTERM`)

  const answered = outcomes.filter((outcome) => outcome.status !== undefined)
  const failed = outcomes.filter((outcome) => outcome.error !== undefined)
  const afterSignal = answered.filter((outcome) => outcome.at >= signalled)
  t.comment(`${answered.length} answered (${afterSignal.length} after SIGTERM), ${failed.length} not accepted, exit after ${exitedAfter} ms`)
  t.ok(answered.length > 100, 'the clients were busy')
  t.ok(afterSignal.length > 0, 'requests in flight at SIGTERM were answered')
  t.ok(answered.every(({ status }) => status === 200), 'every answer is a success')
  t.ok(answered.every(({ body }) => JSON.parse(body ?? '').status === 200), 'every answer is a whole envelope')
  // A request the client could not get through is fine only if the server never took it: a
  // connection it closed while idle, or refused once closed
  t.strictSame([...new Set(failed.map(({ error }) => error))].filter((error) =>
    !['ECONNREFUSED', 'ECONNRESET', 'socket hang up', 'EPIPE'].includes(error ?? '')), [], 'only connection-level refusals')

  const logged = service.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line))
    .filter((line) => line.msg === 'request' && line.route === '/book/:id')
  t.equal(logged.length, answered.length, 'every request the server handled reached its client')
  t.notMatch(service.stdout, 'request failed in transit', 'no response was cut off')
})

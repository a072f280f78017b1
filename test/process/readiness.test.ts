/**
 * Readiness of a real service process when the network to PostgreSQL swallows packets (a TCP
 * proxy blackholes it): 503 within its own bound (routes/health.ts READY_TIMEOUT_MS) while
 * liveness stays quick, and ready again by itself once the network is back.
 */
import t from 'tap'
import { READY_TIMEOUT_MS } from '../../routes/health.js'
import { testEnv } from '../helper.js'
import { createDatabase } from '../helpers/database.js'
import { BOUND_SLACK, QUICK, READY, UNAVAILABLE } from '../helpers/health.js'
import { type Service, startService } from '../helpers/service.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { waitUntil } from '../helpers/wait.js'

async function timedRequest (service: Service, path: string) {
  const started = performance.now()
  const response = await service.request('GET', path, { ms: 8000 })
  return { ms: Math.round(performance.now() - started), status: response.status, body: response.body }
}

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
  t.pass(`ready again after ${await waitUntil(async () => (await timedRequest(service, '/health/ready')).status === 200, 6000, 'ready again', 100)} ms`)
  t.equal(service.exit, null, 'no restart was needed')

  // The log reaches us on its own pipe, maybe after the response
  await service.waitFor(() => service.stdout.includes('ready again'), 2000, 'the log line')
  const lines = service.logLines()
  t.equal(lines.filter((line) => line.msg === 'not ready: the database does not answer').length, 1, 'one warning')
  t.equal(lines.filter((line) => line.msg === 'ready again: the database answers').length, 1, 'one line when back')
  t.equal(lines.filter((line) => line.msg === 'request' && String(line.route).startsWith('/health/')).length, 0,
    'no request line per poll at the default level')
})

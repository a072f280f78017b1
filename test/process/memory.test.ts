/**
 * 30,000 mixed requests from 32 keep-alive clients against the real process: its resident
 * memory settles after warm-up instead of growing with the number of requests served. Prints
 * the figures; the bound is loose on purpose (garbage collection is lazy), a leak of about 1 KB a
 * request would exceed it. Beside the other files: under their load, and at times without it,
 * the RSS right after the load can grow past the bound with no leak, and the idle service then
 * gives its garbage back within a minute or so; in test/process/alone/ that wait would leave
 * the machine idle. The store is not in the service's process (the tests' PGlite runs in the
 * test's), so what is measured is the same on every store; the embedded store's own memory is
 * test/process/embedded-store.test.ts's.
 */
import { Agent, request as httpRequest } from 'node:http'
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { residentMiB, type Service, startService } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'

const CLIENTS = 32
const PHASES = 3
const PER_PHASE = 10_000
/** What the resident memory may grow by over the last 20,000 requests: a leak of 1 KB a request passes it. */
const GROWTH_BOUND_MIB = 20
/**
 * How long an idle service is given to return its garbage when it seems to have grown: V8's
 * memory reducer can take most of a minute on a quiet machine, and twice as long on a busy one.
 */
const SETTLE_MS = 120_000

function send (service: Service, agent: Agent, method: string, path: string, token: string | undefined, body?: string) {
  return new Promise<{ status: number, text: string }>((resolve, reject) => {
    const headers: Record<string, string> = {}
    if (token !== undefined) headers.authorization = token
    if (body !== undefined) headers['content-type'] = 'application/json'
    const req = httpRequest({ host: '127.0.0.1', port: service.port, method, path, agent, headers }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    req.setTimeout(10_000, () => req.destroy(new Error('client timeout')))
    req.end(body)
  })
}

t.test('resident memory settles under 30,000 mixed requests', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const pid = service.child.pid ?? 0
  const token = await service.token()
  for (let i = 0; i < 100; i++) {
    await service.request('POST', '/book', { token, body: { title: `Seed ${i}`, author: 'Seeder', year: 1900 + i } })
  }

  const statuses = new Map<number, number>()
  let sent = 0
  /** One client's round: a create, read, update and delete, plus the common failures. */
  async function round (agent: Agent, n: number) {
    const created = await send(service, agent, 'POST', '/book', token, JSON.stringify({ title: `T${n}`, author: 'A', year: n }))
    const id = JSON.parse(created.text).data.id
    const results = [
      created,
      await send(service, agent, 'GET', `/book/${id}`, token),
      await send(service, agent, 'PUT', `/book/${id}`, token, JSON.stringify({ year: -n })),
      await send(service, agent, 'GET', '/books', token),
      await send(service, agent, 'DELETE', `/book/${id}`, token),
      await send(service, agent, 'GET', `/book/${id}`, token),
      await send(service, agent, 'GET', '/books', undefined),
      await send(service, agent, 'POST', '/book', token, '{"title":'),
      await send(service, agent, 'GET', '/nowhere', token),
      await send(service, agent, 'PUT', '/book/abc', `${token}x`, '{}')
    ]
    for (const { status } of results) statuses.set(status, (statuses.get(status) ?? 0) + 1)
    sent += results.length
  }

  const samples: number[] = []
  const agents = Array.from({ length: CLIENTS }, () => new Agent({ keepAlive: true, maxSockets: 1 }))
  t.teardown(() => agents.forEach((agent) => agent.destroy()))
  const started = Date.now()
  for (let phase = 0; phase < PHASES; phase++) {
    const target = (phase + 1) * PER_PHASE
    await Promise.all(agents.map(async (agent, client) => {
      while (sent < target) await round(agent, sent + client)
    }))
    samples.push(residentMiB(pid))
  }
  const seconds = (Date.now() - started) / 1000

  const [warm = 0, , last = 0] = samples
  t.comment(`${sent} requests in ${seconds.toFixed(1)} s (${Math.round(sent / seconds)}/s); ` +
    `RSS after each 10,000: ${samples.map((mib) => mib.toFixed(1)).join(', ')} MiB; growth after warm-up ${(last - warm).toFixed(1)} MiB`)
  t.comment(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}`)
  t.ok(sent >= PHASES * PER_PHASE, 'all requests were sent')
  t.strictSame([...statuses.keys()].sort(), [200, 201, 400, 401, 404], 'the mix reached every outcome, no 5xx')
  // Garbage the service has not collected yet looks like growth (at times past the bound right
  // after the last phase); a leak stays. So a growth past the bound is looked at again
  // while the service is idle, until V8 gives its garbage back, as it does within seconds to
  // a minute (test/process/backlogged-listings.test.ts)
  let settled = last
  if (last - warm >= GROWTH_BOUND_MIB) {
    const settleMs = await waitUntil(() => (settled = residentMiB(pid)) - warm < GROWTH_BOUND_MIB, SETTLE_MS,
      `RSS back within ${GROWTH_BOUND_MIB} MiB of ${warm.toFixed(1)} MiB`, 250).catch(() => NaN)
    t.comment(`idle: RSS ${settled.toFixed(1)} MiB ` + (Number.isNaN(settleMs) ? `after ${SETTLE_MS / 1000} s` : `after ${(settleMs / 1000).toFixed(1)} s`))
  }
  t.ok(settled - warm < GROWTH_BOUND_MIB, `no growth beyond noise after warm-up (${(settled - warm).toFixed(1)} MiB, bound ${GROWTH_BOUND_MIB})`)
  t.equal(service.exit, null, 'the service is still running')
})

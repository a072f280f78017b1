/**
 * GET /metrics: Prometheus text that parses line by line, request durations by route pattern
 * (never the URL) and status, the pool gauges read at scrape time, the process figures, and a
 * registry per app.
 */
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { DURATION_BUCKETS } from '../../src/request-metrics.js'
import { build, call, getToken } from '../helper.js'
import { createDatabase, NEEDS_SERVER, OWN_STORE, pgClient, waitForSessionsOnLock } from '../helpers/database.js'
import { sleep, waitUntil } from '../helpers/wait.js'

interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*'
const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"'
const VALUE = '(?:[+-]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][+-]?\\d+)?|[+-]?Inf|NaN)'
const HELP_LINE = new RegExp(`^# HELP (${NAME}) .*$`)
const TYPE_LINE = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`)
// Values as Go's ParseFloat reads them, which ignores the case of NaN and Inf (prom-client writes `Nan`)
const SAMPLE_LINE = new RegExp(`^(${NAME})(?:\\{((?:${LABEL})(?:,${LABEL})*,?)?\\})? (${VALUE})(?: -?\\d+)?$`, 'i')
const ONE_LABEL = new RegExp(`(${'[a-zA-Z_][a-zA-Z0-9_]*'})="((?:[^"\\\\\\n]|\\\\[\\\\"n])*)"`, 'g')

/**
 * Parses the text exposition format 0.0.4 strictly: every line is a HELP, a TYPE, a sample or
 * empty; a family's TYPE comes once and before its samples; every sample belongs to a declared
 * family (a histogram's through `_bucket`, `_sum` and `_count`).
 */
function parse (t: Test, text: string): { samples: Sample[], types: Map<string, string> } {
  t.ok(text.endsWith('\n'), 'the text ends with a line feed')
  const types = new Map<string, string>()
  const samples: Sample[] = []
  const bad: string[] = []
  for (const line of text.slice(0, -1).split('\n')) {
    if (line === '' || HELP_LINE.test(line)) continue
    const type = TYPE_LINE.exec(line)
    if (type !== null) {
      if (types.has(type[1]!)) bad.push(`second TYPE: ${line}`)
      types.set(type[1]!, type[2]!)
      continue
    }
    const sample = SAMPLE_LINE.exec(line)
    if (sample === null) {
      bad.push(`not a sample: ${line}`)
      continue
    }
    const [, name = '', labelText = '', value = ''] = sample
    const family = types.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '')
    const familyType = types.get(family)
    if (familyType === undefined || (family !== name && !(familyType === 'histogram' || (familyType === 'summary' && !name.endsWith('_bucket'))))) {
      bad.push(`sample of no declared family: ${line}`)
    }
    const labels: Record<string, string> = {}
    for (const [, key = '', raw = ''] of labelText.matchAll(ONE_LABEL)) {
      labels[key] = raw.replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c))
    }
    samples.push({ name, labels, value: Number(value.replace(/^([+-]?)inf(inity)?$/i, '$1Infinity')) })
  }
  t.strictSame(bad, [], 'every line is valid Prometheus text')
  return { samples, types }
}

async function scrape (t: Test, app: FastifyInstance) {
  const response = await app.inject({ method: 'GET', url: '/metrics' })
  t.equal(response.statusCode, 200, 'GET /metrics without a token')
  t.equal(response.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8')
  return { text: response.body, ...parse(t, response.body) }
}

const find = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))

function requestCount (samples: Sample[], method: string, route: string, status: number): number | undefined {
  const found = find(samples, 'http_request_duration_seconds_count', { method, route, status_code: String(status) })
  return found.length === 1 ? found[0]!.value : undefined
}

t.test('request durations by route pattern and status, in valid Prometheus text', async (t) => {
  const app = await build(t)
  const token = await getToken(app)
  const book = { title: 'Dune', author: 'Frank Herbert', year: 1965 }
  for (let i = 0; i < 2; i++) t.equal((await call(app, token, { method: 'POST', url: '/book', payload: book })).status, 201)
  for (let i = 0; i < 3; i++) t.equal((await call(app, token, { method: 'GET', url: '/books' })).status, 200)
  t.equal((await call(app, token, { method: 'GET', url: '/book/1' })).status, 200)
  t.equal((await call(app, token, { method: 'GET', url: '/book/999' })).status, 404)
  t.equal((await call(app, token, { method: 'GET', url: '/book/abc' })).status, 404)
  t.equal((await app.inject({ method: 'GET', url: '/books' })).statusCode, 401)
  t.equal((await app.inject({ method: 'PATCH', url: '/books' })).statusCode, 405)
  t.equal((await app.inject({ method: 'GET', url: '/book/%zz' })).statusCode, 400)
  // Unknown URLs, each different: they must all share one label value
  for (let i = 0; i < 20; i++) {
    t.equal((await app.inject({ method: 'GET', url: `/nowhere-${i}/x?q=${i}` })).statusCode, 404)
  }

  const { text, samples, types } = await scrape(t, app)
  t.equal(types.get('http_request_duration_seconds'), 'histogram')
  const expected: Array<[string, string, number, number]> = [
    ['POST', '/token', 200, 1],
    ['POST', '/book', 201, 2],
    ['GET', '/books', 200, 3],
    ['GET', '/book/:id', 200, 1],
    ['GET', '/book/:id', 404, 2],
    ['GET', '/books', 401, 1],
    ['PATCH', 'unmatched', 405, 1],
    ['GET', 'unmatched', 400, 1],
    ['GET', 'unmatched', 404, 20]
  ]
  for (const [method, route, status, count] of expected) {
    t.equal(requestCount(samples, method, route, status), count, `${method} ${route} ${status}: ${count}`)
  }
  const series = find(samples, 'http_request_duration_seconds_count')
  t.equal(series.length, expected.length, 'no other series: one per method, route and status seen')
  t.notOk(text.includes('nowhere') || text.includes('%zz') || text.includes('/book/1"') || text.includes('/book/999'),
    'no URL is a label value')

  // Each series: buckets at the configured bounds, cumulative, +Inf equal to the count
  const le = [...DURATION_BUCKETS.map(String), '+Inf']
  for (const count of series) {
    const { method, route, status_code: status } = count.labels
    const labels = { method: method!, route: route!, status_code: status! }
    const buckets = find(samples, 'http_request_duration_seconds_bucket', labels)
    t.strictSame(buckets.map((b) => b.labels.le), le, `${method} ${route} ${status}: every bucket`)
    t.ok(buckets.every((b, i) => i === 0 || b.value >= buckets[i - 1]!.value), 'cumulative')
    t.equal(buckets.at(-1)!.value, count.value, '+Inf is the count')
    const [sum] = find(samples, 'http_request_duration_seconds_sum', labels)
    t.ok(sum !== undefined && sum.value >= 0 && sum.value < count.value * 5, `sum ${sum?.value} s`)
  }
  const [listSum] = find(samples, 'http_request_duration_seconds_sum', { method: 'GET', route: '/books', status_code: '200' })
  t.ok(listSum!.value > 0, 'a request that queried the database took time')

  const again = await scrape(t, app)
  t.equal(requestCount(again.samples, 'GET', '/metrics', 200), 1, 'the first scrape is counted once it is answered')
})

t.test('the pool gauges are read when scraped', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { DB_POOL_MAX: '1' })
  const token = await getToken(app)
  t.equal((await call(app, token, { method: 'POST', url: '/book', payload: { title: 'Dune', author: 'Frank Herbert', year: 1965 } })).status, 201)

  const gauges = ['db_pool_connections', 'db_pool_idle_connections', 'db_pool_waiting_requests', 'db_pool_max_connections']
  const read = (samples: Sample[]) => gauges.map((name) => find(samples, name)[0]?.value)
  const idle = await scrape(t, app)
  for (const name of gauges) t.equal(idle.types.get(name), 'gauge', `${name} is a gauge`)
  t.strictSame(read(idle.samples), [1, 1, 0, 1], 'idle: one connection, idle; nothing waits; at most DB_POOL_MAX')

  // A PUT blocked on a row lock holds the pool's one connection; a GET waits for it
  const admin = await pgClient(t, dbUrl)
  await admin.query('BEGIN')
  await admin.query('SELECT id FROM books WHERE id = 1 FOR UPDATE')
  const put = call(app, token, { method: 'PUT', url: '/book/1', payload: { year: 2000 } })
  await waitForSessionsOnLock(admin, dbUrl, 1)
  const get = call(app, token, { method: 'GET', url: '/book/1' })
  await waitUntil(() => app.pg.pool.waitingCount === 1, 2000, 'the GET to wait for the connection')
  t.strictSame(read((await scrape(t, app)).samples), [1, 0, 1, 1], 'busy: the connection in use, one query waiting')
  // The PUT waits at least 300 ms more on the lock (well inside the 3 s statement timeout)
  await sleep(300)
  await admin.query('ROLLBACK')
  t.equal((await put).status, 200)
  t.equal((await get).status, 200)

  const { samples } = await scrape(t, app)
  const labels = { method: 'PUT', route: '/book/:id', status_code: '200' }
  const buckets = Object.fromEntries(find(samples, 'http_request_duration_seconds_bucket', labels).map((b) => [b.labels.le, b.value]))
  t.strictSame([buckets['0.25'], buckets['1'], buckets['+Inf']], [0, 1, 1], 'the slow PUT is counted between 0.25 s and 1 s')
  t.ok(find(samples, 'http_request_duration_seconds_sum', labels)[0]!.value >= 0.3, 'and its time in the sum')
})

t.test('db_pool_max_connections is the pool\'s own maximum: 1 on PGlite, whatever DB_POOL_MAX says', { skip: OWN_STORE }, async (t) => {
  // The embedded store as the service starts it itself (not the test-hosted one): its pool
  // has one connection, and the gauge must say so rather than echo DB_POOL_MAX
  t.setTimeout(60_000)
  const app = await build(t, 'pglite:memory', { DB_POOL_MAX: '10' })
  t.equal(app.config.DB_POOL_MAX, 10, 'precondition: DB_POOL_MAX is 10')
  t.equal(app.pg.pool.options.max, 1, 'precondition: the pool holds at most one connection')
  const { samples } = await scrape(t, app)
  t.equal(find(samples, 'db_pool_max_connections')[0]?.value, 1, 'the gauge reports 1')
})

t.test('process and Node.js figures', async (t) => {
  const app = await build(t)
  const { samples, types } = await scrape(t, app)
  for (const [name, type] of <Array<[string, string]>>[
    ['process_cpu_user_seconds_total', 'counter'],
    ['process_resident_memory_bytes', 'gauge'],
    ['process_start_time_seconds', 'gauge'],
    ['nodejs_heap_size_used_bytes', 'gauge'],
    ['nodejs_eventloop_lag_seconds', 'gauge'],
    ['nodejs_gc_duration_seconds', 'histogram']
  ]) {
    t.equal(types.get(name), type, `${name} is a ${type}`)
  }
  t.ok(find(samples, 'process_resident_memory_bytes')[0]!.value > 1e6, 'resident memory is a real figure')
  t.ok(find(samples, 'process_cpu_user_seconds_total')[0]!.value > 0, 'so is CPU time')
})

t.test('each app has a registry of its own', async (t) => {
  const dbUrl = await createDatabase(t)
  const first = await build(t, dbUrl)
  const second = await build(t, dbUrl)
  for (let i = 0; i < 3; i++) await first.inject({ method: 'GET', url: '/health/live' })
  await second.inject({ method: 'GET', url: '/health/live' })
  t.equal(requestCount((await scrape(t, first)).samples, 'GET', '/health/live', 200), 3, 'the first app counts its own three')
  t.equal(requestCount((await scrape(t, second)).samples, 'GET', '/health/live', 200), 1, 'the second its one')
})

/**
 * `RequestDurations`, the request histogram: bucket bounds, one series per method, route and
 * status, the labels and samples a prom-client Registry renders, and reset.
 */
import { Registry, type Metric } from 'prom-client'
import t from 'tap'
import { DURATION_BUCKETS, RequestDurations, UNMATCHED_ROUTE } from '../../src/request-metrics.js'

/** The `_count` sample of each series, keyed by `method route status`. */
async function countsBySeries (durations: RequestDurations) {
  const { values } = await durations.get()
  return Object.fromEntries(values
    .filter((v) => v.metricName === 'http_request_duration_seconds_count')
    .map((v) => [`${v.labels.method} ${v.labels.route} ${v.labels.status_code}`, v.value])
    .sort(([a], [b]) => String(a).localeCompare(String(b))))
}

t.test('a duration lands in the first bucket whose bound it does not exceed', async (t) => {
  const durations = new RequestDurations()
  for (const seconds of [0.0004, 0.001, 0.003, 0.005, 0.7, 10, 42]) durations.observe('GET', '/books', 200, seconds)
  const { type, values } = await durations.get()
  t.equal(type, 'histogram')
  const cumulative = values.filter((v) => v.metricName.endsWith('_bucket')).map((v) => [String(v.labels.le), v.value])
  t.strictSame(cumulative, [
    ['0.001', 2], ['0.0025', 2], ['0.005', 4], ['0.01', 4], ['0.025', 4], ['0.05', 4], ['0.1', 4],
    ['0.25', 4], ['0.5', 4], ['1', 5], ['2.5', 5], ['5', 5], ['10', 6], ['+Inf', 7]
  ], 'bounds are inclusive; above the last only +Inf')
  t.strictSame(values.filter((v) => !v.metricName.endsWith('_bucket')).map((v) => [v.metricName, v.value]),
    [['http_request_duration_seconds_sum', 0.0004 + 0.001 + 0.003 + 0.005 + 0.7 + 10 + 42], ['http_request_duration_seconds_count', 7]])
  durations.reset()
  t.strictSame((await durations.get()).values, [], 'reset empties it')
})

t.test('the buckets run from 1 ms to 10 s, ascending', async (t) => {
  t.strictSame(DURATION_BUCKETS, [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
})

t.test('the metric presents itself to the Registry as the histogram http_request_duration_seconds, summed across workers', async (t) => {
  const durations = new RequestDurations()
  t.equal(durations.name, 'http_request_duration_seconds')
  t.equal(durations.type, 'histogram')
  t.equal(durations.aggregator, 'sum')
  t.match(durations.help, /\S/)
  const { name, help, type, aggregator, values } = await durations.get()
  t.strictSame({ name, help, type, aggregator, values }, {
    name: 'http_request_duration_seconds', help: durations.help, type: 'histogram', aggregator: 'sum', values: []
  }, 'and so does what get() returns, with no samples before the first request')
})

t.test('each method, route and status combination is its own series; repeats add to it', async (t) => {
  const durations = new RequestDurations()
  durations.observe('GET', '/books', 200, 0.002)
  durations.observe('GET', '/books', 200, 0.004)
  durations.observe('GET', '/books', 401, 0.001)
  durations.observe('HEAD', '/books', 200, 0.001)
  durations.observe('GET', '/book/:id', 200, 0.003)
  durations.observe('GET', '/book/:id', 404, 0.003)
  durations.observe('DELETE', '/book/:id', 404, 0.003)
  durations.observe('GET', UNMATCHED_ROUTE, 404, 0.001)
  t.strictSame(await countsBySeries(durations), {
    'DELETE /book/:id 404': 1,
    'GET /book/:id 200': 1,
    'GET /book/:id 404': 1,
    'GET /books 200': 2,
    'GET /books 401': 1,
    'GET unmatched 404': 1,
    'HEAD /books 200': 1
  })
  const { values } = await durations.get()
  t.equal(values.length, 7 * (DURATION_BUCKETS.length + 3), 'each series has a bucket per bound, +Inf, _sum and _count')
  const sums = values.filter((v) => v.metricName === 'http_request_duration_seconds_sum' && v.labels.route === '/books' && v.labels.status_code === 200 && v.labels.method === 'GET')
  t.strictSame(sums.map((v) => v.value), [0.002 + 0.004], 'a series sums only its own durations')
})

t.test('samples are labelled method, route and numeric status_code, buckets also le: each bound, then +Inf', async (t) => {
  const durations = new RequestDurations()
  durations.observe('POST', '/book', 201, 0.02)
  const { values } = await durations.get()
  const labels = { method: 'POST', route: '/book', status_code: 201 }
  t.strictSame(values, [
    ...DURATION_BUCKETS.map((le) => ({ metricName: 'http_request_duration_seconds_bucket', labels: { ...labels, le }, value: le >= 0.02 ? 1 : 0 })),
    { metricName: 'http_request_duration_seconds_bucket', labels: { ...labels, le: '+Inf' }, value: 1 },
    { metricName: 'http_request_duration_seconds_sum', labels, value: 0.02 },
    { metricName: 'http_request_duration_seconds_count', labels, value: 1 }
  ])
})

t.test('a request no route matched gets the single route label unmatched', async (t) => {
  t.equal(UNMATCHED_ROUTE, 'unmatched')
})

t.test('reset drops every series, and later observations start from zero', async (t) => {
  const durations = new RequestDurations()
  durations.observe('GET', '/books', 200, 0.002)
  durations.observe('GET', '/books', 200, 0.002)
  durations.observe('POST', '/book', 201, 0.002)
  durations.reset()
  t.strictSame((await durations.get()).values, [])
  durations.observe('GET', '/books', 200, 0.3)
  t.strictSame(await countsBySeries(durations), { 'GET /books 200': 1 })
  const sum = (await durations.get()).values.find((v) => v.metricName === 'http_request_duration_seconds_sum')
  t.equal(sum?.value, 0.3)
})

t.test('a prom-client Registry renders it as a histogram in the text format, and its resetMetrics resets it', async (t) => {
  const registry = new Registry()
  const durations = new RequestDurations()
  registry.registerMetric(durations as unknown as Metric)
  durations.observe('GET', '/books', 200, 0.003)
  const text = await registry.metrics()
  t.match(text, /^# HELP http_request_duration_seconds \S.*\n# TYPE http_request_duration_seconds histogram\n/)
  t.match(text, '\nhttp_request_duration_seconds_bucket{method="GET",route="/books",status_code="200",le="0.0025"} 0\n')
  t.match(text, '\nhttp_request_duration_seconds_bucket{method="GET",route="/books",status_code="200",le="0.005"} 1\n')
  t.match(text, '\nhttp_request_duration_seconds_bucket{method="GET",route="/books",status_code="200",le="+Inf"} 1\n')
  t.match(text, '\nhttp_request_duration_seconds_sum{method="GET",route="/books",status_code="200"} 0.003\n')
  t.match(text, '\nhttp_request_duration_seconds_count{method="GET",route="/books",status_code="200"} 1\n')
  registry.resetMetrics()
  t.strictSame((await durations.get()).values, [])
})

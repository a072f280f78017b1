/**
 * Upper bounds in seconds: a book request takes milliseconds, a lost database up to its bound
 * (`DATABASE_CALL_BOUND_MS`, src/db/time-bounds.ts).
 */
export const DURATION_BUCKETS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

/**
 * The route label of a request no route matched (an unknown path, a 405, an undecodable URL):
 * one value for all of them, never the URL, so clients cannot add series at will.
 */
export const UNMATCHED_ROUTE = 'unmatched'

interface Series {
  labels: { method: string, route: string, status_code: number }
  /** Observations per bucket, not cumulative; the last slot holds those above every bound. */
  counts: Float64Array
  sum: number
  count: number
}

interface Sample {
  metricName: string
  labels: Record<string, string | number>
  value: number
}

/**
 * `http_request_duration_seconds`: a Prometheus histogram of response times by method, route
 * pattern and status code, rendered by a prom-client Registry like its own metrics (the
 * Registry asks a metric for `name`, `help`, `type`, `aggregator` and `get()`, and `reset()`).
 *
 * Not prom-client's Histogram, because it runs on every request: its `observe` validates the
 * labels and joins them into a string key on every call, also on a child from `labels()`
 * (its cost: docs/performance.md, Other figures). This one finds the series with three Map
 * lookups on values the runtime already hashed (the method string from Node's parser, the route
 * pattern from the route's own config, the status number) and adds to an array.
 */
export class RequestDurations {
  readonly name = 'http_request_duration_seconds'
  readonly help = 'Time from the request to the end of its response, by method, route pattern and status code'
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  readonly #bounds = DURATION_BUCKETS
  /** route, then method, then status code */
  readonly #series = new Map<string, Map<string, Map<number, Series>>>()

  observe (method: string, route: string, status: number, seconds: number) {
    let byMethod = this.#series.get(route)
    if (byMethod === undefined) this.#series.set(route, byMethod = new Map())
    let byStatus = byMethod.get(method)
    if (byStatus === undefined) byMethod.set(method, byStatus = new Map())
    let series = byStatus.get(status)
    if (series === undefined) {
      series = {
        labels: { method, route, status_code: status },
        counts: new Float64Array(this.#bounds.length + 1),
        sum: 0,
        count: 0
      }
      byStatus.set(status, series)
    }
    const bounds = this.#bounds
    let bucket = 0
    while (bucket < bounds.length && seconds > bounds[bucket]!) bucket++
    series.counts[bucket] = series.counts[bucket]! + 1
    series.sum += seconds
    series.count++
  }

  /** The samples in the shape prom-client's own histograms give the Registry. */
  async get () {
    const values: Sample[] = []
    for (const byMethod of this.#series.values()) {
      for (const byStatus of byMethod.values()) {
        for (const { labels, counts, sum, count } of byStatus.values()) {
          let cumulative = 0
          this.#bounds.forEach((le, bucket) => {
            cumulative += counts[bucket]!
            values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le }, value: cumulative })
          })
          values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: '+Inf' }, value: count })
          values.push({ metricName: `${this.name}_sum`, labels, value: sum })
          values.push({ metricName: `${this.name}_count`, labels, value: count })
        }
      }
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }

  reset () {
    this.#series.clear()
  }
}

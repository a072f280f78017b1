import DataLoader from 'dataloader'
import { NO_TRACING, type SpanReference, type Tracing } from '../tracing.js'

/** Never more statements' worth of work in one batch than this. */
export const MAX_BATCH = 256
/**
 * How long a batch waits for the one before it. Long enough for any healthy answer (a commit's
 * WAL flush included), short enough that a batch stuck on a lost database cannot stretch the
 * requests queued behind it past the bound of a database call (`DATABASE_CALL_BOUND_MS`,
 * ./time-bounds.ts).
 */
export const MAX_WAIT_MS = 50

/** The timers a batch waits with: the global ones, or a unit test's, whose clock it moves itself. */
export interface BatchTimers {
  setTimeout (callback: () => void, ms: number): unknown
  clearTimeout (timer: unknown): void
  setImmediate (callback: () => void): unknown
}

/**
 * A DataLoader for one kind of statement: the calls that arrive while a batch of them is in
 * PostgreSQL become the next batch, sent when that one answers. Under load, one statement then
 * does the work of many (one parse-bind-execute, one commit and WAL flush); alone, a call waits
 * only for the end of the current turn of the event loop.
 *
 * `run` gets the keys in call order and answers each, in the same order, with a value or an
 * Error. If it throws, every call of the batch fails with that error. No caching: every call
 * reads or writes afresh.
 *
 * With tracing on (`traced`), each batch runs in a span of its own, named `traced.name`, whose
 * statements are its children: a child of the span of the batch's first call, linked to the span
 * of every call it answers, so each request's trace leads to the statement that answered it.
 */
export function batched<K, V> (
  run: (keys: readonly K[]) => Promise<ArrayLike<V | Error>>,
  timers: BatchTimers = globalThis,
  traced?: { tracing: Tracing, name: string }
): Pick<DataLoader<K, V>, 'load'> {
  if (traced === undefined || traced.tracing === NO_TRACING) return loader(run, timers)
  const { tracing, name } = traced
  const calls = loader<{ key: K, from: SpanReference | undefined }, V>((batch) => tracing.inSpan(name, {
    parent: batch[0]!.from,
    links: batch.map((call) => call.from),
    attributes: { 'bookkeeping.batch.size': batch.length }
  }, () => run(batch.map((call) => call.key))), timers)
  return { load: (key) => calls.load({ key, from: tracing.current() }) }
}

function loader<K, V> (run: (keys: readonly K[]) => Promise<ArrayLike<V | Error>>, timers: BatchTimers): DataLoader<K, V> {
  let previous: Promise<unknown> = Promise.resolve()
  return new DataLoader<K, V>((keys) => {
    const answers = run(keys)
    previous = answers.catch(() => {})
    return answers
  }, {
    cache: false,
    maxBatchSize: MAX_BATCH,
    batchScheduleFn (dispatch) {
      let sent = false
      const send = () => {
        if (sent) return
        sent = true
        timers.clearTimeout(timer)
        // One more turn, so the requests read in the same turn as the answer join the batch
        timers.setImmediate(dispatch)
      }
      const timer = timers.setTimeout(send, MAX_WAIT_MS)
      previous.then(send, send)
    }
  })
}

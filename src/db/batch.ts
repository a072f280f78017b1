import DataLoader from 'dataloader'

/** Never more statements' worth of work in one batch than this. */
export const MAX_BATCH = 256
/**
 * How long a batch waits for the one before it. Long enough for any healthy answer (a commit's
 * WAL flush included), short enough that a batch stuck on a lost database cannot stretch the
 * requests queued behind it past the bound of a database call (`DATABASE_CALL_BOUND_MS`,
 * ./time-bounds.ts).
 */
export const MAX_WAIT_MS = 50

/**
 * A DataLoader for one kind of statement: the calls that arrive while a batch of them is in
 * PostgreSQL become the next batch, sent when that one answers. Under load, one statement then
 * does the work of many (one parse-bind-execute, one commit and WAL flush); alone, a call waits
 * only for the end of the current turn of the event loop.
 *
 * `run` gets the keys in call order and answers each, in the same order, with a value or an
 * Error. If it throws, every call of the batch fails with that error. No caching: every call
 * reads or writes afresh.
 */
export function batched<K, V> (run: (keys: readonly K[]) => Promise<ArrayLike<V | Error>>): DataLoader<K, V> {
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
        clearTimeout(timer)
        // One more turn, so the requests read in the same turn as the answer join the batch
        setImmediate(dispatch)
      }
      const timer = setTimeout(send, MAX_WAIT_MS)
      previous.then(send, send)
    }
  })
}

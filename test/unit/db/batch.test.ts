/**
 * `batched`: when a batch is sent (end of the turn, when its predecessor answers, or after
 * MAX_WAIT_MS at most), what goes in it (call order, MAX_BATCH, no cache) and how answers and
 * failures reach each call; with tracing, the span of each batch and its links. Each loader gets a clock of the test's own (`ManualTimers`), which
 * moves only when the test moves it: nothing here sleeps.
 */
import DataLoader from 'dataloader'
import t from 'tap'
import { MAX_BATCH, MAX_WAIT_MS, batched, type BatchTimers } from '../../../src/db/batch.js'
import { NO_TRACING, type SpanReference, type Tracing } from '../../../src/tracing.js'

interface Pending { at: number, order: number, callback: () => void }

/**
 * setTimeout, clearTimeout and setImmediate on a clock that stands still until `tick`: an
 * immediate is a timer due now, and what falls due runs in the order of its time, then of its
 * scheduling, including what those callbacks schedule within the ticked span.
 */
class ManualTimers implements BatchTimers {
  #now = 0
  #scheduled = 0
  readonly #pending = new Set<Pending>()

  setTimeout (callback: () => void, ms: number): Pending {
    const timer = { at: this.#now + ms, order: this.#scheduled++, callback }
    this.#pending.add(timer)
    return timer
  }

  clearTimeout (timer: unknown) {
    this.#pending.delete(timer as Pending)
  }

  setImmediate (callback: () => void): Pending {
    return this.setTimeout(callback, 0)
  }

  tick (ms: number) {
    const until = this.#now + ms
    for (let next = this.#due(until); next !== undefined; next = this.#due(until)) {
      this.#pending.delete(next)
      this.#now = next.at
      next.callback()
    }
    this.#now = until
  }

  /** Ends the current turn: promise callbacks, then the immediates due, then theirs. */
  async nextTurn () {
    await settle()
    this.tick(0)
    await settle()
  }

  /** Moves the clock by `ms` and runs what that makes due, promise callbacks included. */
  async advance (ms: number) {
    this.tick(ms)
    await settle()
  }

  #due (until: number): Pending | undefined {
    let first: Pending | undefined
    for (const timer of this.#pending) {
      if (timer.at > until) continue
      if (first === undefined || timer.at < first.at || (timer.at === first.at && timer.order < first.order)) first = timer
    }
    return first
  }
}

/** Runs every pending promise callback in a real turn of the event loop; the test's clock stands still. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve))

interface RunCall {
  keys: string[]
  answer: (values: Array<string | Error>) => void
  fail: (error: Error) => void
}

/** A `run` that records each call and answers only when the test says so. */
function controlledRun () {
  const calls: RunCall[] = []
  const run = (keys: readonly string[]) => new Promise<Array<string | Error>>((resolve, reject) => {
    calls.push({ keys: [...keys], answer: resolve, fail: reject })
  })
  const keysOfCalls = () => calls.map((call) => call.keys)
  return { calls, run, keysOfCalls }
}

/** Answers each key with its upper-case form. */
const upper = (keys: string[]) => keys.map((key) => key.toUpperCase())

t.test('calls made in the same turn share one call of run, with the keys in call order, sent at the end of the turn', async (t) => {
  const timers = new ManualTimers()
  const { calls, run, keysOfCalls } = controlledRun()
  const loader = batched(run, timers)
  const loads = ['b', 'a', 'c'].map((key) => loader.load(key))
  await settle()
  t.strictSame(keysOfCalls(), [], 'nothing is sent before the turn ends')
  timers.tick(0)
  await settle()
  t.strictSame(keysOfCalls(), [['b', 'a', 'c']], 'one call at the end of the turn, without the clock moving')
  calls[0]!.answer(upper(calls[0]!.keys))
  t.strictSame(await Promise.all(loads), ['B', 'A', 'C'], 'each call gets the answer at its position')
})

t.test('calls made while a batch runs form the next batch, sent when the running one answers and not before', async (t) => {
  const timers = new ManualTimers()
  const { calls, run, keysOfCalls } = controlledRun()
  const loader = batched(run, timers)
  const first = loader.load('x')
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['x']])

  const next = [loader.load('y'), loader.load('z')]
  await timers.nextTurn()
  await timers.advance(MAX_WAIT_MS - 1)
  t.strictSame(keysOfCalls(), [['x']], 'the next batch waits while the running one has not answered')

  calls[0]!.answer(['X'])
  await settle()
  t.equal(await first, 'X')
  t.strictSame(keysOfCalls(), [['x']], 'the next batch is not sent in the turn the answer arrives')
  next.push(loader.load('w'))
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['x'], ['y', 'z', 'w']], 'sent one turn after the answer, with the call made in that turn')
  calls[1]!.answer(upper(calls[1]!.keys))
  t.strictSame(await Promise.all(next), ['Y', 'Z', 'W'])
})

t.test('a batch whose predecessor never answers is sent MAX_WAIT_MS (50 ms) after its first call, not a millisecond sooner', async (t) => {
  t.equal(MAX_WAIT_MS, 50)
  const timers = new ManualTimers()
  const { calls, run, keysOfCalls } = controlledRun()
  const loader = batched(run, timers)
  const stuck = loader.load('stuck')
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['stuck']])

  // The wait counts from the batch's first call, not from when its predecessor was sent
  await timers.advance(30)
  const waiting = [loader.load('a')]
  await timers.advance(20)
  // A later call joins the waiting batch and does not restart the wait
  waiting.push(loader.load('b'))
  await timers.advance(MAX_WAIT_MS - 20 - 1)
  t.strictSame(keysOfCalls(), [['stuck']], `not sent at ${MAX_WAIT_MS - 1} ms`)
  await timers.advance(1)
  t.strictSame(keysOfCalls(), [['stuck'], ['a', 'b']], `sent at ${MAX_WAIT_MS} ms`)
  calls[1]!.answer(['A', 'B'])
  t.strictSame(await Promise.all(waiting), ['A', 'B'], 'and answered while its predecessor is still stuck')

  calls[0]!.answer(['STUCK'])
  t.equal(await stuck, 'STUCK', 'the stuck batch still answers its own call when it answers late')
  await timers.nextTurn()
  await timers.advance(MAX_WAIT_MS)
  t.strictSame(keysOfCalls(), [['stuck'], ['a', 'b']], 'the late answer sends nothing more')
})

t.test('MAX_BATCH is 256 and a larger set of calls is split into calls of run of at most MAX_BATCH keys, in call order', async (t) => {
  t.equal(MAX_BATCH, 256)
  const timers = new ManualTimers()
  const { calls, run, keysOfCalls } = controlledRun()
  const loader = batched(run, timers)
  const keys = Array.from({ length: 2 * MAX_BATCH + 1 }, (_, i) => `k${i}`)
  const loads = keys.map((key) => loader.load(key))
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [keys.slice(0, MAX_BATCH), keys.slice(MAX_BATCH, 2 * MAX_BATCH), keys.slice(2 * MAX_BATCH)])
  for (const call of calls) call.answer(upper(call.keys))
  t.strictSame(await Promise.all(loads), upper(keys), 'every call gets its own answer')
})

t.test('an Error in the answers rejects only the call at its position', async (t) => {
  const timers = new ManualTimers()
  const { calls, run } = controlledRun()
  const loader = batched(run, timers)
  const [a, b, c] = ['a', 'b', 'c'].map((key) => loader.load(key))
  const error = new Error('no b')
  const rejected = t.rejects(b!, error)
  await timers.nextTurn()
  calls[0]!.answer(['A', error, 'C'])
  t.equal(await a, 'A')
  await rejected
  t.equal(await c, 'C')
})

t.test('a run that rejects fails every call of its batch with its error, and the next batch is still sent', async (t) => {
  const timers = new ManualTimers()
  const { calls, run, keysOfCalls } = controlledRun()
  const loader = batched(run, timers)
  const error = new Error('connection lost')
  const first = [loader.load('a'), loader.load('b')].map((load) => t.rejects(load, error))
  await timers.nextTurn()
  const second = [loader.load('c')]
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['a', 'b']])

  calls[0]!.fail(error)
  await Promise.all(first)
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['a', 'b'], ['c']], 'sent in the turn after the failure, without waiting for MAX_WAIT_MS')
  calls[1]!.answer(['C'])
  t.strictSame(await Promise.all(second), ['C'])
})

const badStatement = new Error('bad statement')
const FAILING_RUNS = [
  { how: 'an async run that throws', run: async () => { throw badStatement }, error: badStatement },
  // DataLoader wraps a synchronous throw in a TypeError that quotes it
  { how: 'a run that throws synchronously', run: () => { throw new Error('thrown before any promise') }, error: { message: /thrown before any promise/ } }
]

for (const { how, run: fail, error } of FAILING_RUNS) {
  t.test(`${how} fails every call of its batch with that error, and a later batch is still sent`, async (t) => {
    const timers = new ManualTimers()
    const seen: string[][] = []
    const loader = batched<string, string>((keys) => {
      seen.push([...keys])
      return keys.includes('bad') ? fail() : Promise.resolve(upper([...keys]))
    }, timers)
    const failing = [loader.load('bad'), loader.load('ok')].map((load) => t.rejects(load, error))
    await timers.nextTurn()
    await Promise.all(failing)
    const later = loader.load('later')
    await timers.nextTurn()
    t.equal(await later, 'LATER')
    t.strictSame(seen, [['bad', 'ok'], ['later']])
  })
}

t.test('no caching: the same key twice in a batch is passed twice, and a later call of it calls run anew', async (t) => {
  const timers = new ManualTimers()
  const { calls, run, keysOfCalls } = controlledRun()
  const loader = batched(run, timers)
  const twice = [loader.load('k'), loader.load('k')]
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['k', 'k']])
  calls[0]!.answer(['first', 'second'])
  t.strictSame(await Promise.all(twice), ['first', 'second'], 'each call gets its own answer')

  const again = loader.load('k')
  await timers.nextTurn()
  t.strictSame(keysOfCalls(), [['k', 'k'], ['k']])
  calls[1]!.answer(['third'])
  t.equal(await again, 'third')
})

t.test('each batched loader waits only for its own batches', async (t) => {
  const timers = new ManualTimers()
  const one = controlledRun()
  const other = controlledRun()
  const loaderOne = batched(one.run, timers)
  const loaderOther = batched(other.run, timers)
  loaderOne.load('stuck')
  await timers.nextTurn()
  const load = loaderOther.load('free')
  await timers.nextTurn()
  t.strictSame(other.keysOfCalls(), [['free']], 'not held back by the other loader\'s running batch')
  other.calls[0]!.answer(['FREE'])
  t.equal(await load, 'FREE')
})

t.test('traced: each batch in a span of its own, a child of its first call\'s span, linked to the span of every call', async (t) => {
  const timers = new ManualTimers()
  const { calls, run } = controlledRun()
  // A tracing whose current span is whatever the test says, and which records the spans asked for
  let current: string | undefined
  const spans: Array<{ name: string, parent: unknown, links: unknown, attributes: unknown, running: boolean }> = []
  const tracing: Tracing = {
    current: () => current as SpanReference | undefined,
    async inSpan (name, { parent, links, attributes }, work) {
      const span = { name, parent, links, attributes, running: true }
      spans.push(span)
      try {
        return await work()
      } finally {
        span.running = false
      }
    }
  }
  const loader = batched(run, timers, { tracing, name: 'books find' })
  const loads = ['request a', undefined, 'request c'].map((span, i) => {
    current = span
    return loader.load(`key ${i}`)
  })
  await timers.nextTurn()
  t.strictSame(calls.map((call) => call.keys), [['key 0', 'key 1', 'key 2']], 'the keys as they were loaded')
  t.strictSame(spans, [{
    name: 'books find', parent: 'request a', links: ['request a', undefined, 'request c'], attributes: { 'bookkeeping.batch.size': 3 }, running: true
  }], 'one span while the batch runs')
  calls[0]!.answer(['A', 'B', 'C'])
  t.strictSame(await Promise.all(loads), ['A', 'B', 'C'], 'each call its answer')
  t.equal(spans[0]!.running, false, 'ended with the batch')
})

t.test('tracing off: no span asked for, the plain loader', async (t) => {
  const timers = new ManualTimers()
  const { calls, run } = controlledRun()
  const loader = batched(run, timers, { tracing: NO_TRACING, name: 'books find' })
  t.ok(loader instanceof DataLoader, 'DataLoader itself, nothing wrapped around it')
  const load = loader.load('k')
  await timers.nextTurn()
  calls[0]!.answer(['K'])
  t.equal(await load, 'K')
})

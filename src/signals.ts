/**
 * A WORKAROUND, the only place that relies on how fastify-cli handles signals, which it does not
 * document. Preloaded by `npm start` (and so by `npm run dev`) with `fastify start -r`: SIGINT
 * and SIGTERM stop the service once, gracefully, after SHUTDOWN_DELAY_MS.
 *
 * `fastify start` closes the server through close-with-grace on the first SIGINT or SIGTERM and
 * exits 1 ("second SIGINT, exiting") on any further one. But one request to stop often arrives
 * twice: Ctrl-C in a terminal signals the whole process group, and npm, in that group too,
 * forwards the same signal once more. And the close must wait until the load balancer has taken
 * the instance out (`beginShutdown`, plugins/app/connections.ts) before the grace (`-g`) starts.
 * No supported way changes that: fastify-cli documents no option for it, passes on only `delay`
 * (`-g`) of close-with-grace's options (not `skip` or `onSecondSignal`), and a listener of the
 * app's own cannot keep close-with-grace's from acting on every signal.
 *
 * So this module takes close-with-grace's SIGINT and SIGTERM listeners off the process and hands
 * them the signals itself:
 * - the first one after `beginShutdown` (readiness 503, serving on for SHUTDOWN_DELAY_MS);
 *   close-with-grace then closes the server within its grace and exits 0;
 * - a repeat within `REPEAT_WINDOW_MS` of the last one acted on is the same request delivered
 *   twice, and is ignored;
 * - a later one is a deliberate second request: it goes to close-with-grace at once, which
 *   closes now if the delay is still running, and exits 1 if the close is already under way.
 *
 * It finds those listeners with Node's and Fastify's public API only: the SIGINT and SIGTERM
 * listeners added between the creation of the instance (Fastify's `fastify.initialization`
 * channel) and its first `onReady` hook are fastify-cli's, and those a handed-on signal adds are
 * close-with-grace's for the next signal. What it relies on, then: that fastify-cli adds exactly
 * one listener for each of the two signals in that span, and that calling it adds exactly one
 * for each, there and then. When an upgrade of fastify-cli or close-with-grace breaks that, the
 * start-up fails with one line naming this module (test/unit/signals.test.ts and every process
 * test fail with it), or, at the first signal, a line on stderr says so and this module steps
 * aside.
 *
 * While the app loads, signals keep their default action; from then until it is ready (a
 * moment), close-with-grace's. The other signals and errors close-with-grace handles stay its own.
 */
import { subscribe } from 'node:diagnostics_channel'
import type { FastifyInstance } from 'fastify'

/**
 * A signal this soon after the last one acted on is a duplicate: npm forwards a terminal's
 * signal within milliseconds, a person pressing Ctrl-C again takes longer.
 */
export const REPEAT_WINDOW_MS = 1000

const SIGNALS = ['SIGINT', 'SIGTERM'] as const
type Signal = typeof SIGNALS[number]
type Listeners = NodeJS.SignalsListener[]

/** close-with-grace's listener for the next signal, by signal: first its close, then its exit 1. */
const graceful = new Map<Signal, Listeners[number]>()
let app: FastifyInstance | null = null
let phase: 'serving' | 'delaying' | 'closing' = 'serving'
let handedOnAt = -Infinity

function listenersNow (): Map<Signal, Listeners> {
  return new Map(SIGNALS.map((signal) => [signal, process.listeners(signal)]))
}

/**
 * Takes off the process, for `onSignal`, the one listener of each signal added since `before`;
 * else leaves everything as it is and says what it found instead.
 */
function takeOver (before: Map<Signal, Listeners>, by: string): string | undefined {
  const added = SIGNALS.map((signal) => process.listeners(signal).filter((listener) => !before.get(signal)?.includes(listener)))
  // Only an upgrade of fastify-cli or close-with-grace gets here: no test can reach it without changing them
  /* c8 ignore start */
  if (added.some((listeners) => listeners.length !== 1)) {
    return `src/signals.ts: ${by} added ${SIGNALS.map((signal, i) => `${added[i]?.length} ${signal}`).join(' and ')} listeners, ` +
      'not one each; fastify-cli or close-with-grace changed how they handle signals, see src/signals.ts'
  }
  /* c8 ignore stop */
  SIGNALS.forEach((signal, i) => {
    const listener = added[i]![0]!
    process.removeListener(signal, listener)
    graceful.set(signal, listener)
  })
  return undefined
}

// The instance fastify-cli creates (one per process), to call its `beginShutdown`
subscribe('fastify.initialization', (message) => {
  if (app !== null) return
  app = (message as { fastify: FastifyInstance }).fastify
  const before = listenersNow()
  // The first onReady hook, as it is added before the app's: fastify-cli has installed
  // close-with-grace by then, and the server listens after
  app.addHook('onReady', async function () {
    const unexpected = takeOver(before, 'fastify-cli, while starting,')
    if (unexpected !== undefined) throw new Error(unexpected)
    for (const signal of SIGNALS) process.on(signal, onSignal)
  })
})

/** Hands `signal` to close-with-grace's close, and takes over its listeners for a later one. */
function close (signal: Signal) {
  phase = 'closing'
  const before = listenersNow()
  graceful.get(signal)?.(signal)
  // close-with-grace, as it begins to close, adds its listeners for a later signal there and then
  const unexpected = takeOver(before, `close-with-grace, handed ${signal},`)
  if (unexpected === undefined) return
  /* c8 ignore start */
  // Only after an upgrade, as above. A later signal then meets close-with-grace's own
  // listeners, or Node's default action
  for (const one of SIGNALS) process.removeListener(one, onSignal)
  process.stderr.write(`bookkeeping: ${unexpected}\n`)
}
/* c8 ignore stop */

function onSignal (signal: Signal) {
  const now = performance.now()
  if (now - handedOnAt < REPEAT_WINDOW_MS) return
  handedOnAt = now
  switch (phase) {
    case 'closing':
      // close-with-grace's exit 1
      graceful.get(signal)?.(signal)
      return
    case 'delaying':
      close(signal)
      return
    case 'serving': {
      phase = 'delaying'
      // Unless a second request has made it close already
      const delayOver = () => { if (phase === 'delaying') close(signal) }
      Promise.resolve(app?.beginShutdown(signal)).then(delayOver, delayOver)
    }
  }
}

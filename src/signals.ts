/**
 * Preloaded by `npm start` and `npm run dev` (`fastify start -r`): SIGINT and SIGTERM stop the
 * service once, gracefully, after SHUTDOWN_DELAY_MS.
 *
 * fastify-cli's close-with-grace closes the server on the first SIGINT or SIGTERM and exits 1
 * ("second SIGINT, exiting") on any further one. But one request to stop often arrives twice:
 * Ctrl-C in a terminal signals the whole process group, and npm, in that group too, forwards the
 * same signal to its script once more. And the close must wait until the load balancer has
 * taken the instance out (`beginShutdown`, plugins/app/shutdown.ts).
 *
 * So this module takes over the SIGINT and SIGTERM listeners close-with-grace adds, and hands
 * them the signals itself:
 * - the first one after `beginShutdown` (readiness 503, serving on for SHUTDOWN_DELAY_MS);
 *   close-with-grace then closes the server within its grace (`-g`) and exits 0;
 * - a repeat within `REPEAT_WINDOW_MS` of the last one handed on is the same request delivered
 *   twice, and is ignored;
 * - a later one is a deliberate second request: it goes to close-with-grace at once, which
 *   closes now if the delay is still running, and exits 1 if the close is already under way.
 *
 * Until close-with-grace is installed (while the app starts), signals keep their default action.
 * The other signals and errors close-with-grace handles stay its own.
 */
import { subscribe } from 'node:diagnostics_channel'
import { createRequire } from 'node:module'
import { dirname, sep } from 'node:path'
import type { FastifyInstance } from 'fastify'

/**
 * A signal this soon after the last one handed on is a duplicate: npm forwards a terminal's
 * signal within milliseconds, a person pressing Ctrl-C again takes longer.
 */
export const REPEAT_WINDOW_MS = 1000

const SIGNALS = new Set<string | symbol>(['SIGINT', 'SIGTERM'])

type Listener = (signal: NodeJS.Signals) => void

/** close-with-grace as fastify-cli loads it: its listeners are the ones registered from there. */
const CLOSE_WITH_GRACE = dirname(createRequire(createRequire(import.meta.url).resolve('fastify-cli/start.js')).resolve('close-with-grace')) + sep

/** What close-with-grace would do with the next signal, by signal: close, later exit 1. */
const graceful = new Map<NodeJS.Signals, Listener>()
let app: FastifyInstance | null = null
let phase: 'serving' | 'delaying' | 'closing' = 'serving'
let handedOnAt = -Infinity

// The instance fastify-cli creates (one per process), to call its `beginShutdown`
subscribe('fastify.initialization', (message) => {
  app ??= (message as { fastify: FastifyInstance }).fastify
})

function registeredByCloseWithGrace (): boolean {
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 20
  try {
    return new Error().stack?.includes(CLOSE_WITH_GRACE) ?? false
  } finally {
    Error.stackTraceLimit = limit
  }
}

process.on('newListener', (event, listener: Listener) => {
  if (!SIGNALS.has(event) || listener === onSignal || !registeredByCloseWithGrace()) return
  const signal = event as NodeJS.Signals
  graceful.set(signal, listener)
  // 'newListener' comes before the listener is added; no signal is delivered before the next tick
  process.nextTick(() => {
    process.removeListener(signal, listener)
    if (!process.listeners(signal).includes(onSignal)) process.on(signal, onSignal)
  })
})

function handOn (signal: NodeJS.Signals) {
  graceful.get(signal)?.(signal)
}

function onSignal (signal: NodeJS.Signals) {
  const now = performance.now()
  if (now - handedOnAt < REPEAT_WINDOW_MS) return
  handedOnAt = now
  if (phase !== 'serving') {
    phase = 'closing'
    handOn(signal)
    return
  }
  phase = 'delaying'
  const close = () => {
    // Unless a second request has made it close already
    if (phase !== 'delaying') return
    phase = 'closing'
    handOn(signal)
  }
  Promise.resolve(app?.beginShutdown(signal)).then(close, close)
}

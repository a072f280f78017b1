/** Waiting in tests: for a promise with a bound, or until a condition holds. */
import { connect } from 'node:net'

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Rejects with `label` when `promise` has not settled within `ms`. */
export async function withTimeout<T> (promise: Promise<T>, ms: number, label: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${label}`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Resolves with the milliseconds it took once `condition` holds, checked every `every` ms;
 * rejects with `label` when it still does not hold after `ms`. For conditions no event
 * announces (another process's state, a row in pg_stat_activity).
 */
export async function waitUntil (
  condition: () => boolean | Promise<boolean>, ms: number, label: string, every = 20
): Promise<number> {
  const started = performance.now()
  while (!(await condition())) {
    if (performance.now() - started > ms) throw new Error(`not within ${ms} ms: ${label}`)
    await sleep(every)
  }
  return Math.round(performance.now() - started)
}

/**
 * Whether something accepts TCP connections at `url`'s host and port (`defaultPort` when the URL
 * has none) within `ms`. In this process, with a top-level await where a helper decides what the
 * tests run on: a child Node.js for it would start with tap's hooks, a quarter of a second each.
 */
export function acceptsConnections (url: string, defaultPort: number, ms = 1000): Promise<boolean> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = connect(Number(port || defaultPort), hostname.replace(/^\[|\]$/g, ''))
    const settle = (answered: boolean) => {
      socket.destroy()
      resolve(answered)
    }
    // Timers run before I/O in an event-loop turn: after the seconds a busy machine can take to
    // load the test's modules, the timeout would win over a connection made meanwhile. So the
    // timeout decides one phase later, after the I/O of its turn (a promise settles once)
    socket.on('connect', () => settle(true)).on('error', () => settle(false))
      .setTimeout(ms, () => setImmediate(() => settle(false)))
  })
}

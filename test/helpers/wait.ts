/** Waiting in tests: for a promise with a bound, or until a condition holds. */

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

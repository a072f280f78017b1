/**
 * The clock and the timers a module of state takes as a parameter, so that a unit test drives its
 * time (test/unit/changes-feed.test.ts) and production runs on Node's.
 */

/** A timer's handle: only the `Timers` that made it knows what it is. */
export type Timer = object

export interface Timers {
  /** Milliseconds since the epoch, as `Date.now()`. */
  now (): number
  setTimeout (callback: () => void, ms: number): Timer
  clearTimeout (timer: Timer | undefined): void
}

/** Node's clock and timers, each timer unref'ed: none of them keeps the process alive. */
export const nodeTimers: Timers = {
  now: () => Date.now(),
  setTimeout: (callback, ms) => setTimeout(callback, ms).unref(),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined)
}

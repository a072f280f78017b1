/**
 * The catch-up scheduler (src/catch-up-scheduler.ts) on a clock of the test's own, which the
 * slices' work moves on as real work would: slices bounded by SLICE_MS, taken in turn, all of
 * them within CATCH_UP_SHARE of the time, the event loop's other callbacks run between two, and
 * nothing left once closed. The feeds that use it: test/unit/changes-feed.test.ts; the bounds on
 * a real process: test/process/alone/feed-catch-up.test.ts.
 */
import t from 'tap'
import { BUSY_SHARE, BUSY_UTILIZATION, CATCH_UP_SHARE, CatchUpScheduler, IDLE_SHARE, SLICE_MS } from '../../src/catch-up-scheduler.js'
import type { Timer, Timers } from '../../src/timers.js'

/** A clock that work moves on, and timers that fire for real after the clock is moved to their time. */
class TestClock implements Timers {
  time = 0
  readonly timers = new Set<{ at: number, callback: () => void }>()

  now (): number {
    return this.time
  }

  setTimeout (callback: () => void, ms: number): Timer {
    const timer = { at: this.time + ms, callback }
    this.timers.add(timer)
    // Fires on the next turn of the event loop, at the clock's time it was set for
    setImmediate(() => {
      if (!this.timers.delete(timer)) return
      this.time = Math.max(this.time, timer.at)
      callback()
    })
    return timer
  }

  clearTimeout (timer: Timer | undefined) {
    if (timer !== undefined) this.timers.delete(timer as { at: number, callback: () => void })
  }
}

t.test('a slice runs until SLICE_MS have passed, then hands back; the next feed takes its turn', async (t) => {
  const clock = new TestClock()
  const scheduler = new CatchUpScheduler(clock, () => clock.now(), () => 0)
  const order: string[] = []
  /** A feed with `units` of work, each taking 0.5 ms, in slices; records each slice as `name:units`. */
  const feed = async (name: string, units: number) => {
    while (units > 0) {
      await scheduler.slice((more) => {
        let done = 0
        do {
          clock.time += 0.5
          done++
          units--
        } while (units > 0 && more())
        order.push(`${name}:${done}`)
      })
    }
  }
  await Promise.all([feed('a', 10), feed('b', 10), feed('c', 3)])
  const perSlice = SLICE_MS / 0.5
  t.strictSame(order, [
    `a:${perSlice}`, `b:${perSlice}`, 'c:3', `a:${perSlice}`, `b:${perSlice}`, `a:${10 - 2 * perSlice}`, `b:${10 - 2 * perSlice}`
  ], 'each slice stops at SLICE_MS; the feeds take turns in the order they asked')
})

/** Three feeds with 100 slices of work each on `scheduler`: the share of the time their slices took. */
async function shareTaken (clock: TestClock, scheduler: CatchUpScheduler): Promise<number> {
  let busy = 0
  const started = clock.time
  const feed = async () => {
    for (let i = 0; i < 100; i++) {
      await scheduler.slice((more) => {
        do {
          clock.time += 0.1
          busy += 0.1
        } while (more())
      })
    }
  }
  await Promise.all([feed(), feed(), feed()])
  return busy / (clock.time - started)
}

t.test('all the slices together take at most CATCH_UP_SHARE of the time; the event loop\'s time in them is not its being busy', async (t) => {
  const clock = new TestClock()
  const share = await shareTaken(clock, new CatchUpScheduler(clock, () => clock.now(), () => CATCH_UP_SHARE + BUSY_UTILIZATION - 0.05))
  t.ok(share <= CATCH_UP_SHARE + 0.01, `the slices took ${(100 * share).toFixed(1)}% of the time`)
  t.ok(share >= CATCH_UP_SHARE * 0.8, 'and nearly all of their share, when they have work')
})

t.test('while the event loop is busy besides the slices, BUSY_SHARE of the time at most', async (t) => {
  const clock = new TestClock()
  const share = await shareTaken(clock, new CatchUpScheduler(clock, () => clock.now(), () => 1))
  t.ok(share <= BUSY_SHARE + 0.01, `the slices took ${(100 * share).toFixed(1)}% of the time`)
  t.ok(share >= BUSY_SHARE * 0.8, 'and still nearly all of that, when they have work')
})

t.test('while no request comes, the slices take the time there is; once requests come, their share again', async (t) => {
  const clock = new TestClock()
  let requests = 0
  const idle = await shareTaken(clock, new CatchUpScheduler(clock, () => clock.now(), () => 0, () => requests))
  // The first look at the requests comes after UTILIZATION_WINDOW_MS at CATCH_UP_SHARE
  t.ok(idle >= 0.8 * IDLE_SHARE, `no request: the slices took ${(100 * idle).toFixed(1)}% of the time`)
  // A request every millisecond of the clock
  const scheduler = new CatchUpScheduler(clock, () => clock.now(), () => 0, () => (requests = Math.floor(clock.now())))
  const busy = await shareTaken(clock, scheduler)
  t.ok(busy <= CATCH_UP_SHARE + 0.02, `requests coming: the slices took ${(100 * busy).toFixed(1)}% of the time`)
})

t.test('what the event loop has to do runs between two slices', async (t) => {
  const clock = new TestClock()
  const scheduler = new CatchUpScheduler(clock, () => clock.now(), () => 0)
  const order: string[] = []
  const first = scheduler.slice(() => {
    order.push('slice 1')
    // As a request that arrives during a slice: its callback is due once the slice hands back
    setImmediate(() => order.push('request'))
  })
  const second = scheduler.slice(() => { order.push('slice 2') })
  await Promise.all([first, second])
  t.strictSame(order, ['slice 1', 'request', 'slice 2'])
})

t.test('a slice whose work throws rejects its caller alone', async (t) => {
  const clock = new TestClock()
  const scheduler = new CatchUpScheduler(clock, () => clock.now(), () => 0)
  const failing = scheduler.slice(() => { throw new Error('broken') })
  const next = scheduler.slice(() => {})
  await t.rejects(failing, /broken/)
  await t.resolves(next, 'the next slice still runs')
})

t.test('close: the slices waiting resolve without running, no timer is left, later ones never run', async (t) => {
  const clock = new TestClock()
  const scheduler = new CatchUpScheduler(clock, () => clock.now(), () => 0)
  const ran: number[] = []
  // Spends the credit: the next slice waits for a timer
  await scheduler.slice(() => { clock.time += 10 * SLICE_MS })
  const waiting = [1, 2].map((n) => scheduler.slice(() => { ran.push(n) }))
  t.equal(clock.timers.size, 1, 'the next slice waits for its share')
  scheduler.close()
  await Promise.all(waiting)
  await scheduler.slice(() => { ran.push(3) })
  t.strictSame(ran, [], 'none ran')
  t.equal(clock.timers.size, 0, 'no timer left')
})

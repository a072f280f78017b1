/**
 * The feed of changes (src/changes-feed.ts, with src/changes-subscription.ts for each client's
 * feed) on a change log in memory, its time moved by the test: polling, fan-out, catch-up from
 * memory and from the log, resets, keep-alives, the token's expiry, a failing log, a client that
 * stops reading, pruning, close, the spans of its polls. The same feed on a real database and real sockets:
 * test/app/changes.test.ts.
 */
import type { Readable } from 'node:stream'
import { PassThrough } from 'node:stream'
import t, { type Test } from 'tap'
import { changeIds, type Change, type ChangeLog } from '../../src/changes.js'
import {
  CHANGES_KEPT_COUNT, CHANGES_KEPT_HOURS, ChangesFeed, KEEP_ALIVE_MS, PLACE_BATCH, POLL_BATCH, POLL_MS, POLL_RETRY_MS
} from '../../src/changes-feed.js'
import { CATCH_UP_PAGE, MAX_PENDING_BYTES, type QueryLimiter } from '../../src/changes-subscription.js'
import { CatchUpScheduler } from '../../src/catch-up-scheduler.js'
import type { Timer, Timers } from '../../src/timers.js'
import type { Tracing } from '../../src/tracing.js'

const ids = changeIds('a secret of the tests, long enough for any key')

/**
 * Lets every promise, stream event and callback that is due run, as the event loop would: a few
 * turns of it, since each slice of a catch-up runs from a turn of its own (src/catch-up-scheduler.ts).
 */
async function settle () {
  for (let turn = 0; turn < 20; turn++) await new Promise<void>((resolve) => setImmediate(resolve))
}

/** A clock that moves only when the test says, running each timer as its time comes. */
class ManualTimers implements Timers {
  private time = 1_700_000_000_000
  private added = 0
  private readonly timers = new Map<Timer, { at: number, added: number, callback: () => void }>()

  now (): number {
    return this.time
  }

  setTimeout (callback: () => void, ms: number): Timer {
    const timer = {}
    this.timers.set(timer, { at: this.time + ms, added: this.added++, callback })
    return timer
  }

  clearTimeout (timer: Timer | undefined) {
    if (timer !== undefined) this.timers.delete(timer)
  }

  /** The timers set and not yet run or cleared. */
  get scheduled (): number {
    return this.timers.size
  }

  /** Moves the clock `ms` on, running the timers due on the way (those they set too) in order. */
  async advance (ms: number) {
    const end = this.time + ms
    for (;;) {
      await settle()
      const due = [...this.timers].filter(([, entry]) => entry.at <= end)
      if (due.length === 0) break
      const [timer, next] = due.reduce((a, b) => a[1].at < b[1].at || (a[1].at === b[1].at && a[1].added < b[1].added) ? a : b)
      this.timers.delete(timer)
      this.time = next.at
      next.callback()
    }
    this.time = end
    await settle()
  }
}

/**
 * The change log as the repository keeps it: changes written, placed (given positions) by a read
 * or a placement, pruned. `failing` makes reads throw; `hold` makes the next read wait.
 */
class MemoryLog implements ChangeLog {
  kept: Array<Change & { at: number }> = []
  private unplaced: Array<{ kind: Change['kind'], book: string, at: number }> = []
  private lastPosition = 0
  private books = 0
  failing = false
  reads = 0
  /** The placements and prunes asked for, in order. */
  readonly calls: string[] = []
  private held: Promise<void> | null = null
  private keptHeld: Promise<void> | null = null

  constructor (private readonly timers: Timers) {}

  write (count: number, book = (id: number) => JSON.stringify({ id })) {
    for (let i = 0; i < count; i++) this.unplaced.push({ kind: 'created', book: book(++this.books), at: this.timers.now() })
  }

  /** The next read waits until the answer is called. */
  hold (): () => void {
    let release!: () => void
    this.held = new Promise((resolve) => { release = resolve })
    return release
  }

  /** The next `changesKept` waits until the answer is called. */
  holdKept (): () => void {
    let release!: () => void
    this.keptHeld = new Promise((resolve) => { release = resolve })
    return release
  }

  /** What another instance's prune, or a restored backup, leaves: the changes from `first` to `last`. */
  keepOnly (first: number, last = this.lastPosition) {
    this.kept = this.kept.filter((change) => change.position >= first && change.position <= last)
    this.lastPosition = last
  }

  private place (limit: number): number {
    const placing = this.unplaced.splice(0, limit)
    for (const change of placing) this.kept.push({ position: ++this.lastPosition, ...change })
    return placing.length
  }

  private after (position: number, limit: number): Change[] {
    return this.kept.filter((change) => change.position > position).slice(0, limit).map(({ position, kind, book }) => ({ position, kind, book }))
  }

  async readChanges (position: number, limit: number) {
    this.reads++
    const held = this.held
    this.held = null
    await held
    if (this.failing) throw new Error('the database is down')
    this.place(limit)
    return { changes: this.after(position, limit), last: this.kept.at(-1)?.position ?? 0 }
  }

  async changesAfter (position: number, limit: number) {
    return this.after(position, limit)
  }

  async changesKept () {
    const held = this.keptHeld
    this.keptHeld = null
    await held
    if (this.failing) throw new Error('the database is down')
    return { first: this.kept[0]?.position ?? 0, last: this.kept.at(-1)?.position ?? 0 }
  }

  async placeChanges (limit: number) {
    const placed = this.place(limit)
    this.calls.push(`place ${limit}: ${placed}`)
    return placed
  }

  async pruneChanges (keepSeconds: number, keepCount: number, limit: number) {
    const old = this.kept.slice(0, Math.max(0, this.kept.length - keepCount)).filter((change) => change.at < this.timers.now() - keepSeconds * 1000)
    const removed = old.slice(0, limit).length
    this.kept = this.kept.slice(removed)
    this.calls.push(`prune ${keepSeconds} ${keepCount} ${limit}: ${removed}`)
    return removed
  }
}

/** What a client reads of its feed: each event as `kind position`, `start position`, `keep-alive`. */
function reader (stream: Readable) {
  let text = ''
  let ended = false
  const read = (chunk: Buffer) => { text += chunk.toString() }
  stream.on('end', () => { ended = true })
  stream.on('data', read)
  const position = (id: string) => ids.decode(id)
  return {
    get ended () { return ended },
    get events (): string[] {
      return text.split('\n\n').filter((block) => block !== '').map((block) => {
        if (block.startsWith(':')) return block.slice(2)
        const fields = Object.fromEntries(block.split('\n').map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 2)]))
        if (fields.retry !== undefined) return `start ${position(fields.id!)}`
        return fields.id === undefined ? fields.event! : `${fields.event} ${position(fields.id)}`
      })
    },
    /** The positions of its changes, in the order received. */
    get changes (): number[] {
      return this.events.filter((line) => line.startsWith('created')).map((line) => Number(line.split(' ')[1]))
    },
    /** Stops reading, as a client that takes nothing more. */
    pause () { stream.off('data', read); stream.pause() }
  }
}

/** A limiter whose queries each wait until the test runs them: `pages.shift()!()`. */
function heldQueries () {
  const pages: Array<() => void> = []
  const catchUpQueries: QueryLimiter = (fn) => new Promise((resolve, reject) => { pages.push(() => { Promise.resolve(fn()).then(resolve, reject) }) })
  return { pages, catchUpQueries }
}

const positions = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i)

/** A feed on a log in memory, with its clock, its log lines and its gauge; closed as the test ends. */
function feedOf (t: Test, { catchUpQueries = async (fn) => await fn(), sliceClock = false }: { catchUpQueries?: QueryLimiter, sliceClock?: boolean } = {}) {
  const timers = new ManualTimers()
  const changeLog = new MemoryLog(timers)
  const lines: string[] = []
  const line = (level: string) => (obj: unknown, msg?: string) => { lines.push(`${level} ${typeof obj === 'string' ? obj : msg}`) }
  const gauge: number[] = []
  let sliceTime = 0
  const feed = new ChangesFeed({
    changeLog,
    ids,
    catchUpQueries,
    // On the test's clock, which stands still during a slice: each slice sends a whole page. With
    // `sliceClock`, a clock that each look moves on: each slice ends after a few dozen changes
    catchUpScheduler: new CatchUpScheduler(timers, sliceClock ? () => (sliceTime += 0.05) : () => timers.now(), () => 0),
    timers,
    log: { info: line('info'), warn: line('warn') },
    subscribers: { set: (value) => { gauge.push(value) } }
  })
  t.teardown(() => feed.close())
  /** A feed opened for a token that expires in an hour, read by its client. */
  const open = async (after?: number, expiresAt = timers.now() + 3_600_000) => {
    const stream = await feed.open(after, expiresAt, new PassThrough())
    const client = reader(stream)
    await settle()
    return Object.assign(client, { stream })
  }
  return { feed, timers, changeLog, lines, gauge, open }
}

t.test('a change reaches a feed at the next poll, in order; a full poll is followed by the next at once', async (t) => {
  const { timers, changeLog, open } = feedOf(t)
  changeLog.write(2)
  await timers.advance(10 * POLL_MS)
  t.equal(changeLog.reads, 0, 'no feed, no reads')
  const client = await open()
  t.strictSame(client.events, ['start 2'], 'a new feed starts where the log ends')
  changeLog.write(3)
  await timers.advance(POLL_MS - 1)
  t.strictSame(client.changes, [], 'nothing before the poll')
  await timers.advance(1)
  t.strictSame(client.changes, [3, 4, 5], 'the changes at the poll, in order')
  changeLog.write(POLL_BATCH + 10)
  await timers.advance(POLL_MS)
  t.strictSame(client.changes, positions(3, 5 + POLL_BATCH + 10), 'a full poll, and the rest read at once')
})

t.test('every feed gets every change; the reader stops with the last feed', async (t) => {
  const { timers, changeLog, gauge, open } = feedOf(t)
  const clients = [await open(), await open(), await open()]
  t.equal(gauge.at(-1), 3, 'three feeds open')
  changeLog.write(2)
  await timers.advance(POLL_MS)
  for (const client of clients) t.strictSame(client.events, ['start 0', 'created 1', 'created 2'])
  clients[0]!.stream.destroy()
  t.equal(gauge.at(-1), 2, 'a client gone is a feed less')
  changeLog.write(1)
  await timers.advance(POLL_MS)
  t.strictSame(clients.slice(1).map((client) => client.changes), [[1, 2, 3], [1, 2, 3]], 'the others go on')
  clients[1]!.stream.destroy()
  clients[2]!.stream.destroy()
  t.equal(gauge.at(-1), 0)
  await timers.advance(POLL_MS)
  const reads = changeLog.reads
  await timers.advance(10 * POLL_MS)
  t.equal(changeLog.reads, reads, 'no feed left: no reads')
  t.equal(timers.scheduled, 1, 'only the keep-alive timer is left')
})

t.test('a feed that resumes from memory catches up, then goes on live, missing nothing and nothing twice', async (t) => {
  let catchUps = 0
  const { timers, changeLog, open } = feedOf(t, { catchUpQueries: async (fn) => { catchUps++; return await fn() } })
  const first = await open()
  changeLog.write(5)
  await timers.advance(POLL_MS)
  t.strictSame(first.changes, [1, 2, 3, 4, 5])
  const resumed = await open(2)
  t.strictSame(resumed.events, ['start 2', 'created 3', 'created 4', 'created 5'], 'what it missed, at once')
  changeLog.write(2)
  await timers.advance(POLL_MS)
  t.strictSame(resumed.changes, [3, 4, 5, 6, 7], 'then the live changes')
  t.equal(catchUps, 0, 'no query')
})

t.test('a feed that resumes from the log catches up a page at a time while the feed goes on, then from memory, then live', async (t) => {
  const { pages, catchUpQueries } = heldQueries()
  const { timers, changeLog, open } = feedOf(t, { catchUpQueries })
  changeLog.write(1000)
  await changeLog.placeChanges(PLACE_BATCH)
  const live = await open()
  const resumed = await open(100)
  t.strictSame(resumed.events, ['start 100'], 'waiting for its turn to read the log')
  changeLog.write(600)
  await timers.advance(POLL_MS)
  t.strictSame(live.changes, positions(1001, 1600), 'the feed goes on meanwhile')
  t.strictSame(resumed.changes, [], 'not to a feed catching up')
  pages.shift()!()
  await settle()
  t.strictSame(resumed.changes, positions(101, 100 + CATCH_UP_PAGE), 'a page from the log')
  changeLog.write(5)
  await timers.advance(POLL_MS)
  t.equal(pages.length, 1, 'the next page waits for its turn')
  pages.shift()!()
  await settle()
  t.strictSame(resumed.changes, positions(101, 1605), 'another page from the log, then the rest from memory')
  t.equal(pages.length, 0, 'two pages read from the log')
  changeLog.write(2)
  await timers.advance(POLL_MS)
  t.strictSame(resumed.changes, positions(101, 1607), 'then live: every change once, in order')
  t.strictSame(live.changes, positions(1001, 1607))
})

t.test('feeds catching up in slices that end mid-page, while changes come and polls run, receive each change once, in order', async (t) => {
  const { timers, changeLog, open } = feedOf(t, { sliceClock: true })
  changeLog.write(3 * CATCH_UP_PAGE + 7)
  await changeLog.placeChanges(PLACE_BATCH)
  const live = await open()
  const clients = [await open(0), await open(CATCH_UP_PAGE + 3)]
  for (let round = 0; round < 400 && clients.some((client) => client.changes.at(-1) !== live.changes.at(-1)); round++) {
    if (round < 50) changeLog.write(7)
    await timers.advance(POLL_MS)
  }
  const last = 3 * CATCH_UP_PAGE + 7 + 50 * 7
  t.equal(live.changes.at(-1), last, 'the live feed has every change')
  t.strictSame(clients[0]!.changes, positions(1, last), 'from the start: every change once, in order')
  t.strictSame(clients[1]!.changes, positions(CATCH_UP_PAGE + 4, last), 'from the middle of a page too')
})

t.test('a feed that resumes from the log as the last other feed ends is read for: the reader keeps running for a feed that is opening', async (t) => {
  const { feed, timers, changeLog, open } = feedOf(t)
  changeLog.write(3)
  await changeLog.placeChanges(PLACE_BATCH)
  const leaving = await open()
  t.strictSame(leaving.events, ['start 3'])
  // While the log says what it keeps for the resuming feed, the other ends and a poll comes
  const answer = changeLog.holdKept()
  const opening = feed.open(1, timers.now() + 3_600_000, new PassThrough())
  await settle()
  leaving.stream.destroy()
  await timers.advance(POLL_MS)
  answer()
  const resumed = reader(await opening)
  await settle()
  changeLog.write(1)
  await timers.advance(POLL_MS)
  t.strictSame(resumed.events, ['start 1', 'created 2', 'created 3', 'created 4'], 'what it missed, then the next change')
})

t.test('a feed that resumes from an id past what the log keeps gets `reset`, then goes on live', async (t) => {
  const { timers, changeLog, open } = feedOf(t)
  changeLog.write(10)
  await changeLog.placeChanges(PLACE_BATCH)
  changeLog.keepOnly(6)
  const older = await open(4)
  t.strictSame(older.events, ['start 10', 'reset 10'], 'change 5 is gone: reset, and the feed goes on after the last')
  const beyond = await open(50)
  t.strictSame(beyond.events, ['start 10', 'reset 10'], 'an id beyond the log (a restored backup): reset too')
  const fine = await open(5)
  t.strictSame(fine.events, ['start 5', 'created 6', 'created 7', 'created 8', 'created 9', 'created 10'], 'the change before the first kept: nothing is gone')
  changeLog.write(1)
  await timers.advance(POLL_MS)
  for (const client of [older, beyond, fine]) t.equal(client.events.at(-1), 'created 11')
})

t.test('a feed whose next changes are pruned as it catches up gets `reset`', async (t) => {
  const { pages, catchUpQueries } = heldQueries()
  const { changeLog, open } = feedOf(t, { catchUpQueries })
  changeLog.write(10)
  await changeLog.placeChanges(PLACE_BATCH)
  const client = await open(0)
  changeLog.keepOnly(9)
  pages.shift()!()
  await settle()
  t.strictSame(client.events, ['start 0', 'reset 10'], 'reset, with the id it goes on after')
})

t.test('a log that lost changes the feed sent, or pruned changes it had not: every feed is reset', async (t) => {
  const { timers, changeLog, lines, open } = feedOf(t)
  const client = await open()
  changeLog.write(10)
  await timers.advance(POLL_MS)
  changeLog.keepOnly(1, 7)
  await timers.advance(POLL_MS)
  t.strictSame(client.events.slice(-1), ['reset 7'], 'restored to 7: reset, goes on after 7')
  t.match(lines.at(-1), /^warn the change log ends before the last change this instance sent/)
  changeLog.write(1)
  await timers.advance(POLL_MS)
  t.strictSame(client.events.at(-1), 'created 8', 'then the changes after it')

  changeLog.write(5)
  await changeLog.placeChanges(PLACE_BATCH)
  changeLog.keepOnly(11)
  await timers.advance(POLL_MS)
  t.strictSame(client.events.at(-1), 'reset 10', 'changes 9 and 10 pruned before it read them: reset, going on after 10')
  t.match(lines.at(-1), /^warn changes this instance had not sent were pruned: every feed is reset/)
  const warnings = lines.length
  await timers.advance(POLL_MS)
  t.strictSame(client.events.slice(-4), ['reset 10', 'created 11', 'created 12', 'created 13'], 'then the oldest change kept and the rest, once each')
  changeLog.write(1)
  await timers.advance(10 * POLL_MS)
  t.strictSame(client.events.slice(-2), ['created 13', 'created 14'], 'and on, live, with no reset again')
  t.equal(lines.length, warnings, 'warned once')
})

t.test('a keep-alive comment every KEEP_ALIVE_MS on every feed', async (t) => {
  const { timers, open } = feedOf(t)
  const clients = [await open(), await open()]
  await timers.advance(KEEP_ALIVE_MS - 1)
  t.strictSame(clients[0]!.events, ['start 0'], 'none before')
  await timers.advance(1)
  for (const client of clients) t.strictSame(client.events, ['start 0', 'keep-alive'])
  await timers.advance(KEEP_ALIVE_MS)
  for (const client of clients) t.strictSame(client.events, ['start 0', 'keep-alive', 'keep-alive'])
})

t.test('a feed ends with `token-expired` as its token expires', async (t) => {
  const { timers, gauge, open } = feedOf(t)
  const client = await open(undefined, timers.now() + 3000)
  await timers.advance(2999)
  t.notOk(client.ended, 'open until the expiry')
  await timers.advance(1)
  t.strictSame(client.events, ['start 0', 'token-expired'], '`token-expired`, without an id')
  t.ok(client.ended, 'then the end')
  t.equal(gauge.at(-1), 0)
  const expired = await open(undefined, timers.now() - 1)
  await timers.advance(0)
  t.ok(expired.ended, 'a token already expired ends its feed at once')
})

t.test('a failing log: the poll tried every POLL_RETRY_MS, logged once, the feed kept open', async (t) => {
  const { timers, changeLog, lines, gauge, open } = feedOf(t)
  changeLog.failing = true
  await t.rejects(open(), /the database is down/, 'a feed that cannot learn where to start is refused')
  t.strictSame(gauge, [], 'and never counted')
  changeLog.failing = false
  const client = await open()
  changeLog.failing = true
  const reads = changeLog.reads
  await timers.advance(POLL_MS)
  t.equal(changeLog.reads, reads + 1)
  t.strictSame(lines, ['warn reading the change log failed; feeds wait and it is tried again'])
  await timers.advance(POLL_RETRY_MS - 1)
  t.equal(changeLog.reads, reads + 1, 'not before POLL_RETRY_MS')
  await timers.advance(1)
  t.equal(changeLog.reads, reads + 2, 'again after POLL_RETRY_MS')
  t.equal(lines.length, 1, 'logged once')
  changeLog.failing = false
  changeLog.write(2)
  await timers.advance(POLL_RETRY_MS)
  t.strictSame(client.changes, [1, 2], 'what committed meanwhile')
  t.strictSame(lines.at(-1), 'info reading the change log again')
  await timers.advance(POLL_MS)
  t.equal(changeLog.reads, reads + 4, 'every POLL_MS again')
  t.notOk(client.ended)
})

t.test('a client that takes too little gets `reset` and its feed ends; the others go on', async (t) => {
  const { timers, changeLog, lines, gauge, open } = feedOf(t)
  const slow = await open()
  const fast = await open()
  slow.pause()
  // Far beyond MAX_PENDING_BYTES in one poll
  const book = (id: number) => JSON.stringify({ id, title: 'x'.repeat(1000) })
  changeLog.write(POLL_BATCH + 10, book)
  t.ok(POLL_BATCH * 1000 > 2 * MAX_PENDING_BYTES)
  await timers.advance(POLL_MS)
  t.equal(fast.changes.length, POLL_BATCH, 'a full poll')
  await timers.advance(POLL_MS - 1)
  t.equal(fast.changes.length, POLL_BATCH, 'the next after POLL_MS, not at once: a client has not taken it')
  await timers.advance(1)
  t.equal(fast.changes.length, POLL_BATCH + 10, 'the rest')
  t.equal(gauge.at(-1), 1, 'the slow one ended')
  t.strictSame(lines, ['info a feed\'s client took too little of it: sent reset and ended'])
  const left = reader(slow.stream)
  slow.stream.resume()
  await settle()
  t.equal(left.events.at(-1), `reset ${POLL_BATCH + 10}`, 'its last event: reset, with the id of the last change')
  t.ok(left.ended)
})

t.test('a prune places the changes first, then removes what is past the retention', async (t) => {
  const { feed, changeLog } = feedOf(t)
  changeLog.write(2 * PLACE_BATCH + 5)
  t.equal(await feed.pruneBatch(1000), 0, 'fewer than CHANGES_KEPT_COUNT: none removed')
  t.strictSame(changeLog.calls, [
    `place ${PLACE_BATCH}: ${PLACE_BATCH}`, `place ${PLACE_BATCH}: ${PLACE_BATCH}`, `place ${PLACE_BATCH}: 5`,
    `prune ${CHANGES_KEPT_HOURS * 3600} ${CHANGES_KEPT_COUNT} 1000: 0`
  ], 'placed in batches until one is not full, then pruned, keeping CHANGES_KEPT_HOURS and CHANGES_KEPT_COUNT')
})

t.test('close ends every feed, stops the reader and every timer, and waits for a poll under way', async (t) => {
  const { pages, catchUpQueries } = heldQueries()
  const { feed, timers, changeLog, open } = feedOf(t, { catchUpQueries })
  changeLog.write(10)
  await changeLog.placeChanges(PLACE_BATCH)
  const live = await open()
  const catchingUp = await open(0)
  const release = changeLog.hold()
  await timers.advance(POLL_MS)
  let closed = false
  const closing = feed.close().then(() => { closed = true })
  t.ok(feed.closing(), 'new feeds refused')
  await settle()
  t.ok(live.ended && catchingUp.ended, 'every feed ended')
  t.notOk(closed, 'waits for the poll under way')
  release()
  await closing
  pages.shift()?.()
  t.equal(timers.scheduled, 0, 'no timer left')
  const reads = changeLog.reads
  await timers.advance(10 * KEEP_ALIVE_MS)
  t.equal(changeLog.reads, reads, 'no reads after')
})

t.test('endFeeds, as the close begins: every feed ends, new ones refused, the timers kept until close', async (t) => {
  const { feed, timers, open } = feedOf(t)
  const client = await open()
  t.notOk(feed.closing())
  feed.endFeeds()
  await settle()
  t.ok(feed.closing())
  t.ok(client.ended)
  t.strictSame(client.events, ['start 0'], 'no event: the client resumes after the last it had')
  t.equal(timers.scheduled, 2, 'the reader\'s and the keep-alives\' timers, until close')
  await feed.close()
  t.equal(timers.scheduled, 0)
})

t.test('with tracing, each poll in a span `changes poll`: the one that starts the reader where the feed opens, the later ones in traces of their own', async (t) => {
  const timers = new ManualTimers()
  const changeLog = new MemoryLog(timers)
  const polls: Array<{ parent: unknown, reads: number }> = []
  const tracing: Tracing = {
    current: () => undefined,
    async inSpan (name, { parent }, work) {
      t.equal(name, 'changes poll')
      const readsBefore = changeLog.reads
      const result = await work()
      polls.push({ parent, reads: changeLog.reads - readsBefore })
      return result
    }
  }
  const feed = new ChangesFeed({
    changeLog, ids, catchUpQueries: async (fn) => await fn(), catchUpScheduler: new CatchUpScheduler(timers, () => timers.now(), () => 0), timers, log: { info () {}, warn () {} }, subscribers: { set () {} }, tracing
  })
  t.teardown(() => feed.close())
  reader(await feed.open(undefined, timers.now() + 3_600_000, new PassThrough()))
  t.strictSame(polls, [{ parent: undefined, reads: 1 }], 'the first poll: within the request that opened the feed')
  changeLog.write(1)
  await timers.advance(2 * POLL_MS)
  t.strictSame(polls.slice(1), [{ parent: null, reads: 1 }, { parent: null, reads: 1 }], 'each later poll: a span with no parent, around its read')
})

/**
 * A long listing streamed page by page (src/listing-stream.ts), over a page source in memory:
 * every book once and in order, pages that grow while the client waits for them and only then,
 * and the budget their growth shares, given back when a listing ends or its client leaves. That
 * a thousand stalled listings stay under 400 MiB with it, and not without it, on the real
 * service: test/process/alone/stalled-listings.test.ts.
 */
import type { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Position } from '../../src/listing.js'
import { PageBudget, STREAM_PAGE, STREAM_PAGE_MAX, listingStream, type ListingPage } from '../../src/listing-stream.js'

const FIRST_LIMIT = 1001

/**
 * Books 1..count (`ids`, which a test may change), each page read at once and answered after
 * `delayMs`, as a query reads its snapshot when it starts; the limits asked for, in order, and
 * how many reads were in flight at most.
 */
function books (count: number, delayMs: number, { ahead = false, connectionFree = (): boolean => true } = {}) {
  const ids = Array.from({ length: count }, (_, i) => i + 1)
  const limits: number[] = []
  const signals: AbortSignal[] = []
  let inFlight = 0
  let mostInFlight = 0
  let readsAhead = 0
  const page = (after: number, limit: number): ListingPage => {
    const listed = ids.filter((id) => id > after).slice(0, limit)
    const last = listed.at(-1)
    return { count: listed.length, text: listed.join(','), last: last === undefined ? null : { key: null, id: String(last), snapshot: null } }
  }
  const answer = async <T>(value: T, signal: AbortSignal): Promise<T> => {
    signals.push(signal)
    mostInFlight = Math.max(mostInFlight, ++inFlight)
    await sleep(delayMs)
    inFlight--
    return value
  }
  const readPage = (after: Position, limit: number, signal: AbortSignal) => {
    limits.push(limit)
    return answer(page(Number(after.id), limit), signal)
  }
  // A read ahead goes on another connection: its snapshot comes a moment after the next page's
  const readBeyond = async (after: Position, skip: number, limit: number, signal: AbortSignal) => {
    limits.push(limit)
    readsAhead++
    await sleep(1)
    const boundary = ids.filter((id) => id > Number(after.id))[skip - 1]
    return answer(boundary === undefined
      ? { count: 0, text: '', last: null, after: null }
      : { ...page(boundary, limit), after: String(boundary) }, signal)
  }
  const stream = (budget: PageBudget) => {
    const first = page(0, FIRST_LIMIT)
    return listingStream(`[${first.text}`, first, FIRST_LIMIT, readPage, { budget, connectionFree, readBeyond: ahead ? readBeyond : undefined })
  }
  return { ids, limits, signals, stream, mostInFlight: () => mostInFlight, readsAhead: () => readsAhead }
}

/** The ids a stream sent, read `pauseMs` apart (0: as fast as they come). */
async function idsOf (stream: Readable, pauseMs = 0): Promise<number[]> {
  let text = ''
  for await (const chunk of stream) {
    text += String(chunk)
    if (pauseMs > 0) await sleep(pauseMs)
  }
  return JSON.parse(`${text.slice(0, -2)}]`) as number[]
}

/** Reads `count` pieces as they come, then stops: leaving the loop destroys the stream. */
async function readChunks (stream: Readable, count: number) {
  let chunks = 0
  for await (const chunk of stream) if (String(chunk) !== '' && ++chunks === count) break
}

t.test('a client that waits for each page gets every book once, in pages that double up to the largest', async (t) => {
  const budget = new PageBudget(1_000_000)
  const { limits, stream } = books(60_000, 2)
  const ids = await idsOf(stream(budget))
  t.equal(ids.length, 60_000, 'every book')
  t.ok(ids.every((id, i) => id === i + 1), 'each once, in order')
  t.strictSame(limits.slice(0, 6), [STREAM_PAGE, 2 * STREAM_PAGE, 4 * STREAM_PAGE, 8 * STREAM_PAGE, 16 * STREAM_PAGE, STREAM_PAGE_MAX],
    'the pages double up to the largest')
  t.ok(limits.slice(5).every((limit) => limit === STREAM_PAGE_MAX), 'and stay there')
  t.equal(budget.free, budget.rows, 'the budget is whole again at the end')
})

t.test('with reads ahead, a client that waits gets every book once, two pages read at a time', async (t) => {
  const budget = new PageBudget(1_000_000)
  const listing = books(60_000, 2, { ahead: true })
  const ids = await idsOf(listing.stream(budget))
  t.equal(ids.length, 60_000, 'every book')
  t.ok(ids.every((id, i) => id === i + 1), 'each once, in order')
  t.equal(listing.mostInFlight(), 2, 'two pages read at a time')
  t.ok(listing.readsAhead() > 5, `most pages read ahead (${listing.readsAhead()})`)
  t.ok(listing.limits.every((limit) => limit <= STREAM_PAGE_MAX), 'no page beyond the largest')
  t.equal(budget.free, budget.rows, 'the budget is whole again at the end')
})

t.test('while no connection is free for listings, pages keep the first size and none is read ahead', async (t) => {
  const budget = new PageBudget(1_000_000)
  let free = true
  const listing = books(60_000, 2, { ahead: true, connectionFree: () => free })
  const stream = listing.stream(budget)
  let chunks = 0
  for await (const chunk of stream) {
    // Busy from the fifth piece on: what was asked for before may still be big
    if (String(chunk) !== '' && ++chunks === 5) free = false
  }
  const asked = listing.limits.length
  const later = listing.limits.slice(8)
  t.ok(later.length > 50 && later.every((limit) => limit === STREAM_PAGE), `then every page of ${STREAM_PAGE} (${asked} pages)`)
  const readsAhead = listing.readsAhead()
  t.ok(readsAhead <= 5, `no page read ahead any more (${readsAhead} before)`)
  t.equal(budget.free, budget.rows, 'the budget is whole again at the end')
})

t.test('a page read ahead that does not start right after the page before is read again', async (t) => {
  const budget = new PageBudget(1_000_000)
  const listing = books(60_000, 5, { ahead: true })
  const stream = listing.stream(budget)
  let text = ''
  let removed = 0
  let added = 0
  for await (const chunk of stream) {
    text += String(chunk)
    // Between pages, once pages are read ahead: a book taken out of the next page after it was
    // read and before the page beyond it was, and later one put in the same way
    if (listing.readsAhead() > 0 && removed === 0) {
      const sent = Math.max(...text.split(/[^0-9]+/).filter(Boolean).map(Number))
      removed = sent + 10
      listing.ids.splice(listing.ids.indexOf(removed), 1)
    } else if (removed !== 0 && added === 0 && listing.readsAhead() > 3) {
      const sent = Math.max(...text.split(/[^0-9]+/).filter(Boolean).map(Number))
      added = sent + 0.5
      listing.ids.splice(listing.ids.indexOf(sent + 1), 0, added)
    }
  }
  const ids = JSON.parse(`${text.slice(0, -2)}]`) as number[]
  t.ok(removed > 0 && added > 0, `a book removed (${removed}) and one added (${added}) while it was read`)
  t.ok(ids.every((id, i) => i === 0 || id > ids[i - 1]!), 'in order, none twice')
  const throughout = Array.from({ length: 60_000 }, (_, i) => i + 1).filter((id) => id !== removed)
  const listed = new Set(ids)
  t.ok(throughout.every((id) => listed.has(id)), 'every book there all along is listed')
  t.equal(budget.free, budget.rows, 'the budget is whole again at the end')
})

t.test('a client slower than the pages gets pages of the first size', async (t) => {
  const budget = new PageBudget(1_000_000)
  const { limits, stream } = books(5000, 0)
  const ids = await idsOf(stream(budget), 15)
  t.equal(ids.length, 5000, 'every book')
  // The stream reads one piece ahead of the client: the page after the first is asked for
  // before the client fell behind, as a socket's buffer takes the first pieces at once
  t.ok(limits.slice(2).every((limit) => limit === STREAM_PAGE), `then every page of ${STREAM_PAGE} (${limits.join(', ')})`)
  t.equal(budget.free, budget.rows, 'the budget is whole again at the end')
})

t.test('the growth of every listing comes out of one budget, given back as pages go out or listings end', async (t) => {
  const budget = new PageBudget(3 * STREAM_PAGE)
  const listings = [books(100_000, 2), books(100_000, 2)]
  const streams = listings.map(({ stream }) => stream(budget))
  // Both read a while as fast as they can, then stop reading
  for (const stream of streams) {
    await readChunks(stream, 8)
  }
  const asked = listings.flatMap(({ limits }) => limits)
  t.ok(asked.every((limit) => limit <= STREAM_PAGE + budget.rows), 'no page beyond what the budget had')
  t.ok(asked.some((limit) => limit > STREAM_PAGE), 'some pages grew')
  t.ok(budget.free >= 0 && budget.free <= budget.rows, `the budget is never overdrawn (${budget.free} of ${budget.rows} free)`)
  // `break` destroyed both: what they held is back, and their page reads are told to stop
  t.ok(streams.every((stream) => stream.destroyed), 'both ended')
  t.equal(budget.free, budget.rows, 'the budget is whole again once they ended')
  t.ok(listings.every(({ signals }) => signals.every((signal) => signal.aborted)), 'their page reads were aborted')
})

t.test('a listing that ended early gives back what its page in flight held', async (t) => {
  const budget = new PageBudget(1_000_000)
  const { limits, stream } = books(100_000, 20)
  const listing = stream(budget)
  await readChunks(listing, 4)
  t.ok(limits.at(-1)! > STREAM_PAGE, 'a grown page was in flight')
  t.equal(budget.free, budget.rows, 'given back at once')
  await sleep(40)
  t.equal(budget.free, budget.rows, 'and still whole once the page came')
})

/**
 * A listing too long to hold, streamed page by page as its client reads (routes/listing.ts,
 * `GET /books`), and the budget of rows its growing pages share.
 */
import { Readable } from 'node:stream'
import type { Position } from './listing.js'
import { NO_TRACING, type Tracing } from './tracing.js'

/**
 * Books per query while streaming, at first. A stalled listing holds two pages (below), so this
 * size decides what a thousand stalled listings hold: with it the process stays under the bound
 * of test/process/alone/stalled-listings.test.ts, with twice as many it does not
 * (docs/performance.md, Clients that stop reading).
 */
export const STREAM_PAGE = 500
/**
 * A listing whose client takes each page before the next one is read doubles its pages up to
 * this, and reads one page ahead: fewer queries, each with a round trip and a transaction, and
 * two at a time, for the same books. What pages hold beyond STREAM_PAGE comes from a budget of
 * GROWN_PAGE_ROWS that all listings of the app share (`PageBudget`, below), about 20 MB of JSON
 * for short titles, so stalled listings stay bounded whatever their pages were before they stalled.
 */
export const STREAM_PAGE_MAX = 8000
export const GROWN_PAGE_ROWS = 250_000

/**
 * A page of a listing: its books as the listing's format writes them (comma-separated Book JSON
 * for the envelope, or lines of CSV or NDJSON; the UTF-8 bytes where they came as bytes, as COPY's
 * CSV does), their count, where it ended.
 */
export interface ListingPage {
  count: number
  last: Position | null
  text: string | Buffer
}

/** How the pages of a listing's answer join: what comes before each page after the first, what ends the answer. */
export interface PageJoins {
  between: string
  end: string
}
/** The envelope's `data` array: pages of comma-separated objects, closed by the array and the envelope. */
export const ENVELOPE_JOINS: PageJoins = { between: ',', end: ']}' }
/** Lines (CSV, NDJSON): each page ends its last line itself; nothing closes the answer. */
export const LINE_JOINS: PageJoins = { between: '', end: '' }

export type ReadPage = (after: Position, limit: number, signal: AbortSignal) => Promise<ListingPage>
/**
 * The page of up to `limit` books that starts `skip` books after `after`, with the id of the book
 * it starts after (`after`; null when there are not that many).
 */
export type ReadPageBeyond = (after: Position, skip: number, limit: number, signal: AbortSignal) => Promise<PageBeyond>
export type PageBeyond = ListingPage & { after: string | null }

/** What the listings of an app share. */
export interface ListingResources {
  budget: PageBudget
  /**
   * Whether a listing may start one more page query now without making another listing wait:
   * pages grow and are read ahead only then, so that many listings at once (a thousand clients
   * that stop reading) share the connections in pages of STREAM_PAGE, as they did before.
   */
  connectionFree: () => boolean
  /** Reads a page ahead; without it, none is. */
  readBeyond?: ReadPageBeyond | undefined
  /**
   * Each page after the first in a span of the listing's request (`listing page`, `listing page
   * ahead`): the request's own span ends as its answer starts, and these pages are read after.
   */
  tracing?: Tracing | undefined
}

/** A page asked for, its size, and the rows of the budget it holds. */
interface PageRead {
  page: Promise<ListingPage | PageBeyond>
  limit: number
  /** Rows of the budget: beyond STREAM_PAGE for the next page, all of them for one read ahead. */
  held: number
  /** Whether the page came before the client had taken the one before it. */
  ready: boolean
  /** Read ahead, beyond the next page: valid only if it starts right after that page's last book. */
  beyond: boolean
}

/**
 * A long listing, in pieces: `head`, the answer's start with the first page already read
 * (`first`, asked for with `firstLimit`), then each next page as the client takes the previous
 * one (backpressure), joined as `joins` says (the envelope's JSON by default, or lines). A listing holds two pages: the one being written, until the
 * socket has handed all of it to the kernel, and the next one, read meanwhile. Nothing is
 * buffered beyond that (`highWaterMark: 0`): a page is asked for only when the one before has
 * gone out.
 *
 * A client that waited for a page (it took the one before first) waits on the database: its next
 * page is twice as big, and, with `readBeyond`, the page after that is read at the same time, on
 * another connection, as the page that starts as many books after the last one sent as the next
 * page holds; both only while a connection is free for listings (`connectionFree`). Each page
 * reads its own snapshot, so that holds only if nothing was written in between: a page read
 * ahead is kept only if it starts right after the last book of the page before it, else it is
 * dropped and read again after that book. Either way no book is listed
 * twice or out of order, and none that was there all along is left out. Whatever pages hold
 * beyond STREAM_PAGE, and the whole of a page read ahead, comes out of `budget`; with the
 * budget spent, a listing reads pages of STREAM_PAGE one after the other.
 *
 * A client that goes away stops the reading. A failure after the first piece cannot change the
 * status any more: the stream errors, the connection is cut before the chunked answer's
 * terminating chunk and the body stays incomplete (JSON that does not parse; lines that a client
 * of HTTP sees cut off: no format of lines can say so itself), so no client takes a partial list
 * for the whole one.
 */
export function listingStream (head: string, first: ListingPage, firstLimit: number, readPageOf: ReadPage,
  { budget, connectionFree, readBeyond: readBeyondOf, tracing = NO_TRACING }: ListingResources, joins: PageJoins = ENVELOPE_JOINS): Readable {
  const request = tracing.current()
  const readPage: ReadPage = tracing === NO_TRACING
    ? readPageOf
    : (after, limit, signal) => tracing.inSpan('listing page', { parent: request, attributes: { 'bookkeeping.page.limit': limit } },
        () => readPageOf(after, limit, signal))
  const readBeyond: ReadPageBeyond | undefined = tracing === NO_TRACING || readBeyondOf === undefined
    ? readBeyondOf
    : (after, skip, limit, signal) => tracing.inSpan('listing page ahead', { parent: request, attributes: { 'bookkeeping.page.limit': limit } },
        () => readBeyondOf(after, skip, limit, signal))
  // Aborted once the stream is destroyed: after its end, or early (the client left, a page failed)
  const departed = new AbortController()
  const track = (read: PageRead): PageRead => {
    read.page.then(() => { read.ready = true }, () => {})
    return read
  }
  const readNext = (after: Position, limit: number, grow: boolean): PageRead => {
    const held = grow && connectionFree() ? budget.take(Math.min(2 * limit, STREAM_PAGE_MAX) - STREAM_PAGE) : 0
    return track({ page: readPage(after, STREAM_PAGE + held, departed.signal), limit: STREAM_PAGE + held, held, ready: false, beyond: false })
  }
  const readAhead = (after: Position, skip: number, limit: number): PageRead | null => {
    if (readBeyond === undefined || !connectionFree()) return null
    const held = budget.take(limit)
    if (held < STREAM_PAGE) {
      budget.give(held)
      return null
    }
    return track({ page: readBeyond(after, skip, held, departed.signal), limit: held, held, ready: false, beyond: true })
  }

  let start: string | null = head
  /**
   * Of the last page sent: how many books, the last of them, and the size it was asked for with.
   * Not its JSON, which a stalled listing would otherwise hold a second time.
   */
  let sent = { count: first.count, last: first.last, limit: firstLimit }
  /** The pages asked for after it, in order; the first of them, once taken, is `awaited`. */
  let ahead: PageRead[] = []
  let awaited: PageRead | null = null
  // The budget's rows of the page being written, given back once the client has taken it
  let writing = 0
  const dropAhead = () => {
    for (const read of ahead) budget.give(read.held)
    ahead = []
  }

  /** Asks for the pages after the last one sent; none after the last. */
  const plan = (waited: boolean) => {
    const { count, last, limit } = sent
    // A short page is the last: no need to ask for more
    if (count < limit || last === null) return dropAhead()
    if (ahead.length === 0) ahead.push(readNext(last, limit, waited))
    if (waited && ahead.length === 1) {
      const next = ahead[0]!.limit
      const beyond = readAhead(last, next, Math.min(2 * next, STREAM_PAGE_MAX))
      if (beyond !== null) ahead.push(beyond)
    }
  }

  const end = (stream: Readable) => {
    // An empty string pushed is no piece: a stream of lines just ends
    if (joins.end !== '') stream.push(joins.end)
    stream.push(null)
  }

  /** Sends the next page once it is read; a page read ahead that does not fit is read again. */
  const sendNext = (stream: Readable) => {
    const read = ahead.shift()
    if (read === undefined) return end(stream)
    awaited = read
    // The client took the page before this one ahead of it: it waits on the database
    const waited = !read.ready
    read.page.then((page) => {
      if (departed.signal.aborted) return
      awaited = null
      if (read.beyond && (page as PageBeyond).after !== sent.last?.id) {
        // Written in between: what was read ahead from there on may not follow the last book sent
        budget.give(read.held)
        dropAhead()
        ahead.push(readNext(sent.last!, sent.limit, false))
        return sendNext(stream)
      }
      writing = read.held
      sent = { count: page.count, last: page.last, limit: read.limit }
      if (page.count === 0) {
        // The page before was full and the last
        dropAhead()
        return end(stream)
      }
      plan(waited)
      stream.push(joins.between === '' ? page.text : `${joins.between}${page.text}`)
    }, (err: Error) => stream.destroy(err))
  }

  plan(false)
  return new Readable({
    highWaterMark: 0,
    read () {
      budget.give(writing)
      writing = 0
      if (start !== null) {
        this.push(start)
        start = null
      } else {
        sendNext(this)
      }
    },
    destroy (err, callback) {
      departed.abort()
      budget.give(writing + (awaited?.held ?? 0))
      writing = 0
      awaited = null
      dropAhead()
      callback(err)
    }
  })
}

/**
 * Rows that the pages of streamed listings may hold beyond STREAM_PAGE, shared by every listing
 * of an app: taken when a bigger page is asked for, given back once it has gone out or the
 * listing ended. A listing that gets nothing reads pages of STREAM_PAGE, so the memory of
 * stalled listings stays bounded however big their pages were before they stalled.
 */
export class PageBudget {
  #free: number

  constructor (readonly rows: number) {
    this.#free = rows
  }

  /** Takes up to `rows` of what is free; answers how many it took. */
  take (rows: number): number {
    const taken = Math.max(0, Math.min(rows, this.#free))
    this.#free -= taken
    return taken
  }

  give (rows: number): void {
    this.#free += rows
  }

  get free (): number {
    return this.#free
  }
}

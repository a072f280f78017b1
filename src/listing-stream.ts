/**
 * A listing too long to hold, streamed page by page as its client reads (routes/books.ts,
 * `GET /books`), and the budget of rows its growing pages share.
 */
import { Readable } from 'node:stream'
import type { ListingPage } from '../plugins/app/books-repository.js'
import type { Position } from './listing.js'

/**
 * Books per query while streaming, at first: about 37 KB of JSON for short titles. A stalled
 * listing holds two pages (below), so a thousand of them hold about 75 MB. With pages of 1,000 a
 * thousand stalled listings took the process to 422 MiB in CI, over the 400 MiB the issue allows
 * (test/process/alone/stalled-listings.test.ts); with 500, 305 to 325 MiB.
 */
export const STREAM_PAGE = 500
/**
 * A listing whose client takes each page before the next one is read doubles its pages up to
 * this: fewer queries, each with a round trip and a transaction, for the same books. What pages
 * hold beyond STREAM_PAGE comes from a budget of GROWN_PAGE_ROWS that all listings of the app
 * share (`PageBudget`, below), about 20 MB of JSON for short titles, so stalled listings stay
 * bounded whatever their pages were before they stalled.
 */
export const STREAM_PAGE_MAX = 8000
export const GROWN_PAGE_ROWS = 250_000

export type ReadPage = (after: Position, limit: number, signal: AbortSignal) => Promise<ListingPage>

/** A page asked for, its size, and the rows of the budget it holds beyond STREAM_PAGE. */
interface PageRead {
  page: Promise<ListingPage>
  limit: number
  grown: number
  /** Whether the page came before the client had taken the one before it. */
  ready: boolean
}

/**
 * The envelope of a long listing, in pieces: `head`, the envelope's start with the first page
 * already read (`first`, asked for with `firstLimit`), then each next page
 * as the client takes the previous one (backpressure). A listing holds two pages at most: the
 * one being written, until the socket has handed all of it to the kernel, and the next one, read
 * meanwhile. Nothing is buffered beyond that (`highWaterMark: 0`): a page is asked for only
 * when the one before has gone out. A client that waited for a page (it took the one before
 * first) gets the next one twice as big, while the budget lasts; one that did not, or the budget
 * being spent, the first size again. A client that goes away stops the reading. A failure after
 * the first piece cannot change the status any more: the stream errors, the connection is cut
 * and the body stays incomplete JSON, so no client takes a partial list for the whole one.
 */
export function listingStream (head: string, first: ListingPage, firstLimit: number, readPage: ReadPage, budget: PageBudget): Readable {
  /** The page after `page` (asked for with `limit`), `limit` sized anew; null after the last. */
  const readAfter = (page: ListingPage, limit: number, grow: boolean): PageRead | null => {
    // A short page is the last: no need to ask for more
    if (page.count < limit || page.last === null) return null
    const grown = grow ? budget.take(Math.min(2 * limit, STREAM_PAGE_MAX) - STREAM_PAGE) : 0
    const read: PageRead = { page: readPage(page.last, STREAM_PAGE + grown, departed.signal), limit: STREAM_PAGE + grown, grown, ready: false }
    read.page.then(() => { read.ready = true }, () => {})
    return read
  }
  // Aborted once the stream is destroyed: after its end, or early (the client left, a page failed)
  const departed = new AbortController()
  let start: string | null = head
  let next = readAfter(first, firstLimit, false)
  // The budget's rows of the page being written, given back once the client has taken it
  let writing = 0
  const release = () => {
    budget.give(writing + (next?.grown ?? 0))
    writing = 0
    next = null
  }
  return new Readable({
    highWaterMark: 0,
    read () {
      budget.give(writing)
      writing = 0
      if (start !== null) {
        this.push(start)
        start = null
      } else if (next === null) {
        this.push(']}')
        this.push(null)
      } else {
        const read = next
        // The client took the page before this one ahead of it: it waits on the database
        const waited = !read.ready
        read.page.then((page) => {
          writing = read.grown
          next = departed.signal.aborted ? null : readAfter(page, read.limit, waited)
          if (page.count > 0) {
            this.push(`,${page.json}`)
          } else {
            // The page before was full and the last
            this.push(']}')
            this.push(null)
          }
        }, (err: Error) => this.destroy(err))
      }
    },
    destroy (err, callback) {
      departed.abort()
      release()
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

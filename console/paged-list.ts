/**
 * The list read in pages, for a list too long to hold (list-view.ts decides when) and for every
 * search: the service filters, searches and sorts (`GET /books?limit=&sort=&title=&author=` or
 * `q=`, followed by its `Link`s), and the console holds only the books around those in sight.
 * Pure data and the calls given to it, no DOM.
 *
 * - What is read is cut into stretches, the pages as shown. Each knows its number of rows, the
 *   page queries it was read from and its last book. Its books are held while it is near the
 *   rows in sight and dropped when it is far; to be shown again it is read again with the same
 *   queries (the paths that first fetched it, asking for the most the service gives, 1,000), and
 *   only the books after the stretch before it and up to its own last book are kept: a book
 *   added or deleted meanwhile moves the rows after it, it is neither shown twice nor lost.
 * - The Filter box matches a title or an author; the service's `title` and `author` filters
 *   both apply at once. So a filtered list is two walks, one by `title=`, one by `author=`,
 *   merged in the list's order, each book once. A stretch ends at the lower of the two walks'
 *   last books read: nothing of the other walk can still come before it.
 * - A search (`q`) is one walk, in the order asked for or, without one, in the service's own,
 *   best first, which the console cannot compute: its stretches are its pages as read, and a
 *   stretch read again keeps the books up to the last one it held (it keeps their ids while its
 *   books are dropped). Whether a changed book still matches only the service can say: a book
 *   held stays with its new values (in its place, or where the order asked for puts it), a book
 *   created is not added, a book deleted goes.
 * - Its length is the rows read so far and, while more may follow, a few placeholder rows after
 *   them: scrolling into them reads the next page. The service gives no total; it is known once
 *   the last page is read.
 */
import type { ListQuery, Page } from './api.js'
import { bookMatcher, comparator, type Book, type Order } from './book-list.js'
import { hasWordToFind } from './search-marks.js'
import { TEXT_MAX_LENGTH } from '../src/schemas/book-limits.js'

/** Books of a walk's first page: a few screens, so the first rows come fast whatever the filter costs. */
const FIRST_PAGE = 100
/** Books of each page after the first. */
const PAGE = 500
/** The most books the service gives in a page (`limit`). */
const LIMIT_MAX = 1000
/** Rows held beyond each edge of those in sight; a stretch farther than twice this is dropped. */
const MARGIN = 500
/** Placeholder rows after the last book read while more may follow. */
const LOOKAHEAD = 100
/** The longest search the service takes, in characters (docs/api.md, Pages, filters and sorting). */
const SEARCH_MAX_LENGTH = 200

/** What a list in pages lists: `filter` or `search` (one of them, or neither), in an order. */
export interface Listing {
  /** The order; null for a search's own, best first */
  order: Order | null
  /** The Filter box: a title or an author that contains this text; '' for none */
  filter: string
  /** A search (`q`); '' for none */
  search: string
}

export type ReadPage = (query: ListQuery, signal: AbortSignal) => Promise<Page>

export interface PagedListEvents {
  /**
   * Books were read, dropped, added or removed. `shift` rows came (or went, when negative)
   * before the first row in sight, which is then `shift` rows further down.
   */
  changed: (shift: number) => void
  /** A page could not be read; nothing more is read until `retry()`. */
  failed: (error: unknown) => void
}

interface Stretch {
  /** The page queries its books came from, one per walk that gave some */
  queries: ListQuery[]
  /** Its last book, where the next stretch begins; null for the last stretch once the walks ended */
  last: Book | null
  count: number
  /** Null while dropped */
  books: Book[] | null
  /** In a search best first, the ids of its books while they are dropped: where it ends when read again */
  ids: Float64Array | null
  reading: boolean
  /**
   * Books created (1) or deleted (-1) in it since it was last read, while its books were
   * dropped: counted in `count` once each, however often the change is told
   */
  counted: Map<number, 1 | -1>
}

interface Walk {
  /** The query of its next page; null once its last page is read */
  next: ListQuery | null
  /** Books of its latest page that are not in a stretch yet */
  unplaced: Book[]
  /** The query of that page */
  from: ListQuery | null
}

export class PagedList {
  readonly order: Order | null
  readonly filter: string
  readonly search: string
  /** The order of two books; null for a search best first */
  readonly #compare: ((a: Book, b: Book) => number) | null
  readonly #matches: ((book: Book) => boolean) | null
  readonly #read: ReadPage
  readonly #events: PagedListEvents
  readonly #controller = new AbortController()
  readonly #walks: Walk[]
  readonly #stretches: Stretch[] = []
  /** The first row of each stretch */
  readonly #starts: number[] = []
  /** The stretches whose books are held */
  readonly #held = new Set<number>()
  #known = 0
  #readingOn = false
  #failed = false
  /** The rows in sight, as last told by `show` */
  #first = 0
  #last = 0

  constructor ({ order, filter, search }: Listing, read: ReadPage, events: PagedListEvents) {
    this.order = order
    this.filter = filter
    this.search = search
    this.#compare = order === null ? null : comparator(order)
    this.#matches = bookMatcher(filter)
    this.#read = read
    this.#events = events
    const first: ListQuery = { limit: String(FIRST_PAGE), ...(order === null ? {} : { sort: `${order.descending ? '-' : ''}${order.key}` }) }
    const walk = (query: ListQuery): Walk => ({ next: query, unplaced: [], from: null })
    if (search !== '') this.#walks = searchFindsNothing(search) ? [] : [walk({ ...first, q: search })]
    else if (filter === '') this.#walks = [walk(first)]
    else if (matchesNothing(filter)) this.#walks = []
    else this.#walks = [walk({ ...first, title: filter }), walk({ ...first, author: filter })]
  }

  /** Whether every book is listed (no filter, no search): only then is a book deleted out of sight counted out. */
  get #everyBook (): boolean {
    return this.filter === '' && this.search === ''
  }

  /** Rows to lay out: those read, then placeholders while more may follow. */
  get length (): number {
    return this.#known + (this.complete ? 0 : LOOKAHEAD)
  }

  /** Rows read so far: every row of the list once it is complete. */
  get known (): number {
    return this.#known
  }

  /** Whether the last page has been read. */
  get complete (): boolean {
    return this.#walks.every((walk) => walk.next === null && walk.unplaced.length === 0)
  }

  /** The book of row `index`, or undefined while it is not held (not read yet, or dropped). */
  at (index: number): Book | undefined {
    if (index < 0 || index >= this.#known) return undefined
    const stretch = this.#stretchAt(index)
    return this.#stretches[stretch]!.books?.[index - this.#starts[stretch]!]
  }

  /** The row of a book held, or -1. */
  indexOf (id: number): number {
    for (const index of this.#held) {
      const found = this.#stretches[index]!.books!.findIndex((book) => book.id === id)
      if (found !== -1) return this.#starts[index]! + found
    }
    return -1
  }

  /** Rows `first` to `last` are in sight: reads what is missing around them, drops what is far. */
  show (first: number, last: number): void {
    this.#first = first
    this.#last = last
    this.#settle()
  }

  /** Reads again after a failure. */
  retry (): void {
    this.#failed = false
    this.#settle()
  }

  /** Cancels every read under way, and reads nothing more: the list is no longer shown. */
  abort (): void {
    this.#controller.abort()
  }

  /**
   * A book created or changed: out of its old place, into the place its values give it if it
   * still matches the filter and that place is held. Elsewhere it shows when that part is read.
   */
  upsert (book: Book): void {
    const taken = this.#take(book.id)
    if (this.#compare === null) {
      // A search best first: in its place
      if (taken !== null) {
        const books = this.#stretches[taken.stretch]!.books!
        books.splice(taken.at, 0, book)
        this.#resize(taken.stretch, books.length)
      }
    } else if (this.search === '' ? this.#matches === null || this.#matches(book) : taken !== null) {
      const compare = this.#compare
      const index = this.#stretchFor(book, compare)
      const books = this.#stretches[index]?.books
      if (books != null) {
        const before = books.findIndex((other) => compare(book, other) < 0)
        books.splice(before === -1 ? books.length : before, 0, book)
        this.#resize(index, books.length)
      }
    }
    this.#events.changed(0)
  }

  /**
   * A book created: as `upsert`, and when its place is in a stretch whose books are dropped, it
   * is counted there, so that the count and the rows after it move before it is read.
   */
  add (book: Book): void {
    // Whether it matches a search, only the service can say: it shows when the search is asked again
    if (this.#compare === null || this.search !== '') return
    const index = this.#stretchFor(book, this.#compare)
    if (this.#stretches[index]?.books === null && (this.#matches === null || this.#matches(book))) this.#countOutside(index, book.id, 1)
    else this.upsert(book)
  }

  /**
   * A book deleted (or found gone). When it is not held, only an unfiltered list by id can say
   * where it was, and count it out of its stretch; otherwise that shows when it is read again.
   */
  remove (id: number): void {
    if (this.#take(id) === null && this.order?.key === 'id' && this.#everyBook && this.#compare !== null) {
      // Only the id counts in this order
      const index = this.#stretchFor({ id, title: '', author: '', year: 0 }, this.#compare)
      if (this.#stretches[index]?.books === null) {
        this.#countOutside(index, id, -1)
        return
      }
    }
    this.#events.changed(0)
  }

  /** Removes book `id` from the stretch that holds it: where it was, or null if no stretch holds it. */
  #take (id: number): { stretch: number, at: number } | null {
    for (const index of this.#held) {
      const books = this.#stretches[index]!.books!
      const found = books.findIndex((book) => book.id === id)
      if (found === -1) continue
      books.splice(found, 1)
      this.#resize(index, books.length)
      return { stretch: index, at: found }
    }
    return null
  }

  /** Book `id` counted into (1) or out of (-1) stretch `index`, whose books are dropped. */
  #countOutside (index: number, id: number, delta: 1 | -1): void {
    const stretch = this.#stretches[index]!
    if (stretch.counted.get(id) === delta) return
    stretch.counted.set(id, delta)
    const above = this.#starts[index]! + stretch.count <= this.#first
    this.#resize(index, stretch.count + delta)
    this.#events.changed(above ? delta : 0)
  }

  #settle (): void {
    if (this.#failed || this.#controller.signal.aborted) return
    const from = Math.max(0, this.#first - MARGIN)
    const to = this.#last + MARGIN
    for (const index of this.#held) {
      const start = this.#starts[index]!
      const stretch = this.#stretches[index]!
      if (start + stretch.count >= from - MARGIN && start <= to + MARGIN) continue
      if (this.#compare === null) stretch.ids = Float64Array.from(stretch.books!, (book) => book.id)
      stretch.books = null
      this.#held.delete(index)
    }
    if (from < this.#known) {
      for (let index = this.#stretchAt(from); index < this.#stretches.length && this.#starts[index]! <= to; index++) {
        const stretch = this.#stretches[index]!
        if (stretch.books === null && !stretch.reading) this.#readAgain(index).catch((error) => this.#fail(error))
      }
    }
    if (this.#known <= to && !this.complete && !this.#readingOn) this.#readOn().catch((error) => this.#fail(error))
  }

  /** The next stretch: the next page of each walk that has none left, merged up to where both are known. */
  async #readOn (): Promise<void> {
    this.#readingOn = true
    try {
      await Promise.all(this.#walks.filter((walk) => walk.unplaced.length === 0 && walk.next !== null).map(async (walk) => {
        const query = walk.next!
        const page = await this.#read(query, this.#controller.signal)
        walk.unplaced = page.books
        walk.from = query
        // The later pages longer than the first: fewer requests for a long scroll
        walk.next = page.next === null ? null : { ...page.next, limit: String(PAGE) }
      }))
      const ends = this.#walks.filter((walk) => walk.next !== null).flatMap((walk) => walk.unplaced.at(-1) ?? [])
      // Two walks have an order (a filter): a stretch ends where both are read
      const compare = this.#compare
      const last = ends.length === 0 ? null : compare === null ? ends[0]! : ends.reduce((a, b) => compare(a, b) <= 0 ? a : b)
      const parts = this.#walks.map((walk) => {
        const count = last === null || compare === null ? walk.unplaced.length : countUpTo(walk.unplaced, last, compare)
        return { query: walk.from!, books: walk.unplaced.splice(0, count) }
      }).filter((part) => part.books.length > 0)
      if (parts.length > 0) {
        const books = compare === null ? parts[0]!.books : mergeOnce(parts.map((part) => part.books), compare)
        this.#stretches.push({ queries: parts.map((part) => part.query), last, count: books.length, books, ids: null, reading: false, counted: new Map() })
        this.#starts.push(this.#known)
        this.#held.add(this.#stretches.length - 1)
        this.#known += books.length
      }
      this.#events.changed(0)
    } finally {
      this.#readingOn = false
    }
    this.#settle()
  }

  /** A dropped stretch read again through the queries that first read it. */
  async #readAgain (index: number): Promise<void> {
    const stretch = this.#stretches[index]!
    stretch.reading = true
    try {
      const after = index === 0 ? null : this.#stretches[index - 1]!.last
      const pages = await Promise.all(stretch.queries.map((query) =>
        this.#read({ ...query, limit: String(LIMIT_MAX) }, this.#controller.signal)))
      const compare = this.#compare
      let books: Book[]
      if (compare === null) {
        // Best first, from where the stretch before ended (the page's cursor), up to the last book it held
        const held = new Set(stretch.ids)
        const page = pages[0]!.books
        let end = page.length
        if (stretch.last !== null) while (end > 0 && !held.has(page[end - 1]!.id)) end--
        books = page.slice(0, end)
      } else {
        const inside = (book: Book) =>
          (after === null || compare(book, after) > 0) && (stretch.last === null || compare(book, stretch.last) <= 0)
        books = mergeOnce(pages.map((page) => page.books.filter(inside)), compare)
      }
      const above = this.#starts[index]! + stretch.count <= this.#first
      const shift = books.length - stretch.count
      stretch.books = books
      stretch.ids = null
      stretch.counted.clear()
      this.#held.add(index)
      this.#resize(index, books.length)
      this.#events.changed(above ? shift : 0)
    } finally {
      stretch.reading = false
    }
    this.#settle()
  }

  #fail (error: unknown): void {
    // Cancelled: the list is no longer shown, nothing to say
    if (this.#controller.signal.aborted) return
    this.#failed = true
    this.#events.failed(error)
  }

  /** A stretch now has `count` rows: the rows after it move. */
  #resize (index: number, count: number): void {
    const stretch = this.#stretches[index]!
    const delta = count - stretch.count
    stretch.count = count
    for (let next = index + 1; next < this.#starts.length; next++) this.#starts[next]! += delta
    this.#known += delta
  }

  /** The stretch that holds row `row` (of those read). */
  #stretchAt (row: number): number {
    let low = 0
    let high = this.#starts.length - 1
    while (low < high) {
      const middle = (low + high + 1) >>> 1
      if (this.#starts[middle]! <= row) low = middle
      else high = middle - 1
    }
    return low
  }

  /** The stretch a book belongs in by its values; the number of stretches when it lies beyond those read. */
  #stretchFor (book: Book, compare: (a: Book, b: Book) => number): number {
    let low = 0
    let high = this.#stretches.length
    while (low < high) {
      const middle = (low + high) >>> 1
      const last = this.#stretches[middle]!.last
      if (last !== null && compare(last, book) < 0) low = middle + 1
      else high = middle
    }
    return low
  }
}

/** No title or author can contain a NUL, nor more characters than the longest (the service refuses both). */
export function matchesNothing (filter: string): boolean {
  return filter.includes('\u0000') || [...filter].length > TEXT_MAX_LENGTH
}

/** A search with no word to find, a NUL or more characters than the longest (the service refuses them). */
export function searchFindsNothing (search: string): boolean {
  return search.includes('\u0000') || [...search].length > SEARCH_MAX_LENGTH || !hasWordToFind(search)
}

/** How many of `books` (in order) come up to `last`, included. */
function countUpTo (books: Book[], last: Book, compare: (a: Book, b: Book) => number): number {
  let count = 0
  while (count < books.length && compare(books[count]!, last) <= 0) count++
  return count
}

/** Books of one or two walks, each in order, as one list in order, a book in both walks once. */
function mergeOnce (lists: Book[][], compare: (a: Book, b: Book) => number): Book[] {
  if (lists.length === 1) return lists[0]!
  const merged = lists.flat().sort(compare)
  return merged.filter((book, index) => index === 0 || merged[index - 1]!.id !== book.id)
}

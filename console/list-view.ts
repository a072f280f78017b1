/**
 * The list of books on the page: read whole and held (book-list.ts), or past `PAGED_ABOVE` books
 * read in pages around what is in sight (paged-list.ts); narrowed by the Filter box and sorted by
 * the column headings, the same way in both: a title or author that contains the text, ignoring
 * case; the service's order (titles and authors by code point, ties by id).
 *
 * The Search box shows a search instead (`GET /books?q=`), always read in pages, best first, or
 * in the order of a heading clicked while it is shown; the words it matched are marked in its
 * rows (search-marks.ts). It is asked `FILTER_DELAY_MS` after the last key, a newer search
 * cancelling the one still being read. The list stays underneath, kept up to date but not drawn
 * (the Filter box disabled), and is shown again as it was, where it was scrolled to, once the
 * Search box is emptied.
 *
 * Reading starts whole: `GET /books` streams every book and the first rows show as they arrive.
 * Once more than `PAGED_ABOVE` books have come, the stream is cancelled and the list is read in
 * pages, filtered and sorted by the service; the rows on screen stay until the list in pages has
 * read them (in the same places, when the list is by id and not filtered), and the books held
 * until then are let go. A filter typed into a list in pages is asked for
 * `FILTER_DELAY_MS` after the last key; a newer filter or order cancels the one still being read.
 *
 * Timings are left as `performance` measures, which the browser benchmark reads
 * (tools/bench/console.cjs): `first-rows` and `list-loaded` from the start of the listing,
 * `first-page` from the switch to pages to their first rows drawn, `filter` for each key on a
 * list held whole, `filter-results` from the last key to the first rows of a list in pages,
 * `search-results` from the last key in the Search box to the first rows of its results, and
 * `sort` from a click on a heading to the rows drawn.
 */
import { ApiFailure, SignedOut, listBooks, listPage } from './api.js'
import { BookList, type Book, type Order, type SortKey } from './book-list.js'
import { BookTable, type Position, type RowAction } from './book-table.js'
import type { Change } from './change-feed.js'
import type { Column } from './column-order.js'
import { clearProblem, showProblem } from './feedback.js'
import { ListingParser } from './listing-parser.js'
import { PagedList, searchFindsNothing } from './paged-list.js'
import { searchMarker } from './search-marks.js'

/**
 * Past this many books the list is read in pages: beyond it, holding every book costs more memory
 * and waiting than a page costs (docs/performance.md, The console). The
 * page's address may ask for another number (`/console/?paged-above=0` reads every list in pages).
 */
const PAGED_ABOVE = 100_000
/** Up to this many books a sorted view is sorted again while the list streams in (tenths of a second). */
const RESORT_WHILE_LOADING = 100_000
/** A long list is sorted in a worker, from this many books on; a short one at once. */
const SORT_IN_WORKER = 20_000
/** Characters of the listing read before the first rows are drawn: some 150 books. */
const FIRST_ROWS_TEXT = 16_384
/** A list in pages asks for a filter, and the Search box for a search, this long after the last key: typing on sends nothing. */
const FILTER_DELAY_MS = 120

export interface ListElements {
  scroller: HTMLElement
  table: HTMLTableElement
  /** The status line that counts the books */
  count: HTMLElement
  filter: HTMLInputElement
  search: HTMLInputElement
  /** Where a failure to read the list is shown */
  notice: HTMLElement
}

export class ListView {
  readonly #books = new BookList()
  readonly #table: BookTable
  readonly #elements: ListElements
  readonly #headers: HTMLTableCellElement[]
  readonly #pagedAbove = pagedAbove()
  readonly #numbers = new Intl.NumberFormat()
  /** The list in pages shown, once there are too many books to hold */
  #paged: PagedList | null = null
  /**
   * A list in pages read for a new filter or order, shown at its top once its first page is in;
   * `measure` is taken then. At the switch to pages, `place` is the rows in sight, which the same
   * list in the same order has in the same places: it is shown once it has read them, in place.
   */
  #next: { list: PagedList, measure: string, since: string, place: Sight | null } | null = null
  /** The rows in sight, as the table last drew them */
  #sight: Sight = { first: 0, last: 0 }
  #loading: AbortController | null = null
  #loaded = false
  #filterTimer = 0
  #sorting: Promise<void> = Promise.resolve()
  /** Changes from the feed that came while the list was being read: applied once it is in */
  #deferred: Change[] = []
  /** The search shown in place of the list, once its first page is in */
  #found: PagedList | null = null
  /** A search being read, to replace the list or the search shown once its first page is in; `failed` when it could not be */
  #finding: { list: PagedList, measure: string, since: string, failed: boolean } | null = null
  #searchTimer = 0
  /** Where the list was scrolled to when a search replaced it: there again when the search ends */
  #listPosition: Position = TOP

  constructor (elements: ListElements, onAction: (action: RowAction, book: Book) => void) {
    this.#elements = elements
    this.#table = new BookTable(elements.scroller, elements.table, onAction, (first, last) => {
      if (this.#found !== null) {
        this.#found.show(first, last)
        return
      }
      this.#sight = { first, last }
      this.#paged?.show(first, last)
    })
    this.#headers = [...elements.table.querySelectorAll<HTMLTableCellElement>('th[data-key]')]
    for (const header of this.#headers) {
      header.querySelector('button')!.addEventListener('click', () => {
        const key = header.dataset.key as SortKey
        // One sort after the other, in the order of the clicks
        this.#sorting = this.#sorting.then(() => this.#searching ? this.#sortSearchBy(key) : this.#sortBy(key))
      })
    }
    elements.filter.addEventListener('input', () => this.#filtered())
    elements.search.addEventListener('input', () => this.#searched())
  }

  /** Whether a search is shown or being read for the Search box (the list is then not drawn once it is in). */
  get #searching (): boolean {
    return this.#found !== null || this.#finding !== null
  }

  /** The search asked for last: being read, or shown. */
  get #search (): PagedList | null {
    return this.#finding?.list ?? this.#found
  }

  /** Whether the list is read in pages (or about to be, its first page on the way). */
  get #inPages (): boolean {
    return this.#paged !== null || this.#next !== null
  }

  /** The order shown, or asked for last. */
  get #order (): Order {
    return this.#next?.list.order ?? this.#paged?.order ?? this.#books.order
  }

  /**
   * The order and the filter of the list, and the search shown instead of it if any (its text
   * and order, null for best first): what Export CSV exports (list-export.ts).
   */
  get shown (): { order: Order, filter: string, search: { text: string, order: Order | null } | null } {
    const search = this.#search
    return {
      order: this.#order,
      filter: this.#elements.filter.value,
      search: search === null ? null : { text: search.search, order: search.order }
    }
  }

  /** Reads the list anew, whole, showing the books as they arrive; in pages once they are too many. */
  async load (): Promise<void> {
    this.#stop()
    const controller = new AbortController()
    this.#loading = controller
    this.#loaded = false
    // In id order, as the service lists them: a sort by another column waits for the whole list
    this.#books.clear()
    this.#books.setFilter(this.#elements.filter.value)
    this.#showOrder()
    this.#showWhole()
    clearProblem(this.#elements.notice)
    this.#showCount()
    performance.clearMarks('list-start')
    performance.mark('list-start')
    let firstRows = true
    let lastSort = 0
    try {
      const parser = new ListingParser<Book>()
      const decoder = new TextDecoder()
      const reader = (await listBooks(controller.signal)).getReader()
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        const text = decoder.decode(value, { stream: true })
        // The first rows from the start of the first piece, drawn and painted before the rest of
        // it is read: a quick answer's first piece can be a megabyte, a long task to read
        const pieces = firstRows ? [text.slice(0, FIRST_ROWS_TEXT), text.slice(FIRST_ROWS_TEXT)] : [text]
        for (const piece of pieces) {
          const arrived = parser.push(piece)
          if (arrived.length === 0) continue
          this.#books.append(arrived)
          if (this.#books.all.length > this.#pagedAbove) {
            this.#toPages()
            return
          }
          // Sorted meanwhile by something else than id, the view is put in order again at most once
          // a second while that is quick; a longer list is sorted once, when it is whole
          if (this.#books.unsorted && this.#books.all.length <= RESORT_WHILE_LOADING && performance.now() - lastSort > 1000) {
            this.#books.refresh()
            lastSort = performance.now()
          }
          this.#showWhole()
          this.#showCount()
          if (firstRows) {
            firstRows = false
            this.#showWhole({ draw: true })
            performance.measure('first-rows', 'list-start')
            await painted()
          }
        }
      }
      parser.end()
      this.#loaded = true
      if (this.#books.unsorted) await this.#inOrderOf(this.#books.order.key)
      this.#books.refresh()
      this.#showWhole()
      this.#showCount()
      performance.measure('list-loaded', 'list-start')
      this.#applyDeferred()
    } catch (error) {
      if (controller.signal.aborted || error instanceof SignedOut) return
      this.#showCount()
      showProblem(this.#elements.notice, error instanceof ApiFailure ? error : new ApiFailure(0, 'The list could not be read to its end', null, null), () => {
        this.load().catch(console.error)
      })
    } finally {
      if (this.#loading === controller) this.#loading = null
    }
  }

  /**
   * Reads the list again, in the order and with the filter shown, after the feed of changes
   * missed some (change-feed.ts).
   */
  async reload (): Promise<void> {
    const order = this.#order
    const search = this.#search
    if (search !== null) {
      performance.clearMarks('reload-start')
      performance.mark('reload-start')
      this.#readSearch(search.search, search.order, 'reload', 'reload-start')
    }
    if (this.#inPages) {
      performance.clearMarks('reload-start')
      performance.mark('reload-start')
      this.#readPages(order, this.#elements.filter.value, 'reload', 'reload-start')
      return
    }
    await this.load()
    // Read in id order, as the service lists it: put back in the order shown before
    this.#sorting = this.#sorting.then(async () => {
      while (this.#order.key !== order.key || this.#order.descending !== order.descending) await this.#sortBy(order.key)
    })
  }

  /**
   * A change from the feed (change-feed.ts), made here or elsewhere; told again, it changes
   * nothing more. While the list is being read it waits, so as not to be read over.
   */
  apply (change: Change): void {
    for (const search of [this.#found, this.#finding?.list]) {
      if (search === null || search === undefined) continue
      if (change.kind === 'deleted') search.remove(change.id)
      else if (change.kind === 'created') search.add(change.book)
      else search.upsert(change.book)
    }
    if (this.#loading !== null || this.#next !== null) {
      this.#deferred.push(change)
    } else if (this.#paged !== null) {
      if (change.kind === 'deleted') this.#paged.remove(change.id)
      else if (change.kind === 'created') this.#paged.add(change.book)
      else this.#paged.upsert(change.book)
    } else {
      // Drawn at the next frame, not at once: an import brings thousands of changes in a burst,
      // and one drawing each would hold the page for minutes
      if (change.kind === 'deleted') this.#books.remove(change.id)
      else this.#books.upsert(change.book)
      this.#showWhole()
      this.#showCount()
    }
  }

  #applyDeferred (): void {
    const changes = this.#deferred
    this.#deferred = []
    for (const change of changes) this.apply(change)
  }

  /**
   * Nothing shown, nothing read (signed out); the filter stays, it is what the person typed. A
   * search ends: the next list shown is the list.
   */
  clear (): void {
    this.#stop()
    this.#stopSearch()
    this.#deferred = []
    this.#books.clear()
    this.#table.show(this.#books.view)
  }

  /** A book created or changed: shown where the list's order puts it (in a search, if it is held). */
  upsert (book: Book): void {
    this.#found?.upsert(book)
    this.#finding?.list.upsert(book)
    if (this.#paged !== null) {
      this.#paged.upsert(book)
      return
    }
    this.#books.upsert(book)
    this.#redrawWhole()
  }

  /** A book deleted, or found gone. */
  remove (id: number): void {
    this.#found?.remove(id)
    this.#finding?.list.remove(id)
    if (this.#paged !== null) {
      this.#paged.remove(id)
      return
    }
    this.#books.remove(id)
    this.#redrawWhole()
  }

  /** Scrolls to a book, if it is in the list as held. */
  reveal (book: Book): void {
    const index = this.#found !== null
      ? this.#found.indexOf(book.id)
      : this.#paged === null ? this.#books.view.indexOf(book) : this.#paged.indexOf(book.id)
    if (index !== -1) this.#table.reveal(index)
  }

  focusRow (id: number, action: RowAction): void {
    this.#table.focusRow(id, action)
  }

  #stop (): void {
    this.#loading?.abort()
    this.#loading = null
    this.#loaded = false
    clearTimeout(this.#filterTimer)
    this.#paged?.abort()
    this.#next?.list.abort()
    this.#paged = null
    this.#next = null
  }

  /** Too many books to hold: the stream is cancelled and the list is read in pages. */
  #toPages (): void {
    this.#loading?.abort()
    this.#loading = null
    performance.clearMarks('pages-start')
    performance.mark('pages-start')
    // Under a search, the rows in sight are not the list's
    const sameRows = this.#books.filter === '' && this.#books.order.key === 'id' && !this.#books.order.descending && this.#found === null
    this.#readPages(this.#books.order, this.#elements.filter.value, 'first-page', 'pages-start', sameRows ? this.#sight : null)
  }

  /** Reads a list in pages for this order and filter, to replace the one shown (see `#next`). */
  #readPages (order: Order, filter: string, measure: string, since: string, place: Sight | null = null): void {
    this.#next?.list.abort()
    const list: PagedList = new PagedList({ order, filter, search: '' }, listPage, {
      changed: (shift) => this.#pagesChanged(list, shift),
      failed: (error) => {
        if (list === this.#paged || list === this.#next?.list) showProblem(this.#elements.notice, error, () => list.retry())
      }
    })
    this.#next = { list, measure, since, place }
    clearProblem(this.#elements.notice)
    this.#showCount()
    list.show(place?.first ?? 0, place?.last ?? 0)
    // Nothing to ask (a filter no book can match): shown at once, empty
    if (list.complete) this.#pagesChanged(list, 0)
  }

  #pagesChanged (list: PagedList, shift: number): void {
    if (list === this.#next?.list) {
      const { measure, since, place } = this.#next
      // Still reading up to the rows in sight at the switch (it asked for them)
      if (place !== null && !list.complete && list.known <= place.last) return
      this.#next = null
      this.#paged?.abort()
      this.#paged = list
      // The books held whole until the switch, if any, are let go
      this.#books.clear()
      this.#showOrder()
      if (this.#found !== null) {
        // Under a search: shown once the search ends, from its top unless it kept the rows in sight
        if (place === null) this.#listPosition = TOP
      } else {
        if (place === null) this.#table.scroller.scrollTop = 0
        this.#table.show(list)
        this.#table.draw()
      }
      this.#showCount()
      // Which filter and order it is for: a measure of a list that a newer one replaces is told apart
      performance.measure(measure, { start: since, detail: { filter: list.filter, order: list.order } })
      this.#applyDeferred()
    } else if (list === this.#paged && this.#found === null) {
      this.#table.show(list, { shift })
      this.#showCount()
    }
  }

  #filtered (): void {
    const text = this.#elements.filter.value
    performance.clearMarks('filter-start')
    performance.mark('filter-start')
    if (this.#inPages) {
      clearTimeout(this.#filterTimer)
      this.#filterTimer = window.setTimeout(() => this.#readPages(this.#order, text, 'filter-results', 'filter-start'), FILTER_DELAY_MS)
      return
    }
    this.#books.setFilter(text)
    this.#table.scroller.scrollTop = 0
    this.#redrawWhole()
    performance.measure('filter', 'filter-start')
  }

  /** A key in the Search box: the search asked for after the last key, or the list again once the box is empty. */
  #searched (): void {
    const text = this.#elements.search.value
    clearTimeout(this.#searchTimer)
    performance.clearMarks('search-start')
    performance.mark('search-start')
    if (text.trim() === '') {
      this.#endSearch()
      return
    }
    this.#searchTimer = window.setTimeout(() => {
      const search = this.#search
      // Typed on in the order of the search shown (best first for a new one)
      if (search?.search !== text || this.#finding?.failed === true) this.#readSearch(text, search?.order ?? null, 'search-results', 'search-start')
    }, FILTER_DELAY_MS)
  }

  /** Reads search `text` in `order` (null: best first), to replace what is shown once its first page is in (see `#finding`). */
  #readSearch (text: string, order: Order | null, measure: string, since: string): void {
    if (!this.#searching) this.#listPosition = this.#table.position()
    this.#finding?.list.abort()
    const list: PagedList = new PagedList({ order, filter: '', search: text }, listPage, {
      changed: (shift) => this.#searchChanged(list, shift),
      failed: (error) => {
        if (list !== this.#found && list !== this.#finding?.list) return
        if (list === this.#finding?.list) this.#finding.failed = true
        this.#showCount()
        showProblem(this.#elements.notice, error, () => {
          if (list === this.#finding?.list) this.#finding.failed = false
          this.#showCount()
          list.retry()
        })
      }
    })
    this.#finding = { list, measure, since, failed: false }
    this.#elements.filter.disabled = true
    clearProblem(this.#elements.notice)
    this.#showOrder()
    this.#showCount()
    list.show(0, 0)
    // Nothing to ask (no word to find): shown at once, empty
    if (list.complete) this.#searchChanged(list, 0)
  }

  #searchChanged (list: PagedList, shift: number): void {
    if (list === this.#finding?.list) {
      const { measure, since } = this.#finding
      this.#finding = null
      this.#found?.abort()
      this.#found = list
      this.#table.mark(searchMarker(list.search))
      this.#table.scroller.scrollTop = 0
      this.#table.show(list)
      this.#table.draw()
      this.#showOrder()
      this.#showCount()
      performance.measure(measure, { start: since, detail: { search: list.search, order: list.order } })
    } else if (list === this.#found) {
      this.#table.show(list, { shift })
      this.#showCount()
    }
  }

  /** The Search box emptied: the list again, as it was and where it was scrolled to. */
  #endSearch (): void {
    const shown = this.#found !== null
    this.#stopSearch()
    // A failure shown was the search's
    clearProblem(this.#elements.notice)
    if (!shown) {
      // The list is still on screen
      this.#showOrder()
      this.#showCount()
      return
    }
    this.#table.showAt(this.#paged ?? this.#books.view, this.#listPosition)
    this.#table.draw()
    this.#showOrder()
    this.#showCount()
    // Far from sight, nothing of it was read meanwhile: what is missing is read now
    this.#paged?.retry()
  }

  /** No search shown or read: the Filter box usable again, nothing marked (the table is drawn by the caller). */
  #stopSearch (): void {
    clearTimeout(this.#searchTimer)
    this.#found?.abort()
    this.#finding?.list.abort()
    this.#found = null
    this.#finding = null
    this.#elements.filter.disabled = false
    this.#table.mark(null)
  }

  /**
   * A heading clicked while a search is shown: its matches sorted by that column, then the other
   * way, then best first again.
   */
  #sortSearchBy (key: SortKey): void {
    performance.clearMarks('sort-start')
    performance.mark('sort-start')
    clearTimeout(this.#searchTimer)
    const order = this.#search?.order ?? null
    const text = this.#elements.search.value
    if (text.trim() === '') return
    this.#readSearch(text, order?.key !== key ? { key, descending: false } : order.descending ? null : { key, descending: true }, 'sort', 'sort-start')
  }

  /** Sorts by `key`, or the other way when the list is sorted by it already. */
  async #sortBy (key: SortKey): Promise<void> {
    performance.clearMarks('sort-start')
    performance.mark('sort-start')
    if (!this.#inPages && !this.#books.hasOrder(key)) {
      // The first sort by a column of a long list takes a while: say so
      if (this.#found === null) this.#elements.count.textContent = 'Sorting…'
      await this.#inOrderOf(key)
    }
    // In pages, or switched to pages while the worker sorted
    if (this.#inPages) {
      const order = this.#order
      clearTimeout(this.#filterTimer)
      this.#readPages({ key, descending: order.key === key ? !order.descending : false }, this.#elements.filter.value, 'sort', 'sort-start')
      return
    }
    this.#books.sortBy(key)
    this.#showOrder()
    if (this.#found === null) this.#table.scroller.scrollTop = 0
    else this.#listPosition = TOP
    this.#redrawWhole()
    performance.measure('sort', 'sort-start')
  }

  /**
   * Has the books put in order of `key` in a worker (sort-worker.ts), so the page stays usable
   * meanwhile, unless they are few or in that order already. Books that change meanwhile make it
   * sort again; without workers the list sorts itself (book-list.ts).
   */
  async #inOrderOf (key: SortKey): Promise<void> {
    const books = this.#books
    while (!books.hasOrder(key) && books.all.length >= SORT_IN_WORKER && typeof Worker === 'function') {
      const version = books.version
      const column: Column = key === 'title' || key === 'author'
        ? books.all.map((book) => book[key])
        : Float64Array.from(books.all, (book) => book[key])
      const worker = new Worker(new URL('./sort-worker.ts', import.meta.url), { type: 'module' })
      try {
        const indices = await new Promise<Uint32Array>((resolve, reject) => {
          worker.onmessage = ({ data }: MessageEvent<Uint32Array>) => resolve(data)
          worker.onerror = (event) => reject(new Error(event.message))
          worker.postMessage(column, column instanceof Float64Array ? [column.buffer] : [])
        })
        books.setOrder(key, version, indices)
      } catch (error) {
        console.error(error)
        return
      } finally {
        worker.terminate()
      }
    }
  }

  /**
   * The heading of the column the list is sorted by says so, and which way; while a search is
   * asked for, the column its matches are sorted by, or none for best first.
   */
  #showOrder (): void {
    const search = this.#search
    const order = search !== null ? search.order : this.#paged?.order ?? this.#books.order
    for (const header of this.#headers) {
      if (order !== null && header.dataset.key === order.key) header.setAttribute('aria-sort', order.descending ? 'descending' : 'ascending')
      else header.removeAttribute('aria-sort')
    }
  }

  /** The list held whole shown (drawn at once with `draw`), unless a search is shown in its place. */
  #showWhole ({ draw = false } = {}): void {
    if (this.#found !== null) return
    this.#table.show(this.#books.view)
    if (draw) this.#table.draw()
  }

  /** The whole list as held, drawn again with its count (after a change, a filter or a sort). */
  #redrawWhole (): void {
    this.#showWhole({ draw: true })
    this.#showCount()
  }

  /**
   * How many books: all of them once a list held whole is in; for a list in pages, what is known
   * (more than `PAGED_ABOVE` in all, and how many match so far), the exact count once its last page
   * is read. For a search, how many matches so far, and how many once its last page is read.
   */
  #showCount (): void {
    const count = this.#elements.count
    const number = (n: number) => this.#numbers.format(n)
    const books = (n: number) => `${number(n)} ${n === 1 ? 'book' : 'books'}`
    const list = this.#paged
    const found = this.#found
    if (this.#finding !== null) {
      count.textContent = this.#finding.failed ? 'The search could not be done' : 'Searching…'
    } else if (found !== null) {
      if (found.complete && found.known === 0) count.textContent = searchFindsNothing(found.search) ? 'Type a word to search for books' : 'No matching books'
      else if (found.complete) count.textContent = `${number(found.known)} matching ${found.known === 1 ? 'book' : 'books'}`
      else count.textContent = `At least ${number(found.known)} matching books`
    } else if (this.#next !== null) {
      // The switch to pages says what it found; a new filter or order is being read
      count.textContent = list === null && this.#next.list.filter === '' ? `More than ${books(this.#pagedAbove)}` : 'Searching…'
    } else if (list !== null) {
      const all = `more than ${books(this.#pagedAbove)}`
      if (list.filter === '') count.textContent = list.complete ? books(list.known) : `More than ${books(Math.max(this.#pagedAbove, list.known))}`
      else count.textContent = `${list.complete ? '' : 'At least '}${number(list.known)} of ${all}`
    } else {
      const all = books(this.#books.all.length)
      if (!this.#loaded) count.textContent = `Loading… ${all}`
      else if (this.#books.filter === '') count.textContent = all
      else count.textContent = `${number(this.#books.view.length)} of ${all}`
    }
  }
}

interface Sight { first: number, last: number }

const TOP: Position = { row: 0, within: 0 }

/** Resolves once the next frame is painted; in a hidden tab, which paints none, after 100 ms. */
function painted (): Promise<void> {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0))
    setTimeout(resolve, 100)
  })
}

/** `?paged-above=<books>` of the page's address, else `PAGED_ABOVE`. */
function pagedAbove (): number {
  const asked = new URLSearchParams(location.search).get('paged-above')
  return asked !== null && /^\d{1,9}$/.test(asked) ? Number(asked) : PAGED_ABOVE
}

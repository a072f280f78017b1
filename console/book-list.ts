/**
 * The books the console holds and the view of them it shows: narrowed by the filter, in the
 * chosen order. Pure data, no DOM, so it is tested in Node and measured at a million books.
 *
 * - `all` stays in ascending id order, the order the service lists them in; a book added later
 *   is put in its place (ids are given in increasing order, so that is almost always the end).
 * - The view is `all` itself while there is no filter and the order is by id, ascending: no copy
 *   of a million references for nothing. Otherwise an array of its own.
 * - A filter that extends the one before (typing one more letter) narrows the current view
 *   instead of scanning every book again.
 * - The order is the service's own (`GET /books?sort=`), so a list held here and a list read in
 *   pages (paged-list.ts) show the same books in the same places: titles and authors by Unicode
 *   code point, years as numbers, ties by id ascending in both directions.
 * - Sorting by title, author or year sorts every book once and keeps that order: the other
 *   direction is the same order reversed (ties put back in id order), a filter keeps it, a
 *   change is put in its place in it. Only new books from a listing make it sort again. The page
 *   sorts a long list in a worker (sort-worker.ts) and hands the order over with `setOrder`;
 *   without one, `sortBy` sorts here.
 */
export interface Book {
  id: number
  title: string
  author: string
  year: number
}

export type SortKey = keyof Book
export interface Order { key: SortKey, descending: boolean }

const BY_ID: Order = { key: 'id', descending: false }

/**
 * Titles and authors by Unicode code point, as the service sorts them (the "C" collation):
 * `DUNE`, `Dune`, `dune`, `Émile`. JavaScript's `<` compares UTF-16 units, which differs only
 * where one string has a surrogate (half of a code point above U+FFFF) and the other a unit from
 * U+E000 to U+FFFF: the code point above U+FFFF comes last.
 */
export function compareText (a: string, b: string): number {
  const length = Math.min(a.length, b.length)
  for (let index = 0; index < length; index++) {
    const x = a.charCodeAt(index)
    const y = b.charCodeAt(index)
    if (x === y) continue
    return x >= SURROGATES && y >= SURROGATES ? inCodePointOrder(x) - inCodePointOrder(y) : x - y
  }
  return a.length - b.length
}

const SURROGATES = 0xd800
const PRIVATE_USE = 0xe000

/** A unit from U+D800 up, moved so that surrogates sort after U+E000 to U+FFFF. */
function inCodePointOrder (unit: number): number {
  return unit >= PRIVATE_USE ? unit - 0x800 : unit + 0x2000
}

/** Whether a book's title or author contains `text`, ignoring case; null for no filter. */
export function bookMatcher (text: string): ((book: Book) => boolean) | null {
  if (text === '') return null
  const pattern = new RegExp(escapeRegExp(text), 'i')
  return (book) => pattern.test(book.title) || pattern.test(book.author)
}

export class BookList {
  all: Book[] = []
  view: Book[] = this.all
  #filter = ''
  #matcher: ((book: Book) => boolean) | null = null
  order: Order = BY_ID
  #sorted = true
  /** Every book in ascending order of a key other than id, once sorted by it */
  #byKey = new Map<SortKey, Book[]>()
  /** Changes with every change of `all`: an order computed elsewhere is for one version */
  version = 0

  get filter (): string {
    return this.#filter
  }

  /** Books as they arrive from the listing, in id order, after those already held. */
  append (books: Book[]): void {
    for (const book of books) this.all.push(book)
    this.version++
    this.#byKey.clear()
    if (this.view === this.all) return
    for (const book of books) {
      if (this.#matches(book)) this.view.push(book)
    }
    // Appended at the end: in order only when the order is by id (else `refresh` sorts again)
    if (!this.#isById()) this.#sorted = false
  }

  /** Whether the view needs `refresh()` to be in order (books were appended while sorted). */
  get unsorted (): boolean {
    return !this.#sorted
  }

  setFilter (text: string): void {
    const previous = this.#filter
    this.#filter = text
    this.#matcher = bookMatcher(text)
    if (previous !== '' && text.includes(previous)) {
      // Narrower than before (more typed around the same text): only the books still shown can
      // match. The text itself, not lower-cased: the match folds case letter by letter, which
      // lower-casing whole strings does not always do (İ lower-cases to two characters)
      this.view = this.view.filter((book) => this.#matches(book))
    } else {
      this.#rebuild()
    }
  }

  /** Order by `key`; the same key again reverses the order. */
  sortBy (key: SortKey): void {
    this.order = { key, descending: this.order.key === key ? !this.order.descending : false }
    this.#rebuild()
  }

  /** Puts the view in order again after appends. */
  refresh (): void {
    if (!this.#sorted) this.#rebuild()
  }

  /** A book created or changed: put in its place in `all`, and in the view if it matches. */
  upsert (book: Book): void {
    this.version++
    const index = this.#indexOf(book.id)
    if (index < this.all.length && this.all[index]!.id === book.id) {
      const old = this.all[index]!
      this.all[index] = book
      this.#replaceInOrders(old, book)
      if (this.view !== this.all) {
        // Out, then in again where its new values put it (or not, if it no longer matches)
        const shown = this.view.indexOf(old)
        if (shown !== -1) this.view.splice(shown, 1)
        if (this.#matches(book)) this.#insertInView(book)
      }
    } else {
      this.all.splice(index, 0, book)
      this.#replaceInOrders(null, book)
      if (this.view !== this.all && this.#matches(book)) this.#insertInView(book)
    }
  }

  /** A book deleted (or found gone). */
  remove (id: number): void {
    const index = this.#indexOf(id)
    const book = this.all[index]
    if (book === undefined || book.id !== id) return
    this.version++
    this.all.splice(index, 1)
    this.#replaceInOrders(book, null)
    if (this.view !== this.all) {
      const shown = this.view.indexOf(book)
      if (shown !== -1) this.view.splice(shown, 1)
    }
  }

  /** No books, in id order again (the filter stays: it is what the person typed). */
  clear (): void {
    this.all = []
    this.version++
    this.#byKey.clear()
    this.order = BY_ID
    this.#rebuild()
  }

  #insertInView (book: Book): void {
    insertInOrder(this.view, book, comparator(this.order))
  }

  /** A book changed, added (`old` null) or removed (`book` null) in the kept orders. */
  #replaceInOrders (old: Book | null, book: Book | null): void {
    for (const [key, sorted] of this.#byKey) {
      if (old !== null) sorted.splice(sorted.indexOf(old), 1)
      if (book !== null) insertInOrder(sorted, book, comparator({ key, descending: false }))
    }
  }

  /** Whether the books are in order of `key` already (so sorting by it costs nothing). */
  hasOrder (key: SortKey): boolean {
    return key === 'id' || this.#byKey.has(key)
  }

  /**
   * The ascending order of `key`, as indices into `all` at `version` (sort-worker.ts); false,
   * and nothing kept, when the books changed since.
   */
  setOrder (key: SortKey, version: number, indices: ArrayLike<number>): boolean {
    if (version !== this.version || indices.length !== this.all.length) return false
    this.#byKey.set(key, Array.from(indices, (index) => this.all[index]!))
    return true
  }

  /** Every book in ascending order of `key`: sorted once, then kept. */
  #ascending (key: SortKey): Book[] {
    if (key === 'id') return this.all
    let sorted = this.#byKey.get(key)
    if (sorted === undefined) {
      sorted = this.all.slice().sort(comparator({ key, descending: false }))
      this.#byKey.set(key, sorted)
    }
    return sorted
  }

  /** Where the book with this id is in `all`, or where it would go. */
  #indexOf (id: number): number {
    // New books go at the end: check there before searching
    const last = this.all[this.all.length - 1]
    if (last === undefined || last.id < id) return this.all.length
    let low = 0
    let high = this.all.length
    while (low < high) {
      const middle = (low + high) >>> 1
      if (this.all[middle]!.id < id) low = middle + 1
      else high = middle
    }
    return low
  }

  #isById (): boolean {
    return this.order.key === 'id' && !this.order.descending
  }

  #matches (book: Book): boolean {
    return this.#matcher === null || this.#matcher(book)
  }

  #rebuild (): void {
    this.#sorted = true
    if (this.#matcher === null && this.#isById()) {
      this.view = this.all
      return
    }
    const ascending = this.#ascending(this.order.key)
    const view = this.#matcher === null ? ascending.slice() : ascending.filter((book) => this.#matches(book))
    if (this.order.descending) reverseKeepingTies(view, this.order.key)
    this.view = view
  }
}

/**
 * Reverses books in ascending order of `key` into descending order, ties still in ascending id
 * order (as the service has them): the whole array reversed, then each run of equal keys.
 */
function reverseKeepingTies (books: Book[], key: SortKey): void {
  books.reverse()
  let start = 0
  for (let index = 1; index <= books.length; index++) {
    if (index < books.length && books[index]![key] === books[start]![key]) continue
    if (index - start > 1) reverseRange(books, start, index)
    start = index
  }
}

function reverseRange (books: Book[], from: number, to: number): void {
  for (let low = from, high = to - 1; low < high; low++, high--) [books[low], books[high]] = [books[high]!, books[low]!]
}

/** Puts `book` where `compare` says in `books`, which is in that order (binary search). */
function insertInOrder (books: Book[], book: Book, compare: (a: Book, b: Book) => number): void {
  let low = 0
  let high = books.length
  while (low < high) {
    const middle = (low + high) >>> 1
    if (compare(books[middle]!, book) < 0) low = middle + 1
    else high = middle
  }
  books.splice(low, 0, book)
}

/**
 * The order of two books, as the service lists them: by the key (text by code point, numbers as
 * numbers), either way, then by id ascending whichever way the key goes.
 */
export function comparator ({ key, descending }: Order): (a: Book, b: Book) => number {
  const sign = descending ? -1 : 1
  if (key === 'id') return (a, b) => sign * (a.id - b.id)
  if (key === 'title' || key === 'author') return (a, b) => sign * compareText(a[key], b[key]) || a.id - b.id
  return (a, b) => sign * (a[key] - b[key]) || a.id - b.id
}

function escapeRegExp (text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')
}

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
 * - Sorting by title, author or year sorts every book once (a million titles take seconds with
 *   the reader's collation) and keeps that order: the other direction is the same order
 *   reversed, a filter keeps it, a change is put in its place in it. Only new books from a
 *   listing make it sort again. The page sorts a long list in a worker (sort-worker.ts) and
 *   hands the order over with `setOrder`; without one, `sortBy` sorts here.
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
const collator = new Intl.Collator(undefined, { sensitivity: 'base', numeric: true })

/** Titles and authors in the reader's language: case-blind, `item 9` before `item 10`. */
export const compareText: (a: string, b: string) => number = collator.compare

export class BookList {
  all: Book[] = []
  view: Book[] = this.all
  #filter = ''
  #matcher: RegExp | null = null
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
    this.#matcher = text === '' ? null : new RegExp(escapeRegExp(text), 'i')
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
    return this.#matcher === null || this.#matcher.test(book.title) || this.#matcher.test(book.author)
  }

  #rebuild (): void {
    this.#sorted = true
    if (this.#matcher === null && this.#isById()) {
      this.view = this.all
      return
    }
    const ascending = this.#ascending(this.order.key)
    const view = this.#matcher === null ? ascending.slice() : ascending.filter((book) => this.#matches(book))
    // Ties are in id order both ways (comparator): descending is exactly ascending reversed
    if (this.order.descending) view.reverse()
    this.view = view
  }
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

/** The order of two books: by the key (text in the reader's language, numbers as numbers), then id. */
export function comparator ({ key, descending }: Order): (a: Book, b: Book) => number {
  const sign = descending ? -1 : 1
  if (key === 'title' || key === 'author') {
    return (a, b) => sign * (compareText(a[key], b[key]) || a.id - b.id)
  }
  return (a, b) => sign * ((a[key] - b[key]) || a.id - b.id)
}

function escapeRegExp (text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')
}

/**
 * What the console holds and shows (console/book-list.ts): after any sequence of arriving
 * books, filters typed, orders chosen, books added, changed and deleted, the view is exactly
 * what filtering and sorting every book from scratch gives. The shortcuts (the view that is the
 * list itself, narrowing the view for a longer filter, inserting in place) change nothing.
 */
import fc from 'fast-check'
import t from 'tap'
import { BookList, comparator, type Book, type Order, type SortKey } from '../../../console/book-list.js'
import { columnOrder } from '../../../console/column-order.js'

/** The view computed the plain way. */
function expected (all: Book[], filter: string, order: Order): Book[] {
  const needle = filter.toLowerCase()
  return all
    .filter((book) => filter === '' || book.title.toLowerCase().includes(needle) || book.author.toLowerCase().includes(needle))
    .sort(comparator(order))
}

const WORDS = ['Dune', 'dune', 'Emma', 'Anne', 'anne', 'Ab', 'a.b', '(x)', 'Ünder', 'ünder']
const text = fc.constantFrom(...WORDS).chain((word) => fc.constantFrom(word, `${word} ${WORDS[word.length % WORDS.length]}`))
const fields = fc.record({ title: text, author: text, year: fc.integer({ min: -5, max: 5 }) })

type Step =
  | { kind: 'append', books: Array<Omit<Book, 'id'>> }
  | { kind: 'filter', text: string }
  | { kind: 'sort', key: SortKey }
  | { kind: 'add', book: Omit<Book, 'id'> }
  | { kind: 'change', pick: number, book: Omit<Book, 'id'> }
  | { kind: 'remove', pick: number }
  | { kind: 'sorted elsewhere', key: SortKey, stale: boolean }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('append' as const), books: fc.array(fields, { maxLength: 6 }) }),
  fc.record({ kind: fc.constant('filter' as const), text: fc.constantFrom('', 'd', 'du', 'dun', 'DUNE', 'a', 'an', 'ann', '.', '(', 'ü', 'Ü', 'zz') }),
  fc.record({ kind: fc.constant('sort' as const), key: fc.constantFrom<SortKey>('id', 'title', 'author', 'year') }),
  fc.record({ kind: fc.constant('add' as const), book: fields }),
  fc.record({ kind: fc.constant('change' as const), pick: fc.nat(), book: fields }),
  fc.record({ kind: fc.constant('remove' as const), pick: fc.nat() }),
  // The page's worker: an order computed from a column, handed over (after a change: refused)
  fc.record({ kind: fc.constant('sorted elsewhere' as const), key: fc.constantFrom<SortKey>('title', 'author', 'year'), stale: fc.boolean() })
)

t.test('the view is always the filtered, ordered list', async (t) => {
  fc.assert(fc.property(fc.array(step, { maxLength: 25 }), (steps) => {
    const list = new BookList()
    let nextId = 1
    for (const s of steps) {
      if (s.kind === 'append') list.append(s.books.map((book) => ({ id: nextId++, ...book })))
      else if (s.kind === 'filter') list.setFilter(s.text)
      else if (s.kind === 'sort') list.sortBy(s.key)
      else if (s.kind === 'add') list.upsert({ id: nextId++, ...s.book })
      else if (s.kind === 'sorted elsewhere') {
        const version = list.version
        const key = s.key
        const column = key === 'year' ? Float64Array.from(list.all, (book) => book.year) : list.all.map((book) => book[key as 'title' | 'author'])
        const indices = columnOrder(column)
        // Stale: a book changed (same count of books) or added since the order was computed
        const changed = list.all[0]
        if (s.stale) list.upsert(changed === undefined ? { id: nextId++, title: 'new', author: 'new', year: 0 } : { ...changed, title: 'zz changed', year: 9 })
        if (list.setOrder(key, version, indices) === s.stale) return false
        list.sortBy(key)
      } else if (list.all.length > 0) {
        const id = list.all[s.pick % list.all.length]!.id
        if (s.kind === 'change') list.upsert({ id, ...s.book })
        else list.remove(id)
      }
      list.refresh()
      const ids = list.all.map((book) => book.id)
      if (ids.some((id, i) => i > 0 && id <= ids[i - 1]!)) return false
      if (JSON.stringify(list.view) !== JSON.stringify(expected(list.all, list.filter, list.order))) return false
    }
    return true
  }), { numRuns: 1500 })
})

t.test('sorting: the same heading again reverses; ties keep id order', async (t) => {
  const list = new BookList()
  list.append([
    { id: 1, title: 'b', author: 'x', year: 2 },
    { id: 2, title: 'A', author: 'y', year: 1 },
    { id: 3, title: 'a', author: 'z', year: 2 },
    { id: 4, title: 'item 10', author: 'z', year: 3 },
    { id: 5, title: 'item 9', author: 'z', year: 3 }
  ])
  list.sortBy('title')
  t.strictSame(list.view.map((book) => book.id), [2, 3, 1, 4, 5], 'by code point, as the service sorts: upper case first, digits as text')
  list.sortBy('title')
  t.strictSame(list.view.map((book) => book.id), [5, 4, 1, 3, 2], 'reversed')
  list.sortBy('year')
  t.strictSame(list.order, { key: 'year', descending: false })
  t.strictSame(list.view.map((book) => book.id), [2, 1, 3, 4, 5])
  list.sortBy('id')
  t.equal(list.view, list.all, 'by id ascending the view is the list itself, not a copy')
})

t.test('a filter matches titles and authors, case-blind, and takes its text literally', async (t) => {
  const list = new BookList()
  list.append([
    { id: 1, title: 'Dune', author: 'Frank Herbert', year: 1965 },
    { id: 2, title: 'Emma', author: 'Jane Austen', year: 1815 },
    { id: 3, title: 'a.b (c)', author: 'x', year: 1 }
  ])
  list.setFilter('HERB')
  t.strictSame(list.view.map((book) => book.id), [1])
  list.setFilter('emma')
  t.strictSame(list.view.map((book) => book.id), [2])
  list.setFilter('.b (')
  t.strictSame(list.view.map((book) => book.id), [3], 'no regular expression')
  list.setFilter('.')
  t.strictSame(list.view.map((book) => book.id), [3])
})

t.test('typing on, the filter finds what it would find typed at once, İ and ß included', async (t) => {
  const list = new BookList()
  list.append([{ id: 1, title: 'İstanbul', author: 'Orhan Pamuk', year: 2003 }, { id: 2, title: 'Straße', author: 'x', year: 1 }])
  for (const [typed, found] of [['I', []], ['İ', [1]], ['İs', [1]], ['s', [1, 2]], ['st', [1, 2]], ['Stra', [2]], ['Straß', [2]]] as const) {
    list.setFilter(typed)
    t.strictSame(list.view.map((book) => book.id), found, JSON.stringify(typed))
  }
})

/**
 * The console reads `GET /books` as it arrives (console/listing-parser.ts): however the
 * answer is cut into chunks, the books come out whole, in order, each once; an answer cut off
 * before its end is an error, never a shorter list.
 */
import fc from 'fast-check'
import t from 'tap'
import { ListingParser } from '../../../console/listing-parser.js'

const MESSAGE = 'Books retrieved successfully'
const listing = (data: unknown[]) => JSON.stringify({ status: 200, message: MESSAGE, data })

/** Everything the parser gives for `text` cut at `cuts`, and whether it ended cleanly. */
function parseInChunks (text: string, cuts: number[]) {
  const parser = new ListingParser()
  const items: unknown[] = []
  let from = 0
  for (const cut of [...cuts.sort((a, b) => a - b), text.length]) {
    items.push(...parser.push(text.slice(from, cut)))
    from = Math.max(from, cut)
  }
  let ended = true
  try {
    parser.end()
  } catch {
    ended = false
  }
  return { items, ended }
}

const AWKWARD = ['', '"', '\\', '\\"', '{', '}', '[', ']', ',', '},{', '"}]', 'a\\\\"b', '📚', '\u0000', '\n']

t.test('books with every awkward character, cut anywhere', async (t) => {
  const book = fc.record({
    id: fc.integer({ min: 1 }),
    title: fc.oneof(fc.string(), fc.constantFrom(...AWKWARD)),
    author: fc.string({ unit: fc.constantFrom(...AWKWARD) }),
    year: fc.integer()
  })
  fc.assert(fc.property(fc.array(book, { maxLength: 30 }), fc.array(fc.nat(), { maxLength: 40 }), (books, cuts) => {
    const text = listing(books)
    const { items, ended } = parseInChunks(text, cuts.map((cut) => cut % (text.length + 1)))
    return ended && JSON.stringify(items) === JSON.stringify(books)
  }), { numRuns: 1000 })
})

t.test('one character at a time, and all at once', async (t) => {
  const books = [{ id: 1, title: 'a "quoted" } title', author: 'back\\slash', year: -500 }, { id: 2, title: '[x]', author: '{y}', year: 0 }]
  const text = listing(books)
  t.strictSame(parseInChunks(text, [...text].map((_, i) => i)), { items: books, ended: true })
  t.strictSame(parseInChunks(text, []), { items: books, ended: true })
  t.strictSame(parseInChunks(listing([]), [5]), { items: [], ended: true }, 'an empty list')
})

t.test('an answer cut off before its end is an error, whatever came before', async (t) => {
  const books = Array.from({ length: 20 }, (_, i) => ({ id: i + 1, title: `T${i}`, author: 'A', year: i }))
  const text = listing(books)
  const closed = text.lastIndexOf(']') + 1
  for (let end = 0; end < closed; end += 7) {
    const { items, ended } = parseInChunks(text.slice(0, end), [Math.floor(end / 2)])
    t.notOk(ended, `cut at ${end} of ${text.length}`)
    t.strictSame(items, books.slice(0, items.length), 'what came is whole books, in order')
  }
})

t.test('the books arrive as their ends arrive: the first before the rest', async (t) => {
  const parser = new ListingParser()
  const text = listing([{ id: 1, title: 'first', author: 'A', year: 1 }, { id: 2, title: 'second', author: 'B', year: 2 }])
  const firstEnd = text.indexOf('}') + 1
  t.strictSame(parser.push(text.slice(0, firstEnd - 1)), [], 'nothing before the first book ends')
  t.strictSame(parser.push(text.slice(firstEnd - 1, firstEnd)), [{ id: 1, title: 'first', author: 'A', year: 1 }])
  t.strictSame(parser.push(text.slice(firstEnd)), [{ id: 2, title: 'second', author: 'B', year: 2 }])
  parser.end()
})

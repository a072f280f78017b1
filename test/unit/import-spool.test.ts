/**
 * The spool of an import's books (src/import-spool.ts): written in batches, read back as COPY's
 * text format in chunks of whole lines, and as lines that give the books back exactly.
 */
import t, { type Test } from 'tap'
import { ImportSpool, LINE_MAX_BYTES, linesOf, spooledBook } from '../../src/import-spool.js'
import { TEXT_MAX_LENGTH, YEAR_MIN } from '../../src/schemas/book-limits.js'
import type { BookCreate } from '../../src/schemas/book.js'

const HOSTILE: BookCreate[] = [
  { title: 'Tab\there, LF\nthere, CR\rand \\ backslash \\t', author: '\\N', year: 1965 },
  { title: 'Ωμέγα 📚 «Том 2» الخطيب', author: '村上 春樹', year: -44 },
  { title: '=SUM(A1)', author: '"quoted", comma', year: 0 }
]
/** The longest line a book can make: both texts of the widest characters, the widest year. */
const WIDEST: BookCreate = { title: '€'.repeat(TEXT_MAX_LENGTH), author: '€'.repeat(TEXT_MAX_LENGTH), year: YEAR_MIN }

/** `count` books cycling through `kinds`, each title numbered so that order shows. */
function booksOf (count: number, kinds: BookCreate[]): BookCreate[] {
  return Array.from({ length: count }, (_, at) => {
    const kind = kinds[at % kinds.length]!
    return { ...kind, title: `${at} ${kind.title}`.slice(0, TEXT_MAX_LENGTH) }
  })
}

async function spoolOf (t: Test, books: BookCreate[], batch: number): Promise<ImportSpool> {
  const spool = await ImportSpool.open()
  t.teardown(() => spool.close())
  for (let at = 0; at < books.length; at += batch) await spool.write(books.slice(at, at + batch))
  await spool.flush()
  return spool
}

const numbered = (books: BookCreate[]) => books.map((book, at) => ({ n: at + 1, ...book }))

t.test('chunks: whole lines up to the size asked, every byte once, the books back as written', async (t) => {
  const books = booksOf(5000, [...HOSTILE, WIDEST])
  const spool = await spoolOf(t, books, 700)
  t.equal(spool.count, books.length)
  for (const bytes of [LINE_MAX_BYTES, 64 * 1024, 2 * 1024 * 1024]) {
    const chunks: Buffer[] = []
    for await (const chunk of spool.chunks(bytes)) chunks.push(chunk)
    t.ok(chunks.every((chunk) => chunk.length <= bytes && chunk.at(-1) === 0x0a), `chunks of ${bytes}: each ends a line, none over the size`)
    t.strictSame(chunks.flatMap(linesOf).map(spooledBook), numbered(books), `chunks of ${bytes}: the books back, in order`)
  }
})

t.test('the longest line a book makes fits the smallest chunk; smaller chunks are refused', async (t) => {
  const spool = await spoolOf(t, [WIDEST, WIDEST], 1)
  const chunks: Buffer[] = []
  for await (const chunk of spool.chunks(LINE_MAX_BYTES)) chunks.push(chunk)
  t.equal(chunks.length, 2, 'a line a chunk')
  t.ok(chunks[0]!.length > LINE_MAX_BYTES - 100, `the bound is close to the longest line (${chunks[0]!.length} of ${LINE_MAX_BYTES} bytes)`)
  await t.rejects(async () => {
    for await (const chunk of spool.chunks(LINE_MAX_BYTES - 1)) t.fail(`read ${chunk.length} bytes`)
  }, RangeError)
})

t.test('batches: the lines in input order, a given number at a time', async (t) => {
  const books = booksOf(2500, HOSTILE)
  const spool = await spoolOf(t, books, 1000)
  const sizes: number[] = []
  const read: BookCreate[] = []
  for await (const lines of spool.batches(1000)) {
    sizes.push(lines.length)
    read.push(...lines.map(spooledBook))
  }
  t.strictSame(sizes, [1000, 1000, 500])
  t.strictSame(read, numbered(books))
})

t.test('only what was flushed is read', async (t) => {
  const spool = await ImportSpool.open()
  t.teardown(() => spool.close())
  await spool.write(HOSTILE)
  const before: Buffer[] = []
  for await (const chunk of spool.chunks(LINE_MAX_BYTES)) before.push(chunk)
  t.equal(before.length, 0, 'nothing before the flush')
  await spool.flush()
  const after: BookCreate[] = []
  for await (const chunk of spool.chunks(LINE_MAX_BYTES)) after.push(...linesOf(chunk).map(spooledBook))
  t.strictSame(after, numbered(HOSTILE))
})

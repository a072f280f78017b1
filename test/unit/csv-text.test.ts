/**
 * CSV as src/csv-text.ts writes it: a field quoted exactly when PostgreSQL's `COPY ... CSV`
 * quotes it (empty, or holding a comma, a quote, a CR or an LF), its quotes doubled, nothing else
 * changed; lines end in CRLF. Any text comes back unchanged from a strict RFC 4180 reader
 * (csv-parse). The same bytes as COPY's own output, on a real database: test/app/export.test.ts.
 */
import { parse } from 'csv-parse/sync'
import fc from 'fast-check'
import t from 'tap'
import { BOOKS_CSV_HEADER, bookCsvLine, csvField } from '../../src/csv-text.js'

t.test('the header line', async (t) => {
  t.equal(BOOKS_CSV_HEADER, 'id,title,author,year\r\n')
})

t.test('a field is quoted when it is empty or holds a comma, a quote, a CR or an LF', async (t) => {
  const cases: Array<[string, string]> = [
    ['Dune', 'Dune'],
    ['', '""'],
    ['a, b', '"a, b"'],
    ['say "hi"', '"say ""hi"""'],
    ['"', '""""'],
    ['line\nbreak', '"line\nbreak"'],
    ['cr\rhere', '"cr\rhere"'],
    ['both\r\n', '"both\r\n"'],
    // Not quoted: COPY quotes none of these, and nothing is added to what a spreadsheet may run
    ['tab\there', 'tab\there'],
    ['=1+2', '=1+2'],
    ['+SUM(A1)', '+SUM(A1)'],
    ['-2', '-2'],
    ['@cmd', '@cmd'],
    [' spaces ', ' spaces '],
    ["it's", "it's"],
    ['back\\slash', 'back\\slash'],
    ['\\N', '\\N'],
    ['📚 עברית', '📚 עברית']
  ]
  for (const [text, field] of cases) t.equal(csvField(text), field, JSON.stringify(text))
})

t.test('a book is one line: its fields in the header\'s order, CRLF', async (t) => {
  t.equal(bookCsvLine({ id: 1, title: 'Dune', author: 'Frank Herbert', year: 1965 }), '1,Dune,Frank Herbert,1965\r\n')
  t.equal(bookCsvLine({ id: '42', title: 'a,b', author: '"q"', year: -300 }), '42,"a,b","""q""",-300\r\n')
  t.equal(bookCsvLine({ id: 7, title: 'x\r\ny', author: '=1', year: 0 }), '7,"x\r\ny",=1,0\r\n')
})

t.test('any text comes back unchanged from a strict RFC 4180 reader', async (t) => {
  const text = fc.string({ unit: fc.constantFrom('a', ',', '"', '\r', '\n', '\t', '=', ' ', '😀', 'ع', '\\') })
  fc.assert(fc.property(fc.array(fc.record({ title: text, author: text, year: fc.integer() }), { maxLength: 5 }), (books) => {
    const csv = BOOKS_CSV_HEADER + books.map((book, i) => bookCsvLine({ id: i + 1, ...book })).join('')
    const rows = parse(csv, { columns: true, record_delimiter: '\r\n' }) as Array<Record<string, string>>
    t.strictSame(rows, books.map((book, i) => ({ id: String(i + 1), title: book.title, author: book.author, year: String(book.year) })))
  }), { numRuns: 300 })
})

/**
 * The reader of import bodies (src/import-parse.ts): CSV, NDJSON and JSON read as they arrive,
 * each book checked as POST /book checks one, each problem at its line; the bounds; the same
 * items whatever the chunks.
 */
import Fastify from 'fastify'
import t from 'tap'
import { options as serverOptions } from '../../src/app.js'
import { bookCsvLine, BOOKS_CSV_HEADER, csvField } from '../../src/csv-text.js'
import { importFormat, ImportTooLarge, readImport, type ImportFormat, type ImportItem } from '../../src/import-parse.js'
import { BookCreateSchema } from '../../src/schemas/book.js'

const UNBOUNDED = { maxBytes: 2 ** 40, maxBooks: 2 ** 40 }

/** A body in chunks of `size` bytes. */
async function * chunksOf (body: string | Buffer, size = Infinity): AsyncGenerator<Buffer> {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size)
}

async function read (body: string | Buffer, format: ImportFormat, size = Infinity, bounds = UNBOUNDED): Promise<ImportItem[]> {
  const items: ImportItem[] = []
  for await (const batch of readImport(chunksOf(body, size), format, bounds)) items.push(...batch)
  return items
}

function book (line: number, index: number, title: string, author: string, year: number): ImportItem {
  return { kind: 'book', line, index, book: { title, author, year } }
}

function problem (line: number, index: number | null, error: string, fatal = false): ImportItem {
  return { kind: 'problem', problem: { line, book: index, error }, fatal }
}

t.test('importFormat: the three types, UTF-8 only, a CSV with its header', async (t) => {
  const cases: Array<[string | undefined, ImportFormat | null]> = [
    ['text/csv', 'csv'],
    ['text/csv; charset=utf-8', 'csv'],
    ['Text/CSV; Charset="UTF-8"; header=present', 'csv'],
    ['text/csv; charset=utf8', 'csv'],
    ['text/csv; charset=iso-8859-1', null],
    ['text/csv; charset=nonsense', null],
    ['text/csv; header=absent', null],
    ['application/x-ndjson', 'ndjson'],
    ['application/x-ndjson; charset=utf-8', 'ndjson'],
    ['application/x-ndjson; charset=utf-16', null],
    ['application/json', 'json'],
    ['application/json; charset=UTF-8', 'json'],
    ['application/json; charset=latin1', null],
    ['text/plain', null],
    ['application/ndjson', null],
    ['multipart/form-data; boundary=x', null],
    ['', null],
    [undefined, null]
  ]
  for (const [contentType, format] of cases) t.equal(importFormat(contentType), format, String(contentType))
})

t.test('CSV: books in order, with the line each starts on', async (t) => {
  const body = 'id,title,author,year\r\n' +
    '7,Dune,Frank Herbert,1965\r\n' +
    '8,"Two\r\nlines, and ""quotes""",Someone,-44\r\n' +
    '9,"x\ny\nz",Other,0042\n' +
    ',Last,One,2024'
  t.strictSame(await read(body, 'csv'), [
    book(2, 1, 'Dune', 'Frank Herbert', 1965),
    book(3, 2, 'Two\r\nlines, and "quotes"', 'Someone', -44),
    book(5, 3, 'x\ny\nz', 'Other', 42),
    book(8, 4, 'Last', 'One', 2024)
  ])
})

t.test('CSV: the header names title, author and year in any order; id is ignored', async (t) => {
  t.strictSame(await read('year,author,title\n1999,B,A\n', 'csv'), [book(2, 1, 'A', 'B', 1999)])
  t.strictSame(await read('author,id,year,title\nB,whatever,1999,A\n', 'csv'), [book(2, 1, 'A', 'B', 1999)])
  t.strictSame(await read('title,author,year\n', 'csv'), [], 'a header alone: no book, no problem')
  t.strictSame(await read('title,author,year', 'csv'), [], 'a header without its line end')
})

t.test('CSV: a UTF-8 BOM at the very start is skipped, not one elsewhere', async (t) => {
  t.strictSame(await read('\ufefftitle,author,year\r\nA,B,1\r\n', 'csv'), [book(2, 1, 'A', 'B', 1)])
  t.strictSame(await read('title,author,year\r\n\ufeffA,B,1\r\n', 'csv'), [book(2, 1, '\ufeffA', 'B', 1)])
})

t.test('CSV: a header that is missing or not the books\' is fatal, on line 1', async (t) => {
  const cases: Array<[string, string]> = [
    ['', 'no header line'],
    ['\ufeff', 'no header line'],
    ['\nA,B,1\n', 'no header line (the first line is blank)'],
    ['title,author,year,isbn\nA,B,1,x\n', 'header: unknown column "isbn" (columns: title, author, year, and id ignored)'],
    ['Title,author,year\nA,B,1\n', 'header: unknown column "Title" (columns: title, author, year, and id ignored)'],
    ['title,author,year,title\nA,B,1,C\n', 'header: column "title" appears twice'],
    ['id,title,author,year,id\n1,A,B,1,1\n', 'header: column "id" appears twice'],
    ['title,year\nA,1\n', 'header: no column "author"'],
    ['id\n1\n', 'header: no column "title", "author", "year"']
  ]
  for (const [body, error] of cases) {
    t.strictSame(await read(body, 'csv'), [problem(1, null, error, true)], JSON.stringify(body))
  }
})

t.test('CSV: quotes out of place are fatal, with the line of the record; nothing after them is read', async (t) => {
  const header = 'title,author,year\r\n'
  t.strictSame(await read(header + 'A,B,1\r\n"open,B,1\r\nC,D,2\r\n', 'csv'), [
    book(2, 1, 'A', 'B', 1),
    problem(3, null, 'a quote that is never closed', true)
  ])
  t.strictSame(await read(header + 'A,B,1\r\n"closed"then text,B,1\r\nC,D,2\r\n', 'csv'), [
    book(2, 1, 'A', 'B', 1),
    problem(3, null, 'text after a closing quote', true)
  ])
  t.strictSame(await read(header + '"two\nlines",B,1\r\nA,"B"x,1\r\nC,D,2\r\n', 'csv'), [
    book(2, 1, 'two\nlines', 'B', 1),
    problem(4, null, 'text after a closing quote', true)
  ])
  t.strictSame(await read(header + 'A,B,1\r\nun"quoted,B,1\r\nC,D,2\r\n', 'csv'), [
    book(2, 1, 'A', 'B', 1),
    problem(3, null, 'a quote inside a field that does not start with one', true)
  ])
})

t.test('CSV: another number of fields, or a blank line, is one problem; the reading goes on', async (t) => {
  const body = 'id,title,author,year\r\n' +
    '1,A,B,1\r\n' +
    '2,A,B\r\n' +
    '\r\n' +
    '3,A,B,1,extra\r\n' +
    'lone\r\n' +
    '4,"multi\r\nline",B,1,extra\r\n' +
    '5,C,D,2\r\n' +
    '\r\n'
  t.strictSame(await read(body, 'csv'), [
    book(2, 1, 'A', 'B', 1),
    problem(3, 2, '3 fields where the header has 4'),
    problem(4, null, 'blank line'),
    problem(5, 3, '5 fields where the header has 4'),
    problem(6, 4, '1 field where the header has 4'),
    problem(7, 5, '5 fields where the header has 4'),
    book(9, 6, 'C', 'D', 2),
    problem(10, null, 'blank line')
  ])
})

t.test('CSV: year is a decimal integer as text, then the book is checked as POST /book checks it', async (t) => {
  const cases: Array<[string, number | string]> = [
    ['1999', 1999],
    ['-44', -44],
    ['0', 0],
    ['007', 7],
    ['2147483647', 2147483647],
    ['-2147483648', -2147483648],
    ['2147483648', 'year: must be at most 2147483647'],
    ['-2147483649', 'year: must be at least -2147483648'],
    ['99999999999999999999999', 'year: must be at most 2147483647'],
    ['1999.0', 'year: must be an integer'],
    ['1e3', 'year: must be an integer'],
    ['+1999', 'year: must be an integer'],
    [' 1999', 'year: must be an integer'],
    ['1999 ', 'year: must be an integer'],
    ['0x10', 'year: must be an integer'],
    ['', 'year: must be an integer'],
    ['-', 'year: must be an integer'],
    ['١٩٩٩', 'year: must be an integer']
  ]
  for (const [year, expected] of cases) {
    const items = await read(`title,author,year\nA,B,${csvField(year)}\n`, 'csv')
    t.strictSame(items, [typeof expected === 'number' ? book(2, 1, 'A', 'B', expected) : problem(2, 1, expected)], year)
  }
  t.strictSame(await read('title,author,year\n"",B,x\n', 'csv'), [problem(2, 1, 'title: must have at least 1 character')],
    'the first failing field in the schema\'s order, as POST /book reports it')
})

t.test('CSV: the text of each field is kept exactly; texts POST /book refuses are refused', async (t) => {
  const cases: Array<[string, string | null]> = [
    ['  padded  ', null],
    ['tab\there', null],
    ['lone\rCR', null],
    ['', 'title: must have at least 1 character'],
    ['   ', 'title: must not be blank'],
    ['a\u0000b', 'title: must not hold a NUL character'],
    ['T'.repeat(1000), null],
    ['📚'.repeat(1000), null],
    ['T'.repeat(1001), 'title: must have at most 1000 characters']
  ]
  for (const [title, error] of cases) {
    const items = await read(`title,author,year\r\n${csvField(title)},B,1\r\n`, 'csv')
    t.strictSame(items, [error === null ? book(2, 1, title, 'B', 1) : problem(2, 1, error)], JSON.stringify(title.slice(0, 20)))
  }
})

/** Texts a spreadsheet or a naive parser gets wrong. */
const HOSTILE_TEXTS = [
  'Commas, and more, commas',
  '"Quoted" and "" doubled',
  '"',
  'Line\r\nbreaks\nand\rcarriage returns',
  'Tabs\tinside\t',
  '=SUM(A1:A2)',
  '+1 (555) 0100',
  '-2+3',
  '@cmd',
  '=HYPERLINK("http://example.com","x")',
  'Emoji 📚👩🏽‍💻 and flags 🇫🇷',
  'עברית: ספר בעברית',
  'العربية \u202Eright-to-left override\u202C',
  ' leading and trailing spaces ',
  '\\N',
  'backslash \\ and \\\\',
  'a,b\r\n"c",d'
]

t.test('hostile text round-trips through the export\'s CSV (csv-text.ts) and the reader, in any chunks', async (t) => {
  const books = HOSTILE_TEXTS.map((text, at) => ({ id: at + 1, title: text, author: HOSTILE_TEXTS.at(-1 - at)!, year: at - 5 }))
  const body = BOOKS_CSV_HEADER + books.map(bookCsvLine).join('')
  for (const size of [Infinity, 7, 1]) {
    const items = await read(body, 'csv', size)
    t.strictSame(items.map((item) => item.kind === 'book' ? item.book : item),
      books.map(({ title, author, year }) => ({ title, author, year })), `chunks of ${size} bytes`)
  }
})

t.test('NDJSON: one book per line, LF or CRLF, the last line end optional', async (t) => {
  const body = '{"title":"A","author":"B","year":1}\n' +
    '{"id":5,"title":"C","author":"D","year":-2,"extra":{"x":[1]}}\r\n' +
    '  {"year":3,"author":"F","title":"E"}  \n' +
    '{"title":"G","author":"H","year":4}'
  t.strictSame(await read(body, 'ndjson'), [
    book(1, 1, 'A', 'B', 1),
    book(2, 2, 'C', 'D', -2),
    book(3, 3, 'E', 'F', 3),
    book(4, 4, 'G', 'H', 4)
  ])
  t.strictSame(await read('', 'ndjson'), [], 'an empty body: no book')
  t.strictSame(await read('\ufeff{"title":"A","author":"B","year":1}\n', 'ndjson'), [book(1, 1, 'A', 'B', 1)], 'a BOM dropped')
})

t.test('NDJSON: a blank line, a line that is not JSON, a refused book: one problem each, the reading goes on', async (t) => {
  const body = '{"title":"A","author":"B","year":1}\n' +
    '\n' +
    '   \r\n' +
    '{"title":"A","author":"B","year":1\n' +
    '{"title":"A","author":"B","year":1}{}\n' +
    '{"title":"A","author":"B","year":"1999"}\n' +
    '{"title":"A","author":"B","year":1.5}\n' +
    '{"title":"A","year":1}\n' +
    '[{"title":"A","author":"B","year":1}]\n' +
    'null\n' +
    '{"title":1,"author":"B","year":1}\n' +
    '{"title":"A","author":"B","year":1}\n' +
    '\r'
  t.strictSame(await read(body, 'ndjson'), [
    book(1, 1, 'A', 'B', 1),
    problem(2, null, 'blank line'),
    problem(3, null, 'blank line'),
    problem(4, 2, 'not JSON'),
    problem(5, 3, 'not JSON'),
    problem(6, 4, 'year: must be an integer'),
    problem(7, 5, 'year: must be an integer'),
    problem(8, 6, 'author: is required'),
    problem(9, 7, 'must be an object'),
    problem(10, 8, 'must be an object'),
    problem(11, 9, 'title: must be a string'),
    book(12, 10, 'A', 'B', 1),
    problem(13, null, 'blank line')
  ])
})

t.test('NDJSON: what json-body refuses for POST /book is refused (lone surrogates, prototype keys)', async (t) => {
  const cases: Array<[string, string | null]> = [
    ['{"title":"\\ud800","author":"B","year":1}', 'a string is not well-formed Unicode (a lone surrogate)'],
    ['{"title":"A","author":"B","year":1,"note":"x\\uDFFFy"}', 'a string is not well-formed Unicode (a lone surrogate)'],
    ['{"title":"A","author":"B","year":1,"\\udc00":1}', 'a string is not well-formed Unicode (a lone surrogate)'],
    ['{"title":"\\ud83d\\udcda","author":"B","year":1}', null],
    ['{"title":"A","author":"B","year":1,"__proto__":{"x":1}}', 'a key __proto__ or constructor.prototype is not allowed'],
    ['{"title":"A","author":"B","year":1,"deep":[{"constructor":{"prototype":{}}}]}', 'a key __proto__ or constructor.prototype is not allowed'],
    ['{"title":"A","author":"B","year":1,"constructor":"fine"}', null],
    ['{"title":"__proto__","author":"constructor","year":1}', null]
  ]
  for (const [line, error] of cases) {
    const value = JSON.parse(line) as { title: string, author: string }
    t.strictSame(await read(line + '\n', 'ndjson'), [error === null ? book(1, 1, value.title, value.author, 1) : problem(1, 1, error)], line)
  }
})

t.test('NDJSON: a line over 64 KiB is one problem, skipped as it comes, whatever the chunks', async (t) => {
  const long = `{"title":"${'x'.repeat(64 * 1024)}","author":"B","year":1}`
  const body = `{"title":"A","author":"B","year":1}\n${long}\n{"title":"C","author":"D","year":2}\n`
  for (const size of [Infinity, 1000]) {
    t.strictSame(await read(body, 'ndjson', size), [
      book(1, 1, 'A', 'B', 1),
      problem(2, 2, 'a line over 64 KiB'),
      book(3, 3, 'C', 'D', 2)
    ], `chunks of ${size} bytes`)
  }
  const fits = `{"title":"A","author":"B","year":1,"pad":"${'é'.repeat(30000)}"}`
  t.strictSame(await read(fits, 'ndjson', 999), [book(1, 1, 'A', 'B', 1)], 'a line of 64 KiB at most is read')
})

t.test('JSON: one array of books, each at the line its element starts on', async (t) => {
  const body = '\ufeff[\n' +
    '  {"title": "A", "author": "B", "year": 1},\n' +
    '  {\n' +
    '    "id": 9,\n' +
    '    "title": "Two\\nlines",\n' +
    '    "author": "D", "year": -2, "extra": {"deep": [1, {"x": null}]}\n' +
    '  }, {"title": "E", "author": "F", "year": 3}\r\n' +
    ']\n'
  t.strictSame(await read(body, 'json'), [
    book(2, 1, 'A', 'B', 1),
    book(3, 2, 'Two\nlines', 'D', -2),
    book(7, 3, 'E', 'F', 3)
  ])
  t.strictSame(await read('[]', 'json'), [], 'an empty array: no book')
  t.strictSame(await read(' \r\n[ ]\n\n', 'json'), [], 'whitespace around it')
  t.strictSame(await read('[{"title":"A","author":"B","year":1},{"title":"C","author":"D","year":2}]', 'json'),
    [book(1, 1, 'A', 'B', 1), book(1, 2, 'C', 'D', 2)], 'all on one line')
})

t.test('JSON: an element POST /book would refuse is one problem; the reading goes on', async (t) => {
  const body = '[\n' +
    '{"title":"A","author":"B","year":"1999"},\n' +
    '[{"title":"A","author":"B","year":1}],\n' +
    '"text", 3, null, true,\n' +
    '{"title":"\\ud800","author":"B","year":1},\n' +
    '{"__proto__":{"x":1},"title":"A","author":"B","year":1},\n' +
    '{"title":"","author":"B","year":1},\n' +
    '{"title":"A","author":"B","year":1}\n' +
    ']'
  t.strictSame(await read(body, 'json'), [
    problem(2, 1, 'year: must be an integer'),
    problem(3, 2, 'must be an object'),
    problem(4, 3, 'must be an object'),
    problem(4, 4, 'must be an object'),
    problem(4, 5, 'must be an object'),
    problem(4, 6, 'must be an object'),
    problem(5, 7, 'a string is not well-formed Unicode (a lone surrogate)'),
    problem(6, 8, 'a key __proto__ or constructor.prototype is not allowed'),
    problem(7, 9, 'title: must have at least 1 character'),
    book(8, 10, 'A', 'B', 1)
  ])
})

t.test('JSON: a body that is not one array, or broken JSON, is fatal at its line; nothing after it is read', async (t) => {
  const first = '[\n{"title":"A","author":"B","year":1},\n'
  const cases: Array<[string, ImportItem[]]> = [
    ['', [problem(1, null, 'not a JSON array (the body is empty)', true)]],
    [' \n ', [problem(1, null, 'not a JSON array (the body is empty)', true)]],
    ['{"title":"A","author":"B","year":1}', [problem(1, null, 'not a JSON array', true)]],
    ['"books"', [problem(1, null, 'not a JSON array', true)]],
    ['x', [problem(1, null, 'broken JSON', true)]],
    [first + '{"title":"A",,"author":"B","year":1},\n{"title":"C","author":"D","year":2}]', [book(2, 1, 'A', 'B', 1), problem(3, null, 'broken JSON', true)]],
    [first + '{"title":"C","author":"D","year":2},\n]', [book(2, 1, 'A', 'B', 1), book(3, 2, 'C', 'D', 2), problem(4, null, 'broken JSON', true)]],
    [first + '{"title":"C","author":"D","year":01}\n]', [book(2, 1, 'A', 'B', 1), problem(3, null, 'broken JSON', true)]],
    [first + '{"title":"C\tD","author":"D","year":1}\n]', [book(2, 1, 'A', 'B', 1), problem(3, null, 'broken JSON', true)]],
    [first + '{"title":"C","author":"D","year":1}\n]\n[]', [book(2, 1, 'A', 'B', 1), book(3, 2, 'C', 'D', 1), problem(5, null, 'broken JSON', true)]],
    [first + '{"title":"C","author":"D","year":1}\n', [book(2, 1, 'A', 'B', 1), book(3, 2, 'C', 'D', 1), problem(4, null, 'broken JSON', true)]],
    [first + '{"title":"C","author":"D","year":1}\u00a0]', [book(2, 1, 'A', 'B', 1), problem(3, null, 'broken JSON', true)]]
  ]
  for (const [body, items] of cases) {
    for (const size of [Infinity, 1]) t.strictSame(await read(body, 'json', size), items, `${JSON.stringify(body.slice(-30))}, chunks of ${size}`)
  }
})

t.test('JSON: an element over 64 KiB is fatal, read no further than that', async (t) => {
  const long = `[{"title":"A","author":"B","year":1},\n{"title":"${'x'.repeat(64 * 1024)}","author":"B","year":1}]`
  for (const size of [Infinity, 1000]) {
    t.strictSame(await read(long, 'json', size), [book(1, 1, 'A', 'B', 1), problem(2, null, 'a book over 64 KiB', true)], `chunks of ${size}`)
  }
  const fits = `[{"title":"A","author":"B","year":1,"pad":"${'é'.repeat(30000)}"}]`
  t.strictSame(await read(fits, 'json', 999), [book(1, 1, 'A', 'B', 1)], 'an element of less is read')
})

t.test('bytes that are not UTF-8 are fatal, on their line', async (t) => {
  const header = Buffer.from('title,author,year\nA,B,1\nC,')
  const cases: Array<[string, Buffer]> = [
    ['a byte no character starts with', Buffer.from([0xff])],
    ['a continuation byte alone', Buffer.from([0x80])],
    ['a Latin-1 é', Buffer.from([0xe9, 0x2c])],
    ['an overlong form', Buffer.from([0xc0, 0xaf])],
    ['a surrogate in UTF-8 (CESU-8)', Buffer.from([0xed, 0xa0, 0x80])],
    ['a character cut by another', Buffer.from([0xe2, 0x82, 0x41])]
  ]
  for (const [name, bad] of cases) {
    const csv = Buffer.concat([header, bad, Buffer.from('D,2\nE,F,3\n')])
    for (const size of [Infinity, 1]) {
      t.strictSame(await read(csv, 'csv', size), [book(2, 1, 'A', 'B', 1), problem(3, null, 'bytes that are not UTF-8', true)], `CSV, ${name}, chunks of ${size}`)
    }
    const json = Buffer.concat([Buffer.from('[{"title":"A","author":"B","year":1},\n\n{"title":"'), bad, Buffer.from('","author":"B","year":1}\n]')])
    for (const size of [Infinity, 1]) {
      t.strictSame(await read(json, 'json', size), [book(1, 1, 'A', 'B', 1), problem(3, null, 'bytes that are not UTF-8', true)], `JSON, ${name}, chunks of ${size}`)
    }
    const ndjson = Buffer.concat([Buffer.from('{"title":"A","author":"B","year":1}\n\n{"title":"'), bad, Buffer.from('","author":"B","year":1}\n{"title":"A","author":"B","year":1}\n')])
    for (const size of [Infinity, 1]) {
      t.strictSame(await read(ndjson, 'ndjson', size), [
        book(1, 1, 'A', 'B', 1),
        problem(2, null, 'blank line'),
        problem(3, null, 'bytes that are not UTF-8', true)
      ], `NDJSON, ${name}, chunks of ${size}`)
    }
  }
  const cut = Buffer.concat([Buffer.from('title,author,year\nA,B,1\nC,D'), Buffer.from('€').subarray(0, 2)])
  t.strictSame(await read(cut, 'csv', 1), [book(2, 1, 'A', 'B', 1), problem(3, null, 'bytes that are not UTF-8 (a character cut off)', true)])
  t.strictSame(await read(Buffer.from('€').subarray(0, 1), 'ndjson'), [problem(1, null, 'bytes that are not UTF-8 (a character cut off)', true)])
})

t.test('bounds: over maxBytes or maxBooks throws ImportTooLarge (413); at the bound is read', async (t) => {
  const csv = 'title,author,year\nA,B,1\nC,D,x\nE,F,3\n'
  const bytes = Buffer.byteLength(csv)
  t.equal((await read(csv, 'csv', 5, { maxBytes: bytes, maxBooks: 3 })).length, 3)
  const overBytes = read(csv, 'csv', 5, { maxBytes: bytes - 1, maxBooks: 3 })
  await t.rejects(overBytes, ImportTooLarge)
  t.equal((await overBytes.catch((error: unknown) => error) as ImportTooLarge).statusCode, 413)
  await t.rejects(read(csv, 'csv', 5, { maxBytes: bytes, maxBooks: 2 }), ImportTooLarge, 'a refused book counts as a book')
  const ndjson = '{"title":"A","author":"B","year":1}\n\nnot json\n'
  t.equal((await read(ndjson, 'ndjson', Infinity, { maxBytes: 1000, maxBooks: 2 })).length, 3)
  await t.rejects(read(ndjson, 'ndjson', Infinity, { maxBytes: 1000, maxBooks: 1 }), ImportTooLarge)
  const json = '[{"title":"A","author":"B","year":1}, 2]'
  t.equal((await read(json, 'json', 3, { maxBytes: 1000, maxBooks: 2 })).length, 2)
  await t.rejects(read(json, 'json', 3, { maxBytes: 1000, maxBooks: 1 }), ImportTooLarge)
  await t.rejects(read(json, 'json', 3, { maxBytes: json.length - 1, maxBooks: 2 }), ImportTooLarge)

  // The bytes are counted as they come: a body over the bound is not read to its end
  let given = 0
  async function * endless (): AsyncGenerator<Buffer> {
    yield Buffer.from('title,author,year\n')
    // Ten times the bound: a reader that does not stop fails here rather than running forever
    for (let n = 0; n < 170; n++) {
      given++
      yield Buffer.from('A,B,1\n'.repeat(1000))
    }
  }
  let problems = 0
  await t.rejects(async () => {
    for await (const batch of readImport(endless(), 'csv', { maxBytes: 100_000, maxBooks: 2 ** 40 })) problems += batch.filter((item) => item.kind !== 'book').length
  }, ImportTooLarge)
  t.equal(problems, 0)
  t.ok(given <= 17, `stopped after ${given} chunks`)
})

t.test('chunk boundaries anywhere give the same items (one byte at a time)', async (t) => {
  const csv = '\ufeffid,title,author,year\r\n' +
    '1,"Caf\u00e9, ""bar""\r\nnext",📚 Author,1999\r\n' +
    '2,A,B\r\n' +
    '\r\n' +
    '3,"",B,1\r\n' +
    '4,עברית,B,-1\n' +
    '5,last,B,2'
  const ndjson = '\ufeff{"title":"Caf\u00e9 📚","author":"B","year":1}\r\n\r\nnope\n{"title":"x\\ud800","author":"B","year":1}\n{"title":"A","author":"B","year":2}'
  const json = '\ufeff[{"title":"Caf\u00e9 📚","author":"B","year":1},\r\n[],\n{"title":"x\\ud800","author":"B","year":1},\n{"title":"A","author":"B","year":2},\n{"broken"}]'
  for (const [body, format] of [[csv, 'csv'], [ndjson, 'ndjson'], [json, 'json']] as const) {
    const whole = await read(body, format)
    t.ok(whole.length >= 5, `${format}: ${whole.length} items`)
    for (const size of [1, 2, 3, 5]) t.strictSame(await read(body, format, size), whole, `${format}, chunks of ${size} bytes`)
  }
})

t.test('books are checked exactly as POST /book checks its body (the app\'s Ajv options)', async (t) => {
  const fastify = Fastify({ ajv: serverOptions.ajv })
  fastify.post('/book', { schema: { body: BookCreateSchema } }, async (request) => request.body)
  t.teardown(() => fastify.close())
  const bodies: unknown[] = [
    { title: 'A', author: 'B', year: 1 },
    { title: 'A', author: 'B', year: '1999' },
    { title: 'A', author: 'B', year: 1999.5 },
    { title: 'A', author: 'B', year: 1e3 },
    { title: 'A', author: 'B', year: true },
    { title: 'A', author: 'B', year: null },
    { title: 'A', author: 'B', year: [1999] },
    { title: 1, author: 'B', year: 1 },
    { title: ['A'], author: 'B', year: 1 },
    { title: '', author: 'B', year: 1 },
    { title: ' \u3000', author: 'B', year: 1 },
    { title: 'a\u0000', author: 'B', year: 1 },
    { title: 'T'.repeat(1001), author: 'B', year: 1 },
    { title: '📚'.repeat(1000), author: 'B', year: 1 },
    { title: 'A', author: 'B', year: 2147483648 },
    { title: 'A', author: 'B', year: -2147483649 },
    { title: 'A', author: 'B' },
    { title: 'A', author: 'B', year: 1, id: 7, extra: 'ignored' },
    [],
    'text',
    42
  ]
  for (const body of bodies) {
    const answer = await fastify.inject({ method: 'POST', url: '/book', payload: JSON.stringify(body), headers: { 'content-type': 'application/json' } })
    const items = await read(JSON.stringify(body) + '\n', 'ndjson')
    t.strictSame(await read(`[${JSON.stringify(body)}]`, 'json'), items, 'the same in a JSON array')
    t.equal(items.length, 1)
    const item = items[0]!
    if (answer.statusCode === 200) {
      const sent = answer.json<{ title: string, author: string, year: number }>()
      t.strictSame(item, book(1, 1, sent.title, sent.author, sent.year), `accepted: ${JSON.stringify(body).slice(0, 60)}`)
    } else {
      t.equal(answer.statusCode, 400)
      t.equal(item.kind, 'problem', `refused: ${JSON.stringify(body).slice(0, 60)}`)
    }
  }
})

t.test('a million CSV lines with one bad line in the middle: exactly one problem, on its line', async (t) => {
  const LINES = 1_000_000
  const BAD = 500_001
  async function * body (): AsyncGenerator<Buffer> {
    yield Buffer.from(BOOKS_CSV_HEADER)
    let lines = ''
    for (let n = 1; n <= LINES; n++) {
      lines += n === BAD - 1 ? `${n},"Bad, ""year""",Author ${n},19x9\r\n` : `${n},Book ${n},"Author, ${n % 1000}",${1900 + (n % 100)}\r\n`
      if (n % 10_000 === 0) {
        yield Buffer.from(lines)
        lines = ''
      }
    }
  }
  const problems: ImportItem[] = []
  let books = 0
  let last = 0
  for await (const batch of readImport(body(), 'csv', UNBOUNDED)) {
    for (const item of batch) {
      if (item.kind === 'book') {
        books++
        last = item.index
      } else {
        problems.push(item)
      }
    }
  }
  t.strictSame(problems, [problem(BAD, BAD - 1, 'year: must be an integer')])
  t.equal(books, LINES - 1)
  t.equal(last, LINES)
})

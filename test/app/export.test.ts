/**
 * GET /books as an export (docs/api.md, Export): the format `Accept` chooses (CSV, NDJSON or the
 * envelope as before), CSV byte for byte as PostgreSQL's own `COPY ... CSV` writes the same rows
 * (line ends aside), NDJSON lines that are the envelope's objects, every listing parameter with
 * the same answers, failures that stay envelopes, long exports streamed, and an export cut off by
 * the database going away that ends without the chunked terminator.
 */
import { get, type IncomingHttpHeaders } from 'node:http'
import type { FastifyInstance } from 'fastify'
import type pg from 'pg'
import { to as copyTo } from 'pg-copy-streams'
import t, { type Test } from 'tap'
import { BOOKS_CSV_HEADER, bookCsvLine } from '../../src/csv-text.js'
import { build, errorEnvelope, getToken } from '../helper.js'
import { createDatabase, createDatabaseWithBooks, NEEDS_SERVER, pgClient, refuseConnections, seedBooks, STORE_INDEPENDENT } from '../helpers/database.js'
import { waitUntil } from '../helpers/wait.js'

// Exports of 150,000 books cut off, beside other test files on a slow machine (on PGlite too):
// tap's 180 s a file leaves them too little room
t.setTimeout(300_000)

interface Book { id: number, title: string, author: string, year: number }

const CSV_TYPE = 'text/csv; charset=utf-8; header=present'
const NDJSON_TYPE = 'application/x-ndjson; charset=utf-8'
const ENVELOPE_TYPE = 'application/json; charset=utf-8'
const LISTING_START = '{"status":200,"message":"Books retrieved successfully","data":['

/**
 * Text that CSV, spreadsheets and JSON each read their own way: separators, quotes, line ends
 * inside a field, tabs, what a spreadsheet takes for a formula, text beyond ASCII.
 */
const HOSTILE = [
  'a, b', 'say "hi"', '"', '""', ',', 'line\nbreak', 'carriage\rreturn', 'both\r\nends', 'tab\there', '\tleading tab',
  '=1+2', '+SUM(A1:A9)', '-2+3', '@cmd', '=HYPERLINK("http://example.com","click")', ' leading and trailing ',
  '📚 books 👩‍👩‍👧', 'עברית מימין לשמאל', 'العربية', '\u202Eright-to-left override', 'back\\slash', '\\N', '\\.', "it's",
  'ends with a quote"', '"starts with a quote', 'mixed "quotes", commas\r\nand lines'
]

/** The rows of `COPY (SELECT ...) TO STDOUT (FORMAT csv, HEADER)`, as PostgreSQL writes them. */
async function copyCsv (db: pg.Client, select: string): Promise<string> {
  const stream = db.query(copyTo(`COPY (${select}) TO STDOUT (FORMAT csv, HEADER)`))
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

/** COPY's LF line ends as CRLF; an LF inside a quoted field stays as it is. */
function crlfLineEnds (csv: string): string {
  let quoted = false
  let out = ''
  for (const char of csv) {
    if (char === '"') quoted = !quoted
    out += char === '\n' && !quoted ? '\r\n' : char
  }
  return out
}

const COPY_SELECT = 'SELECT id, title, author, year FROM books ORDER BY id'

/** A GET with the token and `accept` (none when undefined), the body as it came. */
async function exportOf (app: FastifyInstance, token: string, url: string, accept?: string) {
  const response = await app.inject({ method: 'GET', url, headers: { authorization: token, ...(accept === undefined ? {} : { accept }) } })
  return { status: response.statusCode, headers: response.headers, body: response.payload }
}

/** The path of a `Link: <path>; rel="next"`, or null without one. */
function nextPath (link: unknown): string | null {
  if (link === undefined) return null
  const match = /^<(\/books\?[^>]+)>; rel="next"$/.exec(String(link))
  if (match === null) throw new Error(`not a next link: ${String(link)}`)
  return match[1]!
}

/** Whether `Vary` names Accept. */
const variesOnAccept = (headers: IncomingHttpHeaders | Record<string, unknown>) =>
  String(headers.vary ?? '').split(',').map((name) => name.trim().toLowerCase()).includes('accept')

const csvOf = (books: Book[]) => BOOKS_CSV_HEADER + books.map(bookCsvLine).join('')
const ndjsonOf = (books: Book[]) => books.map((book) => `${JSON.stringify(book)}\n`).join('')

t.test('export as CSV and NDJSON', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  // No read timeout: pg arms one for every query, and a `COPY ... TO STDOUT` stream never clears
  // it, which would keep the test's process alive for as long after its last test
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 0 })
  const getAs = (url: string, accept?: string) => exportOf(app, token, url, accept)

  await t.test('an empty listing: the header line alone, an empty NDJSON body, an empty envelope', async (t) => {
    const csv = await getAs('/books', 'text/csv')
    t.equal(csv.status, 200)
    t.equal(csv.headers['content-type'], CSV_TYPE)
    t.equal(csv.body, 'id,title,author,year\r\n')
    const ndjson = await getAs('/books', 'application/x-ndjson')
    t.equal(ndjson.status, 200)
    t.equal(ndjson.headers['content-type'], NDJSON_TYPE)
    t.equal(ndjson.body, '')
    t.equal((await getAs('/books')).body, `${LISTING_START}]}`)
  })

  // Hostile text through the API, and an empty author (the API refuses one; the table does not)
  // through SQL, which COPY quotes to tell it from NULL
  for (const [i, title] of HOSTILE.entries()) {
    const author = HOSTILE[(i * 7 + 3) % HOSTILE.length]!
    const response = await app.inject({ method: 'POST', url: '/book', headers: { authorization: token }, payload: { title, author, year: i * 97 - 1000 } })
    if (response.statusCode !== 201) throw new Error(`POST /book ${JSON.stringify(title)}: ${response.statusCode} ${response.payload}`)
  }
  await db.query("INSERT INTO books (title, author, year) VALUES ('no author', '', 0), ('', 'no title', -1)")
  const books = (await db.query<Book>('SELECT id::int, title, author, year FROM books ORDER BY id')).rows

  t.test('Accept chooses the format by RFC 9110 q-values; a wildcard, none or another type is the envelope', async (t) => {
    const cases: Array<[string | undefined, 'csv' | 'ndjson' | 'envelope']> = [
      [undefined, 'envelope'],
      ['text/csv', 'csv'],
      ['TEXT/CSV', 'csv'],
      ['text/csv; charset=utf-8', 'csv'],
      ['text/csv; charset=UTF-8; header=present', 'csv'],
      ['text/csv; charset=latin1', 'envelope'],
      ['text/csv; header=absent', 'envelope'],
      ['application/x-ndjson; charset=utf-8', 'ndjson'],
      ['application/x-ndjson', 'ndjson'],
      ['application/json', 'envelope'],
      ['*/*', 'envelope'],
      ['text/*', 'envelope'],
      ['application/*', 'envelope'],
      ['text/html', 'envelope'],
      ['', 'envelope'],
      ['text/csv;q=0', 'envelope'],
      ['text/csv;q=0, */*', 'envelope'],
      ['application/x-ndjson;q=0, text/*;q=1', 'envelope'],
      ['text/csv;q=0.5, application/json', 'envelope'],
      ['application/json;q=0.5, text/csv', 'csv'],
      ['text/csv;q=0.4, application/x-ndjson;q=0.6', 'ndjson'],
      ['application/x-ndjson;q=0.3, text/csv;q=0.9, */*;q=0.1', 'csv'],
      ['*/*;q=1, text/csv;q=0.8', 'envelope'],
      ['text/html, text/csv;q=0.2', 'csv']
    ]
    const envelope = await getAs('/books')
    for (const [accept, format] of cases) {
      const { status, headers, body } = await getAs('/books', accept)
      const label = accept === undefined ? 'no Accept' : `Accept: ${accept}`
      t.equal(status, 200, label)
      t.ok(variesOnAccept(headers), `${label}: Vary: Accept`)
      if (format === 'csv') {
        t.equal(headers['content-type'], CSV_TYPE, `${label}: CSV`)
        t.equal(body, csvOf(books), `${label}: the books as CSV`)
      } else if (format === 'ndjson') {
        t.equal(headers['content-type'], NDJSON_TYPE, `${label}: NDJSON`)
        t.equal(body, ndjsonOf(books), `${label}: the books as NDJSON`)
      } else {
        t.equal(headers['content-type'], ENVELOPE_TYPE, `${label}: the envelope`)
        t.equal(body, envelope.body, `${label}: the same bytes as without Accept`)
      }
    }
  })

  t.test('the envelope holds the same bytes as ever: PostgreSQL\'s JSON of each book', async (t) => {
    const { body, headers } = await getAs('/books')
    t.equal(body, `${LISTING_START}${books.map((book) => JSON.stringify(book)).join(',')}]}`)
    t.equal(headers['content-type'], ENVELOPE_TYPE)
    t.equal(headers['content-length'], String(Buffer.byteLength(body)), 'in one piece')
  })

  t.test('CSV: the bytes PostgreSQL\'s COPY ... CSV writes for the same rows, with CRLF line ends', async (t) => {
    const copied = await copyCsv(db, COPY_SELECT)
    t.ok(copied.includes('"line\nbreak"') && copied.includes('"both\r\nends"'), 'precondition: COPY keeps line ends inside quoted fields')
    const { body } = await getAs('/books', 'text/csv')
    t.equal(body, crlfLineEnds(copied), 'the export is COPY\'s output')
    t.equal(body, csvOf(books), 'and what bookCsvLine writes')
    // Nothing added to a field that a spreadsheet may take for a formula
    for (const text of ['=1+2', '+SUM(A1:A9)', '-2+3', '@cmd', '\tleading tab']) {
      t.ok(body.split('\r\n').some((line) => line.split(',').includes(text)), `${JSON.stringify(text)} as stored, unquoted`)
    }
    t.ok(body.includes(',"",0\r\n') && body.includes(',"",no title,-1\r\n'), 'an empty text quoted, as COPY quotes it')
  })

  t.test('NDJSON: one line per book, each exactly the object the envelope holds for it', async (t) => {
    const envelope = await getAs('/books')
    const { body } = await getAs('/books', 'application/x-ndjson')
    const lines = body.split('\n')
    t.equal(lines.pop(), '', 'every line ends in LF')
    t.equal(lines.length, books.length)
    t.equal(`${LISTING_START}${lines.join(',')}]}`, envelope.body, 'the envelope\'s objects, byte for byte')
    t.strictSame(lines.map((line) => JSON.parse(line)), books)
  })

  t.test('every listing parameter applies, with the same books as the envelope', async (t) => {
    const queries = ['sort=-title', 'sort=year', 'sort=author&title=a', 'title=%22', 'author=%E2%80%AE', 'year_from=-500&year_to=500&sort=-id',
      'title=no%20such%20title', 'limit=5', 'limit=3&sort=-year&title=e']
    for (const query of queries) {
      const envelope = JSON.parse((await getAs(`/books?${query}`)).body).data as Book[]
      const csv = await getAs(`/books?${query}`, 'text/csv')
      t.equal(csv.body, csvOf(envelope), `${query}: CSV (${envelope.length} books)`)
      const ndjson = await getAs(`/books?${query}`, 'application/x-ndjson')
      t.equal(ndjson.body, ndjsonOf(envelope), `${query}: NDJSON`)
    }
  })

  t.test('a walk in CSV pages: each a header and its lines, a Link while more may follow, the cursor as the envelope\'s', async (t) => {
    for (const [sort, filter] of [['title', ''], ['-year', '&author=e'], ['id', '']]) {
      const expected = JSON.parse((await getAs(`/books?sort=${sort}${filter}`)).body).data as Book[]
      const listed: string[] = []
      let pages = 0
      for (let next: string | null = `/books?limit=4&sort=${sort}${filter}`; next !== null; pages++) {
        const { status, headers, body } = await getAs(next, 'text/csv')
        t.equal(status, 200)
        t.ok(body.startsWith(BOOKS_CSV_HEADER), 'a header line on every page')
        listed.push(body.slice(BOOKS_CSV_HEADER.length))
        next = nextPath(headers.link)
        if (next !== null) t.match(next, /&cursor=[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/)
        // The envelope takes up the walk where the CSV page left it
        if (pages === 1 && next !== null) {
          const { body: onward } = await getAs(next)
          const rest = JSON.parse(onward).data as Book[]
          t.strictSame(rest, expected.slice(8, 12), `${sort}${filter}: an envelope page goes on from a CSV page's cursor`)
        }
      }
      t.equal(listed.join(''), expected.map(bookCsvLine).join(''), `${sort}${filter}: every book once, in order`)
      t.equal(pages, Math.floor(expected.length / 4) + 1, `${sort}${filter}: ${pages} pages`)
    }
  })

  t.test('failures are envelopes, whatever Accept asks for', async (t) => {
    for (const accept of ['text/csv', 'application/x-ndjson']) {
      for (const url of ['/books?limit=0', '/books?sort=price', '/books?cursor=garbage', '/books?limit=5&limit=5']) {
        const { status, headers, body } = await getAs(url, accept)
        t.equal(status, 400, `${accept} ${url}`)
        t.equal(headers['content-type'], ENVELOPE_TYPE)
        t.strictSame(JSON.parse(body), errorEnvelope(400, 'Invalid input'))
        t.ok(variesOnAccept(headers), 'Vary: Accept')
      }
      const anonymous = await app.inject({ method: 'GET', url: '/books', headers: { accept } })
      t.equal(anonymous.statusCode, 401, `${accept}: no token`)
      t.strictSame(anonymous.json(), errorEnvelope(401, 'Authorization token required'))
      t.ok(variesOnAccept(anonymous.headers), 'Vary: Accept')
    }
  })

  t.test('a long export is streamed, page by page, and is still COPY\'s output', async (t) => {
    await seedBooks(db, 2600)
    const all = (await db.query<Book>('SELECT id::int, title, author, year FROM books ORDER BY id')).rows
    const csv = await getAs('/books', 'text/csv')
    t.equal(csv.headers['transfer-encoding'], 'chunked', 'streamed')
    t.equal(csv.body, crlfLineEnds(await copyCsv(db, COPY_SELECT)), `all ${all.length} books, as COPY writes them`)
    const ndjson = await getAs('/books', 'application/x-ndjson')
    t.equal(ndjson.headers['transfer-encoding'], 'chunked', 'streamed')
    t.equal(ndjson.body, ndjsonOf(all))
    for (const query of ['sort=-title', 'title=title%201&sort=year']) {
      const envelope = JSON.parse((await getAs(`/books?${query}`)).body).data as Book[]
      t.ok(envelope.length > 1000, `precondition: ${query} lists more than one piece holds`)
      const sorted = await getAs(`/books?${query}`, 'text/csv')
      t.equal(sorted.headers['transfer-encoding'], 'chunked', `${query}: streamed`)
      t.equal(sorted.body, csvOf(envelope), `${query}: the same books as the envelope`)
    }
  })
})

/** A GET /books with `accept` on a real socket, pausable; whether it ended with its terminating chunk. */
function openExport (port: number, token: string, accept: string) {
  return new Promise<{ status: number, type: string, chunks: Buffer[], pause: () => void, resume: () => void, complete: Promise<boolean> }>((resolve, reject) => {
    const chunks: Buffer[] = []
    const request = get({ host: '127.0.0.1', port, path: '/books', headers: { authorization: token, accept } }, (response) => {
      const complete = new Promise<boolean>((resolve) => response.on('close', () => resolve(response.complete)))
      response.on('error', () => {})
      response.on('data', (chunk: Buffer) => chunks.push(chunk))
      resolve({
        status: response.statusCode ?? 0,
        type: String(response.headers['content-type']),
        chunks,
        pause: () => response.pause(),
        resume: () => response.resume(),
        complete
      })
    })
    request.on('error', () => {})
    request.once('error', reject)
  })
}

/**
 * An export whose next page fails once its status and first bytes have gone out (`breakIt`
 * makes the database go away, and answers what brings it back): the connection ends without the
 * terminating chunk, as the envelope's listing does (test/process/long-listings.test.ts).
 */
async function cutOff (t: Test, port: number, token: string, accept: string, breakIt: () => Promise<() => Promise<void>>) {
  const exported = await openExport(port, token, accept)
  t.equal(exported.status, 200, 'the status went out')
  await waitUntil(() => exported.chunks.length > 0, 5000, 'the first bytes')
  exported.pause()
  const mend = await breakIt()
  exported.resume()
  t.equal(await exported.complete, false, 'the answer ends without its terminating chunk')
  const text = Buffer.concat(exported.chunks).toString('utf8')
  const lines = text.split('\n')
  t.ok(lines.length > 1000 && lines.length < BOOKS_TO_CUT, `part of the export arrived (${lines.length} lines)`)
  await mend()
  return { type: exported.type, text }
}

/** Enough books that what the sockets' buffers take of a paused export is far from all of it. */
const BOOKS_TO_CUT = 150_000

t.test('an export cut off after its first bytes ends without the chunked terminator', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabaseWithBooks(t, BOOKS_TO_CUT)
  const app = await build(t, dbUrl)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as { port: number }).port
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 60_000 })
  const renameBooks = async () => {
    await db.query('ALTER TABLE books RENAME TO books_away')
    return async () => { await db.query('ALTER TABLE books_away RENAME TO books') }
  }
  for (const [accept, type, start] of [['text/csv', CSV_TYPE, 'id,title,author,year\r\n1,Title 1,Author 1,1\r\n'],
    ['application/x-ndjson', NDJSON_TYPE, '{"id":1,"title":"Title 1","author":"Author 1","year":1}\n']] as const) {
    await t.test(`${accept}: the table goes away`, async (t) => {
      const exported = await cutOff(t, port, token, accept, renameBooks)
      t.equal(exported.type, type)
      t.ok(exported.text.startsWith(start), 'the export as it began')
    })
  }
  await t.test('text/csv: the database refuses connections and ends its sessions', { skip: NEEDS_SERVER }, async (t) => {
    const exported = await cutOff(t, port, token, 'text/csv', () => refuseConnections(t, dbUrl))
    t.ok(exported.text.startsWith(BOOKS_CSV_HEADER))
  })
})

/**
 * POST /books, an import: each body type and each answer format, ids in input order, hostile
 * text stored exactly, all or nothing (a bad line, a body cut off, over a limit: nothing stored,
 * nothing in the feed), the dry run's report, the idempotency key, imports at once and their
 * bound, the token checked before the body is read, the spool gone on every path; on PGlite, one
 * import at a time, and what other requests get while a transaction holds the store. What is
 * stored is read back with SQL.
 */
import { randomUUID } from 'node:crypto'
import { readdirSync, readlinkSync } from 'node:fs'
import { connect } from 'node:net'
import type { FastifyInstance, InjectOptions } from 'fastify'
import type pg from 'pg'
import t, { type Test } from 'tap'
import { keyLock } from '../../plugins/app/books-repository.js'
import { build, errorEnvelope, getToken } from '../helper.js'
import { NEEDS_EMBEDDED, NEEDS_SERVER, STORE_INDEPENDENT, createDatabase, pgClient } from '../helpers/database.js'
import { FeedClient } from '../helpers/feed.js'
import { waitUntil } from '../helpers/wait.js'

interface Book { title: string, author: string, year: number }

const INVALID_IMPORT = errorEnvelope(400, 'Invalid import: send it with ?dry_run=true for the lines refused')
const CSV = 'text/csv'
const NDJSON = 'application/x-ndjson'
const JSON_TYPE = 'application/json'

/** Text no naive CSV, NDJSON or COPY writer survives. */
const HOSTILE: Book[] = [
  { title: 'Commas, "quotes", and ""doubled""', author: 'Tab\there, backslash \\ and \\t', year: 1 },
  { title: 'Line\nfeed and\r\ncarriage\rreturn', author: '=HYPERLINK("http://x")', year: -2 },
  { title: '+1 and -1 and @SUM(A1)', author: '\\.', year: 2147483647 },
  { title: '📚 emoji 👩‍👩‍👧 and ZWJ', author: 'عربي עברית RTL \u202eevil\u202c', year: -2147483648 },
  { title: ' leading and trailing spaces ', author: '"', year: 0 },
  { title: '\\N', author: 'x\\', year: 3 }
]

const books = (count: number, prefix = 'Book'): Book[] =>
  Array.from({ length: count }, (_, i) => ({ title: `${prefix} ${i + 1}`, author: `Author ${i % 97}`, year: 1000 + (i % 1000) }))

const csvField = (text: string) => /[",\r\n]/.test(text) || text === '' ? `"${text.replaceAll('"', '""')}"` : text
const csvOf = (list: Book[]) => `title,author,year\r\n${list.map((b) => `${csvField(b.title)},${csvField(b.author)},${b.year}\r\n`).join('')}`
const ndjsonOf = (list: Book[]) => list.map((b) => `${JSON.stringify(b)}\n`).join('')
const jsonOf = (list: Book[]) => JSON.stringify(list)
const BODIES: Array<[string, (list: Book[]) => string]> = [[CSV, csvOf], [NDJSON, ndjsonOf], [JSON_TYPE, jsonOf]]

/** The descriptors this process holds on spool files (unlinked: `(deleted)`). */
function openSpools (): number {
  let count = 0
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).includes('bookkeeping-import-')) count++
    } catch {}
  }
  return count
}

interface Setup {
  app: FastifyInstance
  token: string
  db: pg.Client
  dbUrl: string
}

async function setUp (t: Test, env: Record<string, string> = {}): Promise<Setup> {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, env)
  return { app, token: await getToken(app), db: await pgClient(t, dbUrl), dbUrl }
}

function importBooks ({ app, token }: Setup, type: string, payload: string, headers: Record<string, string> = {}, query = '') {
  const options: InjectOptions = { method: 'POST', url: `/books${query}`, headers: { authorization: token, 'content-type': type, ...headers }, payload }
  return app.inject(options)
}

const storedBooks = async (db: pg.Client) =>
  (await db.query<Book & { id: number }>('SELECT id::int, title, author, year FROM books ORDER BY id')).rows
const storedChanges = async (db: pg.Client) =>
  (await db.query<{ kind: string, book: string }>('SELECT kind, book FROM book_changes ORDER BY seq')).rows

/** A request on a socket of its own: its head and the first part of its body sent, the rest never. */
interface HeldRequest {
  /** What the server answered so far */
  received: () => string
  /** Resolves when the server has closed the connection */
  closed: Promise<void>
  destroy: () => void
}

function holdRequest (port: number, head: string, body = ''): Promise<HeldRequest> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    const socket = connect({ port, host: '127.0.0.1' }, () => {
      socket.write(`${head}\r\n\r\n${body}`)
      resolve({ received: () => Buffer.concat(chunks).toString('utf8'), closed, destroy: () => socket.destroy() })
    })
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', reject)
  })
}

/** The app listening on a port of its own, as the raw-socket cases need. */
async function listening (setup: Setup): Promise<number> {
  await setup.app.listen({ port: 0, host: '127.0.0.1' })
  return (setup.app.server.address() as { port: number }).port
}

const noSpoolLeft = () => waitUntil(() => openSpools() === 0, 5000, 'every spool closed')

t.test('POST /books', async (t) => {
  const setup = await setUp(t)
  const { db } = setup
  t.afterEach(async () => {
    await noSpoolLeft()
  })

  t.test('each body type is stored in input order, answered with the ids in the envelope', async (t) => {
    for (const [type, bodyOf] of BODIES) {
      const list = books(25, type)
      const before = (await storedBooks(db)).length
      const answer = await importBooks(setup, type, bodyOf(list))
      t.equal(answer.statusCode, 201, type)
      t.match(answer.headers['content-type'], /^application\/json/)
      const { status, message, data } = answer.json()
      t.strictSame({ status, message }, { status: 201, message: 'Books imported' })
      t.strictSame(data.map(({ title, author, year }: Book) => ({ title, author, year })), list, `${type}: the books, in input order`)
      t.strictSame(Object.keys(data[0]), ['id', 'title', 'author', 'year'], 'each book as the envelope of one holds it')
      const ids = data.map((book: { id: number }) => book.id)
      t.ok(ids.every((id: number, i: number) => i === 0 || id > ids[i - 1]), 'ids drawn in input order')
      t.strictSame((await storedBooks(db)).slice(before), data, `${type}: stored as answered`)
    }
  })

  t.test('the answer as CSV or NDJSON when Accept asks for it, the count alone with Prefer: return=minimal', async (t) => {
    const list = books(3, 'Formats')
    const csv = await importBooks(setup, NDJSON, ndjsonOf(list), { accept: 'text/csv' })
    t.equal(csv.statusCode, 201)
    t.equal(csv.headers['content-type'], 'text/csv; charset=utf-8; header=present')
    const csvIds = [...csv.body.matchAll(/^(\d+),/gm)].map(([, id]) => Number(id))
    t.equal(csv.body, `id,title,author,year\r\n${list.map((b, i) => `${csvIds[i]},${b.title},${b.author},${b.year}\r\n`).join('')}`, 'the export\'s CSV lines')
    const ndjson = await importBooks(setup, CSV, csvOf(list), { accept: 'application/x-ndjson' })
    t.equal(ndjson.statusCode, 201)
    t.equal(ndjson.headers['content-type'], 'application/x-ndjson')
    const lines = ndjson.body.split('\n')
    t.equal(lines.pop(), '', 'each line ends in LF')
    t.strictSame(lines.map((line) => JSON.parse(line)).map(({ title, author, year }) => ({ title, author, year })), list)
    t.strictSame(lines.map((line) => Object.keys(JSON.parse(line))), list.map(() => ['id', 'title', 'author', 'year']))
    for (const headers of [{ prefer: 'return=minimal' }, { prefer: 'respond-async, return=minimal', accept: 'text/csv' }, { prefer: 'RETURN="minimal"; x=1' }] as Array<Record<string, string>>) {
      const minimal = await importBooks(setup, JSON_TYPE, jsonOf(list), headers)
      t.equal(minimal.statusCode, 201, String(headers.prefer))
      t.equal(minimal.headers['preference-applied'], 'return=minimal')
      t.match(minimal.headers['content-type'], /^application\/json/, 'the envelope whatever Accept says')
      t.strictSame(minimal.json(), { status: 201, message: 'Books imported', data: { count: 3 } })
    }
    const representation = await importBooks(setup, JSON_TYPE, jsonOf(list), { prefer: 'return=representation' })
    t.equal(representation.json().data.length, 3, 'any other preference: the books')
    t.notOk('preference-applied' in representation.headers)
  })

  t.test('an empty import is a success with no books', async (t) => {
    const before = await storedBooks(db)
    for (const [type, body] of [[CSV, 'title,author,year\r\n'], [NDJSON, ''], [JSON_TYPE, '[]']] as Array<[string, string]>) {
      const answer = await importBooks(setup, type, body)
      t.equal(answer.statusCode, 201, type)
      t.strictSame(answer.json(), { status: 201, message: 'Books imported', data: [] })
    }
    t.strictSame(await storedBooks(db), before)
  })

  t.test('hostile text is stored and answered exactly, from each body type', async (t) => {
    for (const [type, bodyOf] of BODIES) {
      const before = (await storedBooks(db)).length
      const answer = await importBooks(setup, type, bodyOf(HOSTILE))
      t.equal(answer.statusCode, 201, type)
      const stored = (await storedBooks(db)).slice(before)
      t.strictSame(stored.map(({ title, author, year }) => ({ title, author, year })), HOSTILE, `${type}: stored exactly`)
      t.strictSame(answer.json().data, stored, `${type}: answered exactly`)
      const csv = await importBooks(setup, type, bodyOf(HOSTILE), { accept: 'text/csv' })
      const stored2 = (await storedBooks(db)).slice(before + HOSTILE.length)
      t.equal(csv.body, `id,title,author,year\r\n${stored2.map((b) => `${b.id},${csvField(b.title)},${csvField(b.author)},${b.year}\r\n`).join('')}`,
        `${type}: the CSV answer holds the stored text`)
    }
  })

  t.test('ids follow input order across chunks, and the feed\'s log gets one create per book, in id order', async (t) => {
    const list = books(12_345, 'Chunked')
    const changesBefore = (await storedChanges(db)).length
    const answer = await importBooks(setup, CSV, csvOf(list), { prefer: 'return=minimal' })
    t.strictSame(answer.json().data, { count: list.length })
    const stored = (await storedBooks(db)).filter((b) => b.title.startsWith('Chunked '))
    t.strictSame(stored.map(({ title, author, year }) => ({ title, author, year })), list, 'in id order, the input\'s order')
    const changes = (await storedChanges(db)).slice(changesBefore)
    t.equal(changes.length, list.length, 'one change per book')
    t.ok(changes.every((change, i) => change.kind === 'created' && change.book === JSON.stringify(stored[i])), 'each a create of its book, in id order')
  })

  t.test('one bad book in the middle of a large import: 400, nothing stored, nothing in the log', async (t) => {
    const before = await storedBooks(db)
    const changesBefore = await storedChanges(db)
    const list: unknown[] = books(20_000, 'Middle')
    for (const [type, bodyOf] of BODIES) {
      const bad = [...list]
      bad[10_000] = { title: 'Fine', author: 'Fine', year: 'not a year' }
      const answer = await importBooks(setup, type, type === CSV ? csvOf(bad as Book[]).replace(',NaN\r\n', ',x\r\n') : bodyOf(bad as Book[]))
      t.equal(answer.statusCode, 400, type)
      t.strictSame(answer.json(), INVALID_IMPORT)
    }
    t.strictSame(await storedBooks(db), before, 'no book stored')
    t.strictSame(await storedChanges(db), changesBefore, 'no change logged')
  })

  t.test('a dry run reports the problems by line, counts them all, and stores nothing', async (t) => {
    const before = await storedBooks(db)
    const list: unknown[] = books(250, 'Dry')
    for (let i = 0; i < 150; i++) list[i + 50] = { title: '', author: 'a', year: 1 }
    const answer = await importBooks(setup, NDJSON, ndjsonOf(list as Book[]), {}, '?dry_run=true')
    t.equal(answer.statusCode, 200)
    const { status, message, data } = answer.json()
    t.strictSame({ status, message }, { status: 200, message: 'Import checked' })
    t.equal(data.books, 250)
    t.equal(data.valid, false)
    t.equal(data.problem_count, 150)
    t.equal(data.problems.length, 100, 'the first 100 listed')
    t.strictSame(data.problems.map((p: { line: number, book: number }) => [p.line, p.book]), Array.from({ length: 100 }, (_, i) => [i + 51, i + 51]))
    t.ok(data.problems.every((p: { error: string }) => typeof p.error === 'string' && p.error.length > 0))
    const valid = await importBooks(setup, CSV, csvOf(books(7, 'Dry')), {}, '?dry_run=true')
    t.strictSame(valid.json(), { status: 200, message: 'Import checked', data: { books: 7, valid: true, problems: [], problem_count: 0 } })
    const real = await importBooks(setup, CSV, csvOf(books(2, 'Not dry')), {}, '?dry_run=false')
    t.equal(real.statusCode, 201, 'dry_run=false imports')
    t.equal((await storedBooks(db)).length, before.length + 2, 'the dry runs stored nothing')
  })

  t.test('what is not an import: 415 for a body type, charset or coding it does not read; 400 for another query', async (t) => {
    const before = await storedBooks(db)
    const body = ndjsonOf(books(2, 'Refused'))
    for (const [type, headers] of [
      ['text/plain', {}],
      ['application/xml', {}],
      ['text/csv; charset=iso-8859-1', {}],
      ['application/x-ndjson; charset=utf-16', {}],
      [NDJSON, { 'content-encoding': 'gzip' }]
    ] as Array<[string, Record<string, string>]>) {
      const answer = await importBooks(setup, type, body, headers)
      t.equal(answer.statusCode, 415, `${type} ${JSON.stringify(headers)}`)
      t.strictSame(answer.json(), errorEnvelope(415, 'Unsupported media type'))
    }
    const untyped = await setup.app.inject({ method: 'POST', url: '/books', headers: { authorization: setup.token }, payload: body })
    t.equal(untyped.statusCode, 415, 'no Content-Type')
    t.equal((await importBooks(setup, 'text/csv; charset=UTF-8', csvOf(books(1, 'Charset')))).statusCode, 201, 'charset utf-8 is fine')
    t.equal((await importBooks(setup, NDJSON, ndjsonOf(books(1, 'Identity')), { 'content-encoding': 'identity' })).statusCode, 201, 'identity is fine')
    for (const query of ['?dry_run=yes', '?dry_run=', '?dry_run=true&dry_run=true', '?other=1', '?dry_run=TRUE']) {
      const answer = await importBooks(setup, NDJSON, body, {}, query)
      t.equal(answer.statusCode, 400, query)
      t.strictSame(answer.json(), errorEnvelope(400, 'Invalid input'))
    }
    t.equal((await storedBooks(db)).length, before.length + 2)
  })

  t.test('Idempotency-Key: a repeat answers the first ids and stores nothing; another body is 422', async (t) => {
    const key = `"${randomUUID()}"`
    const list = books(300, `Keyed ${key.slice(1, -1)}`)
    const first = await importBooks(setup, CSV, csvOf(list), { 'idempotency-key': key })
    t.equal(first.statusCode, 201)
    const count = (await storedBooks(db)).length
    const changes = (await storedChanges(db)).length
    for (const [type, bodyOf] of BODIES) {
      const again = await importBooks(setup, type, bodyOf(list), { 'idempotency-key': key })
      t.equal(again.statusCode, 201, `${type}: the same books again`)
      t.equal(again.body, first.body, `${type}: the first answer, byte for byte`)
    }
    const minimal = await importBooks(setup, CSV, csvOf(list), { 'idempotency-key': key, prefer: 'return=minimal' })
    t.strictSame(minimal.json().data, { count: 300 })
    t.equal((await storedBooks(db)).length, count, 'nothing stored twice')
    t.equal((await storedChanges(db)).length, changes, 'nothing logged twice')
    for (const other of [list.slice(1), [...list, list[0]!], list.map((b, i) => i === 150 ? { ...b, year: b.year + 1 } : b)]) {
      const answer = await importBooks(setup, NDJSON, ndjsonOf(other), { 'idempotency-key': key })
      t.equal(answer.statusCode, 422)
      t.strictSame(answer.json(), errorEnvelope(422, 'Idempotency key already used with a different body'))
    }
    t.equal((await storedBooks(db)).length, count)
    // A key is one request's, whichever route: a single create's key refuses an import, and back
    const single = `"${randomUUID()}"`
    const created = await setup.app.inject({ method: 'POST', url: '/book', headers: { authorization: setup.token, 'idempotency-key': single }, payload: list[0] })
    t.equal(created.statusCode, 201)
    t.equal((await importBooks(setup, JSON_TYPE, jsonOf([list[0]!]), { 'idempotency-key': single })).statusCode, 422, 'a create\'s key')
    const again = await setup.app.inject({ method: 'POST', url: '/book', headers: { authorization: setup.token, 'idempotency-key': key }, payload: list[0] })
    t.equal(again.statusCode, 422, 'an import\'s key')
    const empty = `"${randomUUID()}"`
    const none = await importBooks(setup, JSON_TYPE, '[]', { 'idempotency-key': empty })
    t.equal(none.statusCode, 201)
    t.equal((await importBooks(setup, JSON_TYPE, '[]', { 'idempotency-key': empty })).body, none.body, 'an empty import replays too')
    t.equal((await importBooks(setup, JSON_TYPE, jsonOf([list[0]!]), { 'idempotency-key': empty })).statusCode, 422)
  })

  // PGlite is one session: the test's lock would be the service's own
  t.test('a key another transaction holds is 409, and nothing is stored', { skip: NEEDS_SERVER }, async (t) => {
    const key = randomUUID()
    const before = await storedBooks(db)
    await db.query('BEGIN')
    await db.query('SELECT pg_advisory_xact_lock($1)', [keyLock(key)])
    const answer = await importBooks(setup, NDJSON, ndjsonOf(books(10, 'Held')), { 'idempotency-key': key })
    await db.query('ROLLBACK')
    t.equal(answer.statusCode, 409)
    t.strictSame(answer.json(), errorEnvelope(409, 'A request with this idempotency key is in progress'))
    t.strictSame(await storedBooks(db), before)
    t.equal((await importBooks(setup, NDJSON, ndjsonOf(books(10, 'Held')), { 'idempotency-key': key })).statusCode, 201, 'stored once the other is done')
  })

  // PGlite takes one import at a time (below)
  t.test('two imports at once: both stored whole, each with its ids in its own input order', { skip: NEEDS_SERVER }, async (t) => {
    const [a, b] = [books(3000, 'Left'), books(3000, 'Right')]
    const [left, right] = await Promise.all([importBooks(setup, CSV, csvOf(a)), importBooks(setup, NDJSON, ndjsonOf(b))])
    t.equal(left.statusCode, 201)
    t.equal(right.statusCode, 201)
    for (const [answer, list] of [[left, a], [right, b]] as const) {
      const data = answer.json().data as Array<Book & { id: number }>
      t.strictSame(data.map(({ title, author, year }) => ({ title, author, year })), list)
      t.ok(data.every((book, i) => i === 0 || book.id > data[i - 1]!.id), 'ids in input order')
      const stored = await db.query('SELECT id::int, title, author, year FROM books WHERE id = ANY($1::int8[]) ORDER BY id', [data.map((book) => book.id)])
      t.strictSame(stored.rows, data, 'stored as answered')
    }
  })

  t.test('limits: bytes and books over the bounds are 413, and nothing is stored', async (t) => {
    const bounded = await setUp(t, { IMPORT_MAX_BYTES: '2000', IMPORT_MAX_BOOKS: '10' })
    const tooLarge = errorEnvelope(413, 'Payload too large')
    const over = await importBooks(bounded, NDJSON, ndjsonOf(books(10, 'x'.repeat(200))))
    t.equal(over.statusCode, 413, 'a Content-Length over IMPORT_MAX_BYTES')
    t.strictSame(over.json(), tooLarge)
    t.equal(over.headers.connection, 'close', 'the body unread: the connection closes')
    const port = await listening(bounded)
    const announced = await holdRequest(port, `POST /books HTTP/1.1\r\nHost: x\r\nAuthorization: ${bounded.token}\r\nContent-Type: ${CSV}\r\nContent-Length: 2001`)
    await announced.closed
    t.match(announced.received(), /^HTTP\/1\.1 413 .*\r\nconnection: close\r\n/is, 'a Content-Length over it is answered with no byte of its body sent')
    // No Content-Length: the body is counted as it is read
    const chunk = ndjsonOf(books(10, 'y'.repeat(200)))
    const streamed = await holdRequest(port, `POST /books HTTP/1.1\r\nHost: x\r\nAuthorization: ${bounded.token}\r\n` +
      `Content-Type: ${NDJSON}\r\nTransfer-Encoding: chunked`, `${Buffer.byteLength(chunk).toString(16)}\r\n${chunk}\r\n`)
    await streamed.closed
    t.match(streamed.received(), /^HTTP\/1\.1 413 /, 'a body that grows past IMPORT_MAX_BYTES')
    t.match(streamed.received(), /\r\n\r\n\{"status":413,"message":"Payload too large","data":null\}$/)
    for (const [type, bodyOf] of BODIES) {
      const answer = await importBooks(bounded, type, bodyOf(books(11, 'B')))
      t.equal(answer.statusCode, 413, `${type}: a book over IMPORT_MAX_BOOKS`)
      t.strictSame(answer.json(), tooLarge)
      const dry = await importBooks(bounded, type, bodyOf(books(11, 'B')), {}, '?dry_run=true')
      t.equal(dry.statusCode, 413, `${type}: a dry run too`)
    }
    t.equal((await importBooks(bounded, CSV, csvOf(books(10, 'B')))).statusCode, 201, 'ten books are fine')
    t.equal((await storedBooks(bounded.db)).length, 10, 'only those stored')
  })

  t.test('refused before the body is read: no token, a bad token', async (t) => {
    const port = await listening(setup)
    for (const authorization of ['', `Authorization: ${setup.token}x\r\n`]) {
      // A body announced and never sent: the answer cannot have waited for it
      const held = await holdRequest(port, `POST /books HTTP/1.1\r\nHost: x\r\n${authorization}Content-Type: text/csv\r\nContent-Length: 100000000`)
      await held.closed
      t.match(held.received(), /^HTTP\/1\.1 401 /, 'answered 401')
      t.match(held.received(), /\r\nconnection: close\r\n/i, 'and the connection closed')
    }
  })
})

t.test('a body cut off halfway stores nothing; an import over IMPORTS_AT_ONCE is 503 before its body is read', async (t) => {
  const setup = await setUp(t, { IMPORTS_AT_ONCE: '1' })
  const port = await listening(setup)
  const body = csvOf(books(2000, 'Cut'))
  const head = `POST /books HTTP/1.1\r\nHost: x\r\nAuthorization: ${setup.token}\r\nContent-Type: text/csv\r\nContent-Length: ${Buffer.byteLength(body)}`
  const cut = await holdRequest(port, head, body.slice(0, body.length / 2))
  await waitUntil(() => openSpools() === 1, 5000, 'the import under way')

  const refused = await importBooks(setup, CSV, csvOf(books(1, 'Second')))
  t.equal(refused.statusCode, 503)
  t.strictSame(refused.json(), errorEnvelope(503, 'Too many imports at once'))
  t.equal(refused.headers['retry-after'], '5')
  t.equal(refused.headers.connection, 'close')

  cut.destroy()
  await noSpoolLeft()
  t.strictSame(await storedBooks(setup.db), [], 'nothing of the cut body stored')
  t.strictSame(await storedChanges(setup.db), [], 'nothing in the log')
  await waitUntil(async () => (await importBooks(setup, CSV, csvOf(books(1, 'After')))).statusCode === 201, 5000, 'the place given back')
  t.equal((await storedBooks(setup.db)).length, 1)
})

t.test('the feed sends one create per imported book, in id order', async (t) => {
  const setup = await setUp(t)
  const port = await listening(setup)
  const feed = new FeedClient(`http://127.0.0.1:${port}`, setup.token)
  t.teardown(() => feed.close())
  t.equal((await feed.connect()).status, 200)
  const list = books(1500, 'Fed')
  const answer = await importBooks(setup, NDJSON, ndjsonOf(list))
  const data = answer.json().data as Array<Book & { id: number }>
  await feed.waitFor('every create', () => feed.changes().length >= list.length)
  // A moment more for anything sent twice
  await importBooks(setup, NDJSON, ndjsonOf(books(1, 'Last')))
  await feed.waitFor('the last one', () => feed.changes().some((c) => c.book.title === 'Last 1'))
  const changes = feed.changes().filter((c) => c.book.title !== 'Last 1')
  t.strictSame(changes.map((c) => c.kind), list.map(() => 'created'), 'creates only, one per book')
  t.strictSame(changes.map((c) => c.book), data, 'each book once, in id order')
})

/**
 * `body` sent on a raw socket after `head`, `chunkBytes` every `everyMs`, until it is all sent or
 * the server closes the connection; when that came, from the first byte.
 */
function pacedRequest (port: number, head: string, body: string, chunkBytes: number, everyMs: number) {
  const bytes = Buffer.from(body)
  const chunks: Buffer[] = []
  const started = performance.now()
  const socket = connect({ port, host: '127.0.0.1' }, () => {
    socket.write(`${head}\r\nContent-Length: ${bytes.length}\r\n\r\n`)
    let sent = 0
    const timer = setInterval(() => {
      if (socket.destroyed || sent >= bytes.length) return clearInterval(timer)
      socket.write(bytes.subarray(sent, sent + chunkBytes))
      sent += chunkBytes
    }, everyMs)
    socket.once('close', () => clearInterval(timer))
  })
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.on('error', () => {})
  const closedAfter = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now() - started)))
  return { received: () => Buffer.concat(chunks).toString('utf8'), closedAfter, destroy: () => socket.destroy() }
}

/**
 * The deadlines of an import's body and of its transaction, side by side: each test waits most of
 * its time, on timeouts of 10 s and more, on a database and an app of its own. The spools are the
 * process's, so that none is left open is checked once all three have ended.
 */
t.test('the deadlines of an import', { skip: STORE_INDEPENDENT, jobs: 3 }, async (t) => {
  await Promise.all([
    t.test('a sender that stops halfway is cut off by the request timeout, and nothing of it is stored', async (t) => {
      const setup = await setUp(t)
      const port = await listening(setup)
      const body = csvOf(books(2000, 'Stopped'))
      const held = await holdRequest(port, `POST /books HTTP/1.1\r\nHost: x\r\nAuthorization: ${setup.token}\r\nContent-Type: text/csv\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}`, body.slice(0, body.length / 2))
      t.teardown(() => held.destroy())
      // The body's deadline (src/request-deadline.ts) ends it, not the client
      await held.closed
      t.match(held.received(), /^HTTP\/1\.1 408 /, 'answered 408')
      t.strictSame(await storedBooks(setup.db), [], 'nothing stored')
      t.strictSame(await storedChanges(setup.db), [], 'nothing in the log')
    }),
    t.test('an import\'s body may outlast the request timeout while it comes at 64 KiB/s or faster', async (t) => {
      const setup = await setUp(t)
      const port = await listening(setup)
      const head = `POST /books HTTP/1.1\r\nHost: x\r\nAuthorization: ${setup.token}\r\nContent-Type: text/csv\r\n` +
        'Prefer: return=minimal\r\nConnection: close'
      const steadyBody = csvOf(books(60_000, 'Steady'))
      t.ok(steadyBody.length > 12 * 128 * 1024, `precondition: ${steadyBody.length} bytes take the steady sender over 12 s`)
      // Side by side: 32 KiB every 250 ms (128 KiB/s, twice the rate) for over 12 s; 2 KiB every 250 ms (8 KiB/s)
      const steady = pacedRequest(port, head, steadyBody, 32 * 1024, 250)
      const trickling = pacedRequest(port, head, csvOf(books(60_000, 'Trickling')), 2 * 1024, 250)
      t.teardown(() => { steady.destroy(); trickling.destroy() })

      const [steadyMs, tricklingMs] = await Promise.all([steady.closedAfter, trickling.closedAfter])
      t.comment(`the steady sender answered after ${(steadyMs / 1000).toFixed(1)} s, the trickling one cut off after ${(tricklingMs / 1000).toFixed(1)} s`)
      t.ok(steadyMs > 12_000, 'the steady sender took longer than the request timeout')
      t.match(steady.received(), /^HTTP\/1\.1 201 [^]*"data":\{"count":60000\}\}$/, 'the steady sender\'s books are stored')
      t.match(trickling.received(), /^HTTP\/1\.1 408 /, 'the trickling sender is answered 408')
      // Its deadline: 10 s and an eighth of a second for each second sent at 8 KiB/s, checked each second
      t.ok(tricklingMs > 10_000 && tricklingMs < 16_000, 'about 10 s after its sending fell behind')
      const stored = await storedBooks(setup.db)
      t.equal(stored.length, 60_000, 'the steady import alone is stored')
      t.ok(stored.every(({ title }) => title.startsWith('Steady')), 'nothing of the trickling one')
    }),
    t.test('a transaction longer than the send timeout is not cut off: each chunk stored is activity', async (t) => {
      const setup = await setUp(t, { SEND_TIMEOUT_MS: '10000' })
      const port = await listening(setup)
      // Each chunk's statement lasts at least 1 s (its trigger sleeps what the insert left of the
      // second), within the 3 s statement bound however long the insert took under load (on Citus
      // too, where a chunk takes longer): twelve chunks of books are 12 s without a byte to the
      // client. On the change log, which each chunk's statement writes too: Citus runs no trigger
      // on a distributed table, and keeps the log on the coordinator
      await setup.db.query(`CREATE FUNCTION slow_insert () RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        PERFORM pg_sleep(greatest(0, 1 - extract(epoch FROM clock_timestamp() - statement_timestamp()))); RETURN NULL; END $$`)
      await setup.db.query('CREATE TRIGGER slow_insert AFTER INSERT ON book_changes FOR EACH STATEMENT EXECUTE FUNCTION slow_insert()')
      const body = csvOf(books(12 * 5000, 'Slow'))
      const answer = await holdRequest(port, `POST /books HTTP/1.1\r\nHost: x\r\nAuthorization: ${setup.token}\r\nContent-Type: text/csv\r\n` +
        `Prefer: return=minimal\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}`, body)
      await answer.closed
      t.match(answer.received(), /^HTTP\/1\.1 201 /, 'answered')
      t.match(answer.received(), /"data":\{"count":60000\}\}$/)
    })
  ])
  await waitUntil(() => openSpools() === 0, 5000, 'every spool closed').catch(() => {})
  t.equal(openSpools(), 0, 'no spool is left open by any of them')
})

// PGlite is one session, and its socket serves one transaction at a time (docs/operations.md, The embedded database)
t.test('on PGlite, one import at a time; requests wait out a transaction, answered 503 after the bounds, and are served once it ends', { skip: NEEDS_EMBEDDED }, async (t) => {
  const setup = await setUp(t)
  const before = await setup.app.inject({ method: 'POST', url: '/book', headers: { authorization: setup.token }, payload: { title: 'Before', author: 'A', year: 2000 } })
  const read = () => setup.app.inject({ method: 'GET', url: `/book/${before.json().data.id}`, headers: { authorization: setup.token } })

  // A transaction of the test's own holds the store, as an import's does, for as long as the test
  // says: the import below waits for it (within the 2 s bound on getting a connection)
  await setup.db.query('BEGIN')
  const importing = importBooks(setup, CSV, csvOf(books(10, 'First')), { prefer: 'return=minimal' })
  await waitUntil(() => openSpools() === 1, 1000, 'the import under way')
  // Whatever IMPORTS_AT_ONCE says (2): the second would only wait for the first's transaction
  const second = await importBooks(setup, CSV, csvOf(books(1, 'Second')))
  await setup.db.query('COMMIT')
  t.strictSame([second.statusCode, second.json(), second.headers['retry-after']], [503, errorEnvelope(503, 'Too many imports at once'), '5'], 'a second import')
  t.match((await importing).json(), { data: { count: 10 } }, 'the first is stored')

  await setup.db.query('BEGIN')
  const held = performance.now()
  const waits: Array<{ status: number, ms: number }> = []
  while (performance.now() - held < 4000) {
    const started = performance.now()
    const answer = await read()
    waits.push({ status: answer.statusCode, ms: performance.now() - started })
  }
  await setup.db.query('COMMIT')
  t.ok(waits.every(({ status, ms }) => status === 503 && ms >= 1900 && ms < 4000),
    `each read refused after the bound on a statement (3 s) or on getting a connection (2 s): ${JSON.stringify(waits)}`)
  const after = performance.now()
  t.equal((await read()).statusCode, 200, 'served again once the transaction has ended')
  t.ok(performance.now() - after < 1000, 'at once')
})

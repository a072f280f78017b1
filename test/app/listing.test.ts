/**
 * GET /books with query parameters (docs/api.md, Pages, filters and sorting): each sort's order,
 * the filters, pages and their Link, cursors across instances and against tampering, every
 * invalid value, and walks that list each unchanged book exactly once while books change.
 */
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { createDatabase, ON_CITUS, pgClient, seedBooks } from '../helpers/database.js'
import { base64urlTwins } from '../helpers/tokens.js'

interface Book { id: number, title: string, author: string, year: number }
type Field = 'id' | 'title' | 'author' | 'year'

const SORTS = ['id', '-id', 'title', '-title', 'author', '-author', 'year', '-year']

/** Code point order, as the "C" collation compares UTF-8: byte order of UTF-8 is code point order. */
function compareKeys (a: string | number, b: string | number): number {
  return typeof a === 'number' ? a - (b as number) : Buffer.compare(Buffer.from(a), Buffer.from(b as string))
}

/** `books` in the order `sort` names, ties by id ascending. */
function sorted (books: Book[], sort: string): Book[] {
  const descending = sort.startsWith('-')
  const field = (descending ? sort.slice(1) : sort) as Field
  return [...books].sort((a, b) => {
    const byKey = compareKeys(a[field], b[field]) * (descending ? -1 : 1)
    return byKey !== 0 ? byKey : (field === 'id' ? 0 : a.id - b.id)
  })
}

/** The path of a `Link: <path>; rel="next"`, or null without one. */
function nextPath (link: string | string[] | undefined): string | null {
  if (link === undefined) return null
  const match = /^<(\/books\?[^>]+)>; rel="next"$/.exec(String(link))
  if (match === null) throw new Error(`not a next link: ${String(link)}`)
  return match[1]!
}

/** Follows `next` from `path` to the last page: the books of every page, and the paths read. */
async function walk (app: FastifyInstance, token: string, path: string, between: (page: Book[]) => Promise<void> = async () => {}) {
  const books: Book[] = []
  const paths: string[] = []
  for (let next: string | null = path; next !== null;) {
    paths.push(next)
    const { status, body, headers } = await call(app, token, { method: 'GET', url: next })
    if (status !== 200) throw new Error(`${next}: ${status} ${JSON.stringify(body)}`)
    books.push(...body.data)
    next = nextPath(headers.link)
    await between(body.data)
  }
  return { books, paths }
}

const TITLES = ['Dune', 'dune messiah', 'DUNE', 'Émile', 'émile', 'Zebra', 'zebra', '100% pure', '100 percent',
  'snake_case', 'snakeXcase', 'back\\slash', 'backslash', '📚 books', '\uFFFD replacement', 'Ünïcödé', 'a', 'A', 'b']

t.test('listing parameters', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const get = (url: string) => call(app, token, { method: 'GET', url })
  const books: Book[] = []
  // Ties in every field: the same title, author and year under several ids
  for (let i = 0; i < 60; i++) {
    const book = { title: TITLES[i % TITLES.length]!, author: `Author ${String.fromCharCode(65 + (i % 5))}${i % 3 === 0 ? '%' : ''}`, year: (i % 7) * 100 - 300 }
    const { body } = await call(app, token, { method: 'POST', url: '/book', payload: book })
    books.push(body.data)
  }

  t.test('without parameters, or with unknown ones only, the listing is every book in id order', async (t) => {
    const plain = await get('/books')
    t.strictSame(plain.body.data, sorted(books, 'id'))
    t.equal(plain.headers.link, undefined, 'no Link')
    for (const url of ['/books?foo=bar', '/books?Limit=3&SORT=title', '/books?page=2&perPage=5']) {
      const { status, body, headers } = await get(url)
      t.equal(status, 200, url)
      t.strictSame(body, plain.body, `${url}: the same answer`)
      t.equal(headers.link, undefined, `${url}: no Link`)
    }
  })

  t.test('each sort lists every book in its order, ties by id ascending, titles by code point', async (t) => {
    for (const sort of SORTS) {
      const { body } = await get(`/books?sort=${sort}`)
      t.strictSame(body.data, sorted(books, sort), sort)
    }
    const titles = (await get('/books?sort=title')).body.data.map((book: Book) => book.title)
    // Code points: digits, then upper case, then lower case, then beyond ASCII
    t.ok(titles.indexOf('DUNE') < titles.indexOf('Dune') && titles.indexOf('Zebra') < titles.indexOf('a') &&
      titles.indexOf('zebra') < titles.indexOf('Émile') && titles.indexOf('\uFFFD replacement') < titles.indexOf('📚 books'),
    'byte order of UTF-8, whatever the server locale')
  })

  t.test('a walk over pages lists every book once, in order; a Link while more may follow', async (t) => {
    for (const sort of SORTS) {
      for (const limit of [1, 7, 60, 1000]) {
        const { books: listed, paths } = await walk(app, token, `/books?limit=${limit}&sort=${sort}`)
        t.strictSame(listed, sorted(books, sort), `${sort}, limit ${limit}: every book once, in order`)
        // A full page has a Link: the pages are full but the last, which may be empty
        t.equal(paths.length, Math.floor(books.length / limit) + 1, `${sort}, limit ${limit}: ${paths.length} pages`)
        for (const path of paths.slice(1)) {
          t.match(path, new RegExp(`^/books\\?limit=${limit}&sort=${sort.replace('-', '\\-')}&cursor=[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$`), 'the same limit and sort, a cursor')
        }
      }
    }
  })

  t.test('title and author contain the text, ignoring case; %, _ and \\ are literal; filters combine with AND', async (t) => {
    const containing = (field: 'title' | 'author', text: string) => (book: Book) => book[field].toLowerCase().includes(text.toLowerCase())
    const cases: Array<[string, (book: Book) => boolean]> = [
      ['title=dUnE', containing('title', 'dune')],
      ['title=%25', containing('title', '%')],
      ['title=_', containing('title', '_')],
      ['title=e_c', containing('title', 'e_c')],
      ['title=%5C', containing('title', '\\')],
      ['title=k%5Cs', containing('title', 'k\\s')],
      ['title=%F0%9F%93%9A', containing('title', '📚')],
      // Beyond ASCII: both stores fold what their ctype (C.UTF-8) maps one character to one
      ['title=%C3%89MILE', containing('title', 'ÉMILE')],
      ['title=%C3%BCN%C3%8F', containing('title', 'üNÏ')],
      ['author=author%20b', containing('author', 'author b')],
      ['author=%25', containing('author', '%')],
      ['year_from=0', (book) => book.year >= 0],
      ['year_to=-100', (book) => book.year <= -100],
      ['year_from=-200&year_to=200', (book) => book.year >= -200 && book.year <= 200],
      ['year_from=100&year_to=100', (book) => book.year === 100],
      ['title=dune&author=a&year_from=-300&year_to=0', (book) => containing('title', 'dune')(book) && containing('author', 'a')(book) && book.year <= 0],
      ['title=no%20such%20title', () => false],
      ['year_from=1&year_to=0', () => false]
    ]
    for (const [query, match] of cases) {
      const expected = books.filter(match)
      const { status, body } = await get(`/books?${query}`)
      t.equal(status, 200, query)
      t.strictSame(body.data, expected, `${query}: ${expected.length} books`)
      for (const sort of ['-title', 'year']) {
        t.strictSame((await walk(app, token, `/books?${query}&sort=${sort}&limit=4`)).books, sorted(expected, sort), `${query}, by ${sort}, in pages of 4`)
      }
    }
    t.ok(books.some(containing('title', '%')) && books.some((book) => !book.title.includes('%')), 'precondition: % matches some titles, not all')
    t.ok(books.filter(containing('title', 'émile')).length >= 4, 'precondition: É and é in several titles')
  })

  t.test('every invalid value is 400 Invalid input', async (t) => {
    const { headers } = await get('/books?limit=5&sort=title&title=a')
    const cursor = new URL(nextPath(headers.link)!, 'http://x').searchParams.get('cursor')!
    const [payload, signature] = cursor.split('.') as [string, string]
    const flipped = (text: string, at: number) => text.slice(0, at) + (text[at] === 'A' ? 'B' : 'A') + text.slice(at + 1)
    const invalid = [
      'limit=0', 'limit=1001', 'limit=ten', 'limit=05', 'limit=%2B5', 'limit=-1', 'limit=1.0', 'limit=', 'limit=1e2', 'limit=%205',
      'sort=price', 'sort=', 'sort=--id', 'sort=Title', 'sort=+title', 'sort=id,title',
      'title=', 'author=', `title=${'x'.repeat(1001)}`, 'title=a%00b', 'author=%00',
      'year_from=1.5', 'year_from=abc', 'year_to=2147483648', 'year_from=-2147483649', 'year_from=01', 'year_from=%2B1', 'year_to=', 'year_from=-0',
      'limit=5&limit=5', 'title=a&title=a', 'sort=id&sort=title', 'cursor=a.b&cursor=a.b',
      'cursor=', 'cursor=garbage', 'cursor=a.b', `cursor=${payload}`,
      `limit=5&sort=title&title=a&cursor=${flipped(payload, 3)}.${signature}`,
      `limit=5&sort=title&title=a&cursor=${payload}.${flipped(signature, 0)}`,
      `limit=5&sort=-title&title=a&cursor=${cursor}`,
      `limit=5&sort=title&cursor=${cursor}`,
      `limit=5&sort=title&title=A&cursor=${cursor}`,
      `limit=5&sort=title&title=a&year_from=0&cursor=${cursor}`
    ]
    for (const query of invalid) {
      const { status, body } = await get(`/books?${query}`)
      t.equal(status, 400, query.slice(0, 80))
      t.strictSame(body, errorEnvelope(400, 'Invalid input'), `${query.slice(0, 80)}: the envelope`)
    }
    const valid = await get(`/books?limit=5&sort=title&title=a&cursor=${cursor}`)
    t.equal(valid.status, 200, 'precondition: the cursor itself is accepted')
    t.equal((await get(`/books?limit=9&sort=title&title=a&cursor=${cursor}`)).status, 200, 'another limit may go on with the same cursor')
    t.strictSame((await get('/books')).body.data, sorted(books, 'id'), 'nothing changed')
  })

  t.test('a cursor spelled otherwise is 400: its signature\'s twins, the same bytes', async (t) => {
    const { headers } = await get('/books?limit=5&sort=-year')
    const cursor = new URL(nextPath(headers.link)!, 'http://x').searchParams.get('cursor')!
    const [payload, signature] = cursor.split('.') as [string, string]
    const twins = base64urlTwins(signature)
    t.equal(twins.length, 15, 'a signature of 22 characters: its last one has 4 bits that encode nothing')
    for (const twin of twins) {
      t.strictSame(Buffer.from(twin, 'base64url'), Buffer.from(signature, 'base64url'), `precondition: ${twin.slice(-1)} decodes as ${signature.slice(-1)}`)
      const { status, body } = await get(`/books?limit=5&sort=-year&cursor=${payload}.${twin}`)
      t.equal(status, 400, `ending in ${twin.slice(-1)} for ${signature.slice(-1)}: 400`)
      t.strictSame(body, errorEnvelope(400, 'Invalid input'))
    }
    t.equal((await get(`/books?limit=5&sort=-year&cursor=${cursor}`)).status, 200, 'the cursor as issued goes on')
  })

  t.test('a cursor is read by another instance, not by one with another secret', async (t) => {
    const other = await build(t, dbUrl)
    const otherToken = await getToken(other)
    const first = await get('/books?limit=25&sort=-author&year_from=-200')
    const rest = await walk(other, otherToken, nextPath(first.headers.link)!)
    t.strictSame([...first.body.data, ...rest.books], sorted(books.filter((book) => book.year >= -200), '-author'), 'the walk goes on in the other instance')
    const foreign = await build(t, dbUrl, { SECRET_TOKEN: 'another-secret-that-is-at-least-32-bytes-long' })
    const { status, body } = await call(foreign, await getToken(foreign), { method: 'GET', url: nextPath(first.headers.link)! })
    t.equal(status, 400, 'another secret: the cursor is refused')
    t.strictSame(body, errorEnvelope(400, 'Invalid input'))
  })

  t.test('filters and sorts without a limit answer the whole list, streamed when long', async (t) => {
    const db = await pgClient(t, dbUrl, { queryTimeoutMs: 60_000 })
    await seedBooks(db, 2600)
    const { rows } = await db.query<Book>('SELECT id::int, title, author, year FROM books')
    for (const sort of ['-year', 'title']) {
      const { body } = await get(`/books?sort=${sort}`)
      t.strictSame(body.data, sorted(rows, sort), `all ${rows.length} books by ${sort}`)
    }
    const { body } = await get('/books?title=title%201&sort=-id')
    t.strictSame(body.data, sorted(rows.filter((book) => book.title.toLowerCase().includes('title 1')), '-id'), `filtered: ${body.data.length} books`)
    t.ok(body.data.length > 1000, 'precondition: more than one piece holds')
  })
})

/**
 * A walk while books change between its pages and during them. Whatever happens, no book is
 * listed twice, and a book that is there for the whole walk with its sort field and filter fields
 * unchanged is listed exactly once; the books are listed in order.
 */
t.test('a walk under concurrent writes lists each unchanged book exactly once', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl)
  const request = (options: Parameters<typeof call>[2]) => call(app, token, options)
  await seedBooks(db, 400)
  const changeable: Array<[Field, (book: Book, round: number) => object]> = [
    // Moved far ahead of the walk, or back behind it
    ['title', (book, round) => ({ title: round % 2 === 0 ? `zz moved ${book.id}` : `!moved ${book.id}` })],
    ['author', (book, round) => ({ author: round % 2 === 0 ? `zz moved ${book.id}` : `!moved ${book.id}` })],
    ['year', (_, round) => ({ year: round % 2 === 0 ? 9999 : -9999 })]
  ]
  // With a filter that every seeded book matches, a page sorted by a field reads the matches
  // first (few books: plugins/app/listings-repository.ts, readsMatchesFirst); without, the index.
  // The filter is on another field than the one the test changes besides the sort field; these
  // walks come first, while every seeded book matches
  for (const [sort, filter] of [['-title', '&title=title'], ['year', '&author=AUTHOR'],
    ['title', ''], ['-title', ''], ['author', ''], ['year', ''], ['-year', ''], ['id', '']] as const) {
    const field = sort.replace('-', '') as Field
    const [, filtered, text] = /^&(title|author)=(.+)$/.exec(filter) ?? []
    const matches = (book: Book) => filtered === undefined || book[filtered as 'title' | 'author'].toLowerCase().includes(text!.toLowerCase())
    const before = new Map((await db.query<Book>('SELECT id::int, title, author, year FROM books')).rows
      .filter(matches).map((book) => [book.id, book]))
    const touched = new Set<number>()
    const seen = new Set<number>()
    const otherChanged = new Set<number>()
    let round = 0
    // Books changed by another client while pages are read
    const writing = { on: true }
    const writer = (async () => {
      for (let i = 0; writing.on; i++) {
        const ids = [...before.keys()].filter((id) => !otherChanged.has(id))
        const id = ids[(i * 37) % ids.length]!
        touched.add(id)
        await request({ method: 'PUT', url: `/book/${id}`, payload: { [field === 'id' ? 'title' : field]: field === 'year' ? i : `w${i}` } })
      }
    })()
    const walking = walk(app, token, `/books?limit=15&sort=${sort}${filter}`, async (page) => {
      // The empty page after the last full one
      if (page.length === 0) return
      round++
      // Books already listed moved ahead, books not yet listed moved, other fields changed,
      // books created and deleted
      for (const book of page.slice(0, 3)) {
        touched.add(book.id)
        const [, change] = changeable.find(([name]) => name === (field === 'id' ? 'title' : field))!
        await request({ method: 'PUT', url: `/book/${book.id}`, payload: change(book, 0) })
      }
      // Never one of the books whose other fields changed (below): those must stay listed
      const others = [...before.keys()].filter((id) => !otherChanged.has(id))
      const ahead = others[(round * 13) % others.length]!
      touched.add(ahead)
      await request({ method: 'PUT', url: `/book/${ahead}`, payload: changeable.find(([name]) => name === (field === 'id' ? 'title' : field))![1](before.get(ahead)!, round) })
      // A field that is neither the sort nor a filter, of a book not listed yet: it stays in
      // its place, and is listed exactly once
      for (const book of page) seen.add(book.id)
      const other = changeable.find(([name]) => name !== field && !(field === 'id' && name === 'title'))!
      // The middle one: with years seeded in id order, the first would be listed next (and moved)
      const candidates = [...before.keys()].filter((id) => !seen.has(id) && !touched.has(id) && !otherChanged.has(id))
      const unlisted = candidates[Math.floor(candidates.length / 2)]
      if (unlisted !== undefined) {
        otherChanged.add(unlisted)
        const { status } = await request({ method: 'PUT', url: `/book/${unlisted}`, payload: other[1](before.get(unlisted)!, round) })
        if (status !== 200) throw new Error(`PUT of another field: ${status}`)
      }
      await request({ method: 'POST', url: '/book', payload: { title: `new ${round}`, author: `new ${round}`, year: round } })
      const gone = others[(round * 29 + 7) % others.length]!
      touched.add(gone)
      await request({ method: 'DELETE', url: `/book/${gone}` })
    }).finally(() => { writing.on = false })
    const [{ books: listed }] = await Promise.all([walking, writer])
    const ids = listed.map((book) => book.id)
    const walked = `${sort}${filter}`
    t.equal(new Set(ids).size, ids.length, `${walked}: no book listed twice (${ids.length} listed)`)
    const missing = [...before.keys()].filter((id) => !touched.has(id) && !ids.includes(id))
    t.strictSame(missing, [], `${walked}: every book unchanged for the whole walk is listed (${before.size - touched.size} of them)`)
    t.ok(listed.every(matches), `${walked}: only books that match`)
    const order = sorted(listed, sort)
    t.strictSame(ids, order.map((book) => book.id), `${walked}: in order`)
    t.ok(round > 10, `precondition: ${round} pages, with changes between them`)
    const otherListed = [...otherChanged].filter((id) => !touched.has(id) && ids.includes(id))
    t.ok(otherListed.length >= 5, `precondition: ${otherListed.length} books whose other fields changed ahead of the walk, listed`)
  }
})

/**
 * The whole list, streamed, while books are deleted and created: a client that reads it at once
 * has pages read ahead (src/listing-stream.ts), each from its own snapshot. No book is listed
 * twice, the order holds, and every book there all along is listed. That a page read ahead that
 * does not fit is read again: test/unit/listing-stream.test.ts.
 */
t.test('the whole list under concurrent writes lists each book there all along exactly once', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 60_000 })
  const writer = await pgClient(t, dbUrl)
  await seedBooks(db, 40_000)
  const seeded = (await db.query<{ id: string }>('SELECT id FROM books ORDER BY id')).rows.map((row) => Number(row.id))
  // Every seventh book may go; the others are there all along
  const mayGo = seeded.filter((id) => id % 7 === 3)
  const writing = { on: true }
  let writes = 0
  const writes$ = (async () => {
    for (let i = 0; writing.on && i < mayGo.length; i++) {
      await writer.query('DELETE FROM books WHERE id = $1', [mayGo[(i * 389) % mayGo.length]])
      await writer.query("INSERT INTO books (title, author, year) VALUES ('new', 'new', 1)")
      writes++
    }
  })()
  try {
    for (let run = 0; run < 3; run++) {
      const { status, body } = await call(app, token, { method: 'GET', url: '/books' })
      t.equal(status, 200, `listing ${run + 1}: 200`)
      const ids = (body.data as Book[]).map((book) => book.id)
      t.ok(ids.every((id, i) => i === 0 || id > ids[i - 1]!), `listing ${run + 1}: in id order, none twice (${ids.length} listed)`)
      const listed = new Set(ids)
      const missing = seeded.filter((id) => id % 7 !== 3 && !listed.has(id))
      t.strictSame(missing, [], `listing ${run + 1}: every book there all along is listed`)
    }
  } finally {
    writing.on = false
    await writes$
  }
  t.ok(writes > 10, `precondition: ${writes} deletes and creates while the listings were read`)
})

// A dump restored into another cluster keeps the change marks its transactions left, which mean
// nothing there: a mark beyond every transaction the server has issued counts as no change. Not
// on Citus, whose marks come from the coordinator alone (docs/deployment.md, Citus)
t.test('a change mark from another cluster (a restored dump) hides no book from a walk', { skip: ON_CITUS || process.env.TEST_DB_DIALECT === 'citus' }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl)
  await seedBooks(db, 30)
  const { rowCount } = await db.query(`
    WITH future AS (SELECT (pg_current_xact_id()::text::int8 + 1000000)::text::xid8 AS xid)
    UPDATE books SET title_xid = future.xid, author_xid = future.xid, year_xid = future.xid
    FROM future WHERE books.id % 3 = 0`)
  t.equal(rowCount, 10, 'precondition: 10 books carry a mark from beyond this server\'s transactions')
  const all = (await db.query<{ id: string }>('SELECT id FROM books')).rows.length
  for (const sort of ['title', '-author', 'year']) {
    const { books, paths } = await walk(app, token, `/books?limit=4&sort=${sort}`)
    t.equal(new Set(books.map((book) => book.id)).size, all, `${sort}: every book listed, over ${paths.length} pages`)
    t.equal(books.length, all, `${sort}: none twice`)
  }
})

// Pages that wait for their turn share one read (plugins/app/listings-repository.ts): one asked
// for after a write must not get a read that started before it
t.test('the same page asked for again by a client sees every write committed before it', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl)
  await seedBooks(db, 30)
  const path = '/books?limit=5&sort=-id'
  const page = async () => {
    const { status, body } = await call(app, token, { method: 'GET', url: path })
    if (status !== 200) throw new Error(`${path}: ${status} ${JSON.stringify(body)}`)
    return body.data as Book[]
  }
  // More readers of the page than the client's share of the reads: most of them wait their turn
  const reading = { on: true }
  let reads = 0
  const readers = Array.from({ length: 8 }, async () => {
    while (reading.on) {
      await page()
      reads++
    }
  })
  try {
    for (let i = 0; i < 30; i++) {
      const { status, body } = await call(app, token, { method: 'POST', url: '/book', payload: { title: `Written ${i}`, author: 'Writer', year: 2000 } })
      t.equal(status, 201)
      const [first] = await page()
      if (first?.id !== body.data.id) t.fail(`write ${i}: the page asked for after it starts with ${JSON.stringify(first)}`)
    }
  } finally {
    reading.on = false
    await Promise.all(readers)
  }
  t.ok(reads > 30, `precondition: ${reads} reads of the page meanwhile`)
})

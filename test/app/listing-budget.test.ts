/**
 * What one listing may cost and what one client may hold (docs/operations.md, The cost of a
 * listing): every kind of filtered listing that no index bounds is cancelled by PostgreSQL at
 * LISTING_BUDGET_MS and answered 422 Listing too costly, logged as a request line and nothing
 * more; ordinary listings answer as ever; one client address holds at most half of the read
 * budget, and another address's listing starts beside it.
 */
import { get as httpGet, type IncomingMessage } from 'node:http'
import t from 'tap'
import { build, call, getToken } from '../helper.js'
import { NEEDS_SERVER, createDatabase, createDatabaseWithBooks, pgClient, serviceSessionsOnLock, serviceStoppedReading, waitForSessionsOnLock } from '../helpers/database.js'
import { waitUntil } from '../helpers/wait.js'
import { listingConnections } from '../../plugins/app/read-budget.js'
import { COSTLY_LISTINGS, seedCostlyBooks } from '../helpers/costly-listings.js'

/**
 * Books for the probes (`seedCostlyBooks`), and a budget that each of them costs many times over,
 * on any machine: reading every title for `title=zq` took 5 to 10 ms at 20,000 books.
 */
const BOOKS = 100_000
const BUDGET_MS = 10
const TOO_COSTLY = { status: 422, message: 'Listing too costly: narrow or change its filters', data: null }

function capture () {
  const lines: Array<Record<string, unknown>> = []
  return { lines, stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } }
}

t.test('a filtered listing over its budget is cancelled and answered 422, logged as a request line only', { skip: NEEDS_SERVER && 'PGlite cannot cancel a statement: the budget holds on a PostgreSQL server' }, async (t) => {
  const dbUrl = await createDatabaseWithBooks(t, 0)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 60_000 })
  await seedCostlyBooks(db, BOOKS)
  const { lines, stream } = capture()
  const app = await build(t, dbUrl, { LISTING_BUDGET_MS: String(BUDGET_MS) }, { logger: { level: 'info', stream } })
  await db.query('ANALYZE books')
  const token = await getToken(app)

  // A listing first, so that the pool holds a connection; then none is opened for the probes
  t.equal((await call(app, token, { method: 'GET', url: '/books?limit=1' })).status, 200)
  let opened = 0
  app.pg.pool.on('connect', () => { opened++ })
  for (const url of COSTLY_LISTINGS) {
    const { status, body } = await call(app, token, { method: 'GET', url })
    t.equal(status, 422, `${url.slice(0, 60)}: 422`)
    t.strictSame(body, TOO_COSTLY, 'in the envelope')
  }
  t.equal(opened, 0, 'the connection of a cancelled listing is kept, not discarded and opened anew')
  t.strictSame(lines.filter((line) => (line.level as number) >= 40).map((line) => line.msg), [], 'nothing logged at warn or above')
  const refused = lines.filter((line) => line.msg === 'request' && line.statusCode === 422)
  t.equal(refused.length, COSTLY_LISTINGS.length, 'each is a request line')
  t.ok(refused.every((line) => line.level === 30 && line.err === undefined), 'at info, without an error or stack')

  // The same listings with a filter an index answers at once, with the budget of a service left
  // at its default: the one above is below what a busy machine may take for such a page
  const ordinary = await build(t, dbUrl)
  const quick = await call(ordinary, token, { method: 'GET', url: '/books?limit=3&sort=-title&title=Reeel%2019999' })
  t.equal(quick.status, 200, 'a filter the trigram index narrows is answered')
  t.strictSame(quick.body.data.map((book: { title: string }) => book.title), ['The Reeel 19999'])
  const sorted = await call(ordinary, token, { method: 'GET', url: '/books?limit=10&sort=-year' })
  t.equal(sorted.status, 200, 'a listing without a filter reads through its index, with no budget of its own')
  t.equal(sorted.body.data.length, 10)
})

t.test('a streamed listing whose later page goes over its budget is cut off, logged at warn', { skip: NEEDS_SERVER }, async (t) => {
  // Titles of a thousand characters: 20 MB of listing, far more than the sockets' buffers hold
  const dbUrl = await createDatabaseWithBooks(t, 0)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 60_000 })
  await db.query(`INSERT INTO books (title, author, year)
    SELECT repeat('x', 980) || ' Title ' || g, 'Author ' || g, 2000 FROM generate_series(1, 20000) g`)
  const { lines, stream } = capture()
  // A budget the first page keeps on a busy machine (its 500 titles filtered from 20,000): the
  // page that goes over it is the one the lock below holds, however long the budget
  const app = await build(t, dbUrl, { LISTING_BUDGET_MS: '1500' }, { logger: { level: 'info', stream } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  const token = await getToken(app)

  // Every book matches: a listing streamed page by page, whose client stops reading for a while
  const response = await new Promise<IncomingMessage>((resolve, reject) => {
    httpGet({ host: '127.0.0.1', port, path: '/books?title=title', headers: { authorization: token } }, resolve).on('error', reject)
  })
  t.equal(response.statusCode, 200, 'the status goes out with the first page')
  response.pause()
  await waitUntil(() => serviceStoppedReading(db, dbUrl), 30_000, 'the listing waiting for its client')
  // Its next page now waits on a lock past the budget
  await db.query('BEGIN')
  await db.query('LOCK TABLE books IN ACCESS EXCLUSIVE MODE')
  let body = ''
  response.setEncoding('utf8')
  const cut = new Promise<boolean>((resolve) => {
    response.on('data', (chunk: string) => { body += chunk })
    response.on('error', () => {})
    response.on('close', () => resolve(!response.complete))
  })
  response.resume()
  t.ok(await cut, 'the response is cut off')
  await db.query('COMMIT')
  t.notOk(body.endsWith(']}'), 'its body is not a whole listing')
  t.ok(lines.some((line) => line.level === 40 && line.msg === 'listing cut off: a page ran past LISTING_BUDGET_MS'), 'logged at warn')
  t.strictSame(lines.filter((line) => (line.level as number) >= 50).map((line) => line.msg), [], 'nothing at error')
})

t.test('ordinary filtered and sorted listings answer within the default budget, as ever', async (t) => {
  const app = await build(t, await createDatabase(t))
  const token = await getToken(app)
  for (let i = 1; i <= 30; i++) {
    const { status } = await call(app, token, { method: 'POST', url: '/book', payload: { title: `Dune part ${i}`, author: i % 2 === 0 ? 'Frank Herbert' : 'Brian Herbert', year: 1960 + i } })
    t.equal(status, 201)
  }
  const get = async (url: string) => {
    const { status, body, headers } = await call(app, token, { method: 'GET', url })
    t.equal(status, 200, url)
    return { books: body.data as Array<{ title: string, author: string, year: number }>, link: headers.link }
  }
  t.equal((await get('/books')).books.length, 30, 'the plain listing')
  const page = await get('/books?limit=5&sort=-year&author=frank')
  t.strictSame(page.books.map((book) => book.year), [1990, 1988, 1986, 1984, 1982], 'a filter and a sort')
  t.ok(page.link, 'with a Link to the next page')
  t.strictSame((await get('/books?title=du&year_from=1985&year_to=1987&sort=title')).books.map((book) => book.title),
    ['Dune part 25', 'Dune part 26', 'Dune part 27'], 'two letters, year bounds and an order')
  t.equal((await get('/books?title=zq')).books.length, 0, 'a short filter that matches nothing, on a small table: an empty page')
})

t.test('one client address holds at most half of the read budget; another address\'s listing starts beside it', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const budget = listingConnections(app.pg.pool.options.max)
  const share = Math.max(1, Math.floor(budget / 2))
  t.ok(share < budget, `a share of ${share} of the budget's ${budget} connections`)

  // Listings that stall in PostgreSQL: ten from one address
  const admin = await pgClient(t, dbUrl)
  const holder = await pgClient(t, dbUrl)
  await holder.query('BEGIN')
  await holder.query('LOCK TABLE books IN ACCESS EXCLUSIVE MODE')
  const flood = Array.from({ length: 10 }, (_, i) =>
    call(app, token, { method: 'GET', url: `/books?limit=${i + 1}&sort=title`, remoteAddress: '192.0.2.1' }))
  await waitForSessionsOnLock(admin, dbUrl, share)
  t.equal(app.readBudget.slots.held('192.0.2.1'), share, 'the address holds its share')
  t.equal(app.readBudget.slots.pendingCount, 10 - share, 'its other listings wait in the process')

  // Another address (an IPv6 client, counted by its /64) is not queued behind them
  const other = call(app, token, { method: 'GET', url: '/books?limit=1&sort=-year', remoteAddress: '2001:db8:1:2::7' })
  await waitForSessionsOnLock(admin, dbUrl, share + 1)
  t.equal(app.readBudget.slots.held('2001:db8:1:2::'), 1, 'another address\'s listing runs beside them')
  t.equal(await serviceSessionsOnLock(admin, dbUrl), share + 1, 'and no more of the first address\'s')

  await holder.query('COMMIT')
  t.equal((await other).status, 200)
  t.strictSame((await Promise.all(flood)).map(({ status }) => status), Array.from({ length: 10 }, () => 200), 'every listing answers')
})

/**
 * GET /books beyond 1,000 books: streamed in keyset pages. The whole list arrives in order as
 * one envelope; a client that stops reading holds back the reading of pages; one that goes away
 * leaves nothing running; a failure after the status has gone out cuts the connection so that
 * the body is visibly incomplete.
 */
import { get } from 'node:http'
import t, { type Test } from 'tap'
import { build, getToken, testEnv } from '../helper.js'
import { createDatabase, createDatabaseWithBooks, NEEDS_SERVER, pgClient, serviceQueriesRunning, serviceStoppedReading, STORE_INDEPENDENT } from '../helpers/database.js'
import { type Service, spawnService } from '../helpers/service.js'
import { sleep, waitUntil } from '../helpers/wait.js'

// Four tests, with listings of up to 300,000 books, beside other test files on a slow machine:
// tap's 180 s a file leaves them too little room
t.setTimeout(300_000)

async function seed (t: Test, dbUrl: string, count: number) {
  // Hundreds of thousands of rows can take PGlite longer than a client's default bound
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 120_000 })
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'Title ' || g || ' "quoted" \\ ü', 'Author ' || g, g - 1000 FROM generate_series(1, $1::int) g`, [count])
  return db
}

t.test('a list over 1,000 books is the whole envelope, in id order', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await seed(t, dbUrl, 25_123)
  // A gap and a row moved to the end of the heap: order must come from ORDER BY, not storage
  await db.query('DELETE FROM books WHERE id BETWEEN 500 AND 1500')
  await db.query('UPDATE books SET year = year WHERE id = 1')

  const response = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
  t.equal(response.statusCode, 200)
  t.match(response.headers['content-type'], /^application\/json/)
  const body = response.json()
  t.strictSame(Object.keys(body), ['status', 'message', 'data'])
  t.equal(body.status, 200)
  t.equal(body.message, 'Books retrieved successfully')
  t.equal(body.data.length, 25_123 - 1001)
  const ids = body.data.map((book: { id: number }) => book.id)
  t.ok(ids.every((id: number, i: number) => i === 0 || id > ids[i - 1]), 'ascending ids')
  t.strictSame(body.data[0], { id: 1, title: 'Title 1 "quoted" \\ ü', author: 'Author 1', year: -999 })
  t.strictSame(body.data.at(-1), { id: 25_123, title: 'Title 25123 "quoted" \\ ü', author: 'Author 25123', year: 24_123 })
})

t.test('the switch to streaming at 1,000 books loses and repeats no book', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await seed(t, dbUrl, 1000)
  const list = async () => {
    const response = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
    t.equal(response.statusCode, 200)
    return { chunked: response.headers['transfer-encoding'] === 'chunked', ids: response.json().data.map((book: { id: number }) => book.id) }
  }
  const whole = await list()
  t.notOk(whole.chunked, '1,000 books are answered in one piece')
  t.strictSame(whole.ids, Array.from({ length: 1000 }, (_, i) => i + 1))
  await seed(t, dbUrl, 1)
  const streamed = await list()
  t.ok(streamed.chunked, '1,001 books are streamed')
  t.strictSame(streamed.ids, Array.from({ length: 1001 }, (_, i) => i + 1))
  // Exactly two full pages (of 500) past the first, so the page after them is empty: the stream must end well
  await db.query('INSERT INTO books (title, author, year) SELECT \'x\', \'y\', 1 FROM generate_series(1, 1000)')
  const pages = await list()
  t.strictSame(pages.ids, Array.from({ length: 2001 }, (_, i) => i + 1))
})

/** A GET /books on a real socket that can pause, resume and abort. */
function openListing (service: Service, token: string) {
  return new Promise<{ status: number, chunks: Buffer[], pause: () => void, resume: () => void, abort: () => void, complete: Promise<boolean> }>((resolve, reject) => {
    const chunks: Buffer[] = []
    const request = get({ host: '127.0.0.1', port: service.port, path: '/books', headers: { authorization: token } }, (response) => {
      const complete = new Promise<boolean>((resolve) => response.on('close', () => resolve(response.complete)))
      response.on('error', () => {})
      response.on('data', (chunk: Buffer) => chunks.push(chunk))
      resolve({
        status: response.statusCode ?? 0,
        chunks,
        pause: () => response.pause(),
        resume: () => response.resume(),
        abort: () => request.destroy(),
        complete
      })
    })
    request.on('error', () => {})
    request.once('error', reject)
  })
}

/** Books enough that a listing of them outlasts what the sockets' buffers hold. */
const MANY_BOOKS = 300_000

/**
 * A real service process on a database holding `MANY_BOOKS` books, stored before the service
 * builds its indexes over them (`createDatabaseWithBooks`): far cheaper than inserting them into
 * every index afterwards. One for the file, made by the first test that asks, and shared by the
 * tests after it (each leaves the books readable as it found them): seeding and indexing them
 * is most of what these tests cost.
 */
let withManyBooks: ReturnType<typeof serviceWithManyBooks> | undefined
async function serviceWithManyBooks () {
  // The file's own teardown, not the first test's: the tests after it use the service too
  const dbUrl = await createDatabaseWithBooks(t, MANY_BOOKS)
  const service = await spawnService(t, testEnv(dbUrl))
  // Its first start builds every index over the books: under the other files' load, past a minute
  await service.listening(120_000)
  const token = await service.token()
  const db = await pgClient(t, dbUrl)
  return { dbUrl, service, token, db }
}

t.test('a slow reader holds back the reading; a reader that leaves stops it', { skip: NEEDS_SERVER }, async (t) => {
  const { dbUrl, service, token, db } = await (withManyBooks ??= serviceWithManyBooks())

  const listing = await openListing(service, token)
  t.equal(listing.status, 200)
  const receivedBytes = () => listing.chunks.reduce((sum, chunk) => sum + chunk.length, 0)
  await waitUntil(() => receivedBytes() > 0, 5000, 'the first bytes of the list')
  listing.pause()
  // The service fills the socket's buffers, then stops reading pages; a service that read on
  // would have read all 300,000 books, which a title changed meanwhile tells apart.
  await waitUntil(() => serviceStoppedReading(db, dbUrl), 10_000, 'no query runs while the reader is paused')
  const received = receivedBytes()
  t.ok(received > 0, `the paused reader received part of the list (${received} bytes)`)
  // Nothing to wait for but time: nothing must happen in it. (Whether a page query runs at one
  // moment now is not asked: on a busy machine the kernel's buffers still grow for a while, and
  // a page may follow. The title below shows how much was read while paused.)
  await sleep(700)
  t.equal(receivedBytes(), received, 'and nothing more arrives')

  // The book past the mark carries a new title from now on: if the service had read it before
  // the pause ended, the client would get the old one
  const mark = 100_000
  await db.query("UPDATE books SET title = 'read after the pause' WHERE id = $1", [mark + 1])
  listing.resume()
  const text = () => Buffer.concat(listing.chunks).toString('utf8')
  await waitUntil(() => text().includes(`{"id":${mark + 1},`), 20_000, `book ${mark + 1} to arrive`, 200)
  const title = new RegExp(`\\{"id":${mark + 1},"title":"([^"]*)"`).exec(text())?.[1]
  // Read before the pause ended: what the client had, what the sockets' buffers held, and two
  // pages, well short of the mark; without the backpressure it would be all 300,000.
  t.equal(title, 'read after the pause', `book ${mark + 1} was read only after the pause ended`)
  listing.abort()

  const leaving = await openListing(service, token)
  await waitUntil(() => leaving.chunks.length > 0, 5000, 'the first bytes of the second list')
  leaving.abort()
  t.equal(await leaving.complete, false)
  // Time in which a reading that went on would show in pg_stat_activity
  await sleep(300)
  t.equal(await serviceQueriesRunning(db, dbUrl), 0, 'after the reader left, no query runs')
  const after = await service.request('GET', '/book/1', { token })
  t.equal(after.status, 200, 'the service goes on')
})

t.test('a failure after the status has gone out cuts the connection; the body stays incomplete', { skip: STORE_INDEPENDENT }, async (t) => {
  const { service, token, db } = await (withManyBooks ??= serviceWithManyBooks())

  const listing = await openListing(service, token)
  t.equal(listing.status, 200, 'the status went out with the first page')
  listing.pause()
  // The next page the service reads fails
  await db.query('ALTER TABLE books RENAME TO books_away')
  listing.resume()
  t.equal(await listing.complete, false, 'the response ends without its terminating chunk')
  const text = Buffer.concat(listing.chunks).toString('utf8')
  t.ok(text.startsWith('{"status":200,"message":"Books retrieved successfully","data":[{"id":1,'))
  t.throws(() => JSON.parse(text), 'what arrived is not valid JSON')
  await db.query('ALTER TABLE books_away RENAME TO books')

  // The log line travels through the child's stdout pipe, which may deliver it after the socket closed
  const cutOffLine = /"level":50.*"statusCode":200.*relation \\"books\\" does not exist.*"msg":"response cut off after its status was sent"/
  await service.waitFor(() => cutOffLine.test(service.stdout), 5000, 'the log line of the cut-off')
  t.match(service.stdout, cutOffLine, 'the cause is logged')
  const after = await service.request('GET', '/book/1', { token })
  t.equal(after.status, 200, 'the service goes on')
})

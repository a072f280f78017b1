/**
 * Listings whose clients stop reading or leave, against the real process: a response the client
 * takes none of for SEND_TIMEOUT_MS is cut off while a slow but steady reader is not, and
 * listings whose clients left send no more page queries. A thousand stalled listings' memory and
 * latency: test/process/alone/stalled-listings.test.ts.
 */
import { connect } from 'node:net'
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, NEEDS_SERVER, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { type Service, startService } from '../helpers/service.js'
import { stalledListing } from '../helpers/stalled-listing.js'
import { sleep, withTimeout } from '../helpers/wait.js'

/** Enough books that a listing outlasts what the kernel's buffers take. */
const BOOKS = 200_000

/**
 * The database of `BOOKS` books, made by the first test that asks (the file's, not that test's)
 * and shared by the next: seeding and indexing them is most of what these tests cost the
 * database, and neither changes a book.
 */
let withBooks: Promise<string> | undefined
const databaseWithBooks = () => (withBooks ??= createDatabaseWithBooks(t, BOOKS))

/**
 * A `GET /books` on a raw socket whose client reads `bytes` every `everyMs` from what the kernel
 * received (in paused mode, so the socket never reads ahead of it more than its buffer).
 */
function slowListing (service: Service, token: string, bytes: number, everyMs: number) {
  const opened = performance.now()
  let received = 0
  const socket = connect({ port: service.port, host: '127.0.0.1' }, () => {
    socket.write(`GET /books HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n\r\n`)
  })
  socket.pause()
  const timer = setInterval(() => {
    const chunk: Buffer | null = socket.read(Math.min(bytes, socket.readableLength)) ?? socket.read(0)
    received += chunk?.length ?? 0
  }, everyMs)
  const closed = new Promise<number>((resolve) => socket.once('close', () => {
    clearInterval(timer)
    resolve(performance.now() - opened)
  }))
  socket.on('error', () => {})
  return { socket, closed, received: () => received }
}

t.test('a response the client takes none of for SEND_TIMEOUT_MS is cut off; a slow reader is not', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await databaseWithBooks()
  const service = await startService(t, { ...testEnv(dbUrl), SEND_TIMEOUT_MS: '10000' })
  const token = await service.token()

  // Wall-clock time: compared with the time of the service's log line
  const openedAt = Date.now()
  const opened = performance.now()
  const stalled = await stalledListing(service, token)
  t.teardown(() => stalled.socket.destroy())
  t.match(stalled.head, /^HTTP\/1\.1 200 /, 'the stalled listing started')
  // At most 64 KB every 250 ms, 256 KB/s: the kernel lets the service write more once about a
  // third of the socket's send buffer (up to 4 MB on this loopback) has gone, so a reader must
  // take about 1.4 MB per period to be seen taking something (docs/operations.md)
  const slow = slowListing(service, token, 65_536, 250)
  t.teardown(() => slow.socket.destroy())

  const cutLine = /"level":40.*"url":"\/books","statusCode":200.*"sendTimeoutMs":10000,"msg":"response cut off: the client took none of it"/
  await service.waitFor(() => cutLine.test(service.stdout), 25_000, 'the log line of the cut-off')
  const cutLines = service.stdout.split('\n').filter((line) => cutLine.test(line))
  t.equal(cutLines.length, 1, 'logged once, as a cut-off')
  const cutAfter = (JSON.parse(cutLines[0]!) as { time: number }).time - openedAt
  t.comment(`the stalled listing was cut off after ${(cutAfter / 1000).toFixed(1)} s`)
  // Node checks the timeout once per period: no byte taken for a whole period, so between one
  // and two periods after the last byte (and some slack for a busy machine)
  t.ok(cutAfter >= 10_000 && cutAfter < 23_000, 'cut off between 10 and 23 s after its last byte')
  // A client that does not read sees nothing of it; once it reads, the connection is gone
  const gone = new Promise<void>((resolve) => stalled.socket.once('close', () => resolve()))
  stalled.socket.resume()
  await withTimeout(gone, 5000, 'the stalled client to find its connection closed')

  // The slow reader, twice the timeout after it started, still reads
  await sleep(Math.max(0, 21_000 - (performance.now() - opened)))
  const before = slow.received()
  await sleep(1000)
  t.comment(`the slow reader received ${slow.received()} bytes in ${((performance.now() - opened) / 1000).toFixed(1)} s`)
  t.ok(slow.received() > before && !slow.socket.destroyed, 'a slow but steady reader is not cut off')
  t.equal(service.stdout.split('\n').filter((line) => cutLine.test(line)).length, 1, 'only the stalled listing was cut off')
  slow.socket.destroy()
  await slow.closed
  await service.waitFor(() => service.stdout.includes('"msg":"request ended by the client"'), 5000, 'the slow reader\'s end')
  t.equal(service.stdout.split('\n').filter((line) => line.includes('"url":"/books"') && !line.includes('"url":"/token"')).length, 2,
    'one line per listing: the cut-off and the end of the slow one')
  const after = await service.request('GET', '/book/1', { token })
  t.equal(after.status, 200, 'the service goes on')
})

t.test('listings whose clients leave while their pages queue send no more queries', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await databaseWithBooks()
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  const db = await pgClient(t, dbUrl)
  const commits = async () => (await db.query<{ n: number }>(
    'SELECT xact_commit::int AS n FROM pg_stat_database WHERE datname = current_database()')).rows[0]!.n

  // 250 listings (within MAX_CONNECTIONS_PER_ADDRESS, 256) filling the kernel's buffers at once:
  // their page queries queue for the pool's share
  const listings = await Promise.all(Array.from({ length: 250 }, () => stalledListing(service, token)))
  t.teardown(() => listings.forEach(({ socket }) => socket.destroy()))
  t.equal(listings.filter(({ head }) => /^HTTP\/1\.1 200 /.test(head)).length, listings.length, 'every listing started')
  // Holds the page queries in flight where they are (at most the listings' share of the pool,
  // 5), so that the others wait in the service's queue, whatever the machine's speed
  const lock = await pgClient(t, dbUrl)
  await lock.query('BEGIN')
  await lock.query('LOCK TABLE books IN ACCESS EXCLUSIVE MODE')
  for (const { socket } of listings) socket.destroy()
  const ended = () => service.stdout.split('\n').filter((line) => line.includes('"msg":"request ended by the client"')).length
  await service.waitFor(() => ended() === listings.length, 30_000, `${listings.length} listings logged as ended by the client`)
  // The queries in flight are cancelled, as a time bound would, so that every session of the
  // service is idle: PostgreSQL counts a session's transactions when it flushes its statistics,
  // which an idle session does within 10 s (PGSTAT_IDLE_INTERVAL) and a waiting one never
  const { cancelled } = (await db.query<{ cancelled: number }>(
    `SELECT count(pg_cancel_backend(pid))::int AS cancelled FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`)).rows[0]!
  t.ok(cancelled >= 1, `${cancelled} page queries were in flight, waiting on the lock`)
  await sleep(11_000)
  const before = await commits()
  await lock.query('COMMIT')
  await sleep(11_000)
  // A queued page query of a departed listing would add one each; the lock's transaction and
  // the test's own may be counted
  const sent = await commits() - before
  t.comment(`transactions once the lock was let go: ${sent}`)
  t.ok(sent < 10, 'no page query is sent for a listing whose client left')
})

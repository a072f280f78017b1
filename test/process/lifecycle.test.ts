/**
 * The service as a real process, started exactly as `npm start` starts it (`fastify start -o -r
 * start-failure.js ... dist/src/app.js`, so `npm run build` must have run), talked to over real
 * sockets. These cover what `inject` cannot: start-up failures, signals, Node's HTTP parser and
 * the database going away under a running process.
 */
import t, { type Test } from 'tap'
import { migrations } from '../../src/db/migrations.js'
import { PASSWORD, SECRET, testEnv, USERNAME } from '../helper.js'
import {
  ADMIN_URL, createDatabase, databaseName, NEEDS_SERVER, pgClient, refuseConnections, STORE_INDEPENDENT, waitForSessionsOnLock
} from '../helpers/database.js'
import { rawRequest } from '../helpers/raw-http.js'
import { closedPort, expectStartupFailure, nonEmptyLines, probe, spawnService, startService } from '../helpers/service.js'
import { sleep, waitUntil, withTimeout } from '../helpers/wait.js'

// Each subtest has its own processes and database: run a few side by side
t.jobs = 3

t.test('an unreachable database stops the start-up with one line about the database', { skip: STORE_INDEPENDENT }, async (t) => {
  const deadPort = await closedPort()
  const dbPassword = 'db-password-that-must-stay-private'
  const env = testEnv(`postgres://bookkeeping:${dbPassword}@127.0.0.1:${deadPort}/bookkeeping`)
  t.equal(await probe(deadPort), 'refused', 'precondition: nothing listens where DB_URL points')
  await expectStartupFailure(t, env, /database/i, { secrets: [SECRET, PASSWORD, dbPassword] })
})

/** A service on a fresh database holding one book: the service, the database, a token, the book. */
async function serviceWithBook (t: Test, fields: { title: string, author: string, year: number }) {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: fields })
  t.equal(created.status, 201, `POST /book: ${created.text}`)
  const book = (created.body as { data: { id: number } }).data
  t.match(book, { id: Number, ...fields }, 'the created book')
  return { dbUrl, service, token, book }
}

t.test('data survives a SIGTERM and a restart on the same database', async (t) => {
  const { dbUrl, service: first, book } = await serviceWithBook(t, { title: 'Dune', author: 'Frank Herbert', year: 1965 })

  first.child.kill('SIGTERM')
  t.strictSame(await first.waitForExit(), { code: 0, signal: null }, 'SIGTERM exits 0')

  const second = await startService(t, testEnv(dbUrl))
  const secondToken = await second.token()
  const read = await second.request('GET', `/book/${book.id}`, { token: secondToken })
  t.equal(read.status, 200, `GET /book/:id after the restart: ${read.text}`)
  t.strictSame(read.body, { status: 200, message: 'Book retrieved successfully', data: book }, 'the same book')
  const list = await second.request('GET', '/books', { token: secondToken })
  t.equal(list.status, 200, `GET /books after the restart: ${list.text}`)
  t.strictSame(list.body, { status: 200, message: 'Books retrieved successfully', data: [book] }, 'the list holds it')
})

t.test('two instances starting together on a fresh database both come up and migrate once', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [a, b] = await Promise.all([spawnService(t, testEnv(dbUrl)), spawnService(t, testEnv(dbUrl))])
  await Promise.all([a.listening(), b.listening()])

  for (const service of [a, b]) {
    const list = await service.request('GET', '/books', { token: await service.token() })
    t.equal(list.status, 200, `GET /books on port ${service.port}: ${list.text}`)
  }
  t.equal(nonEmptyLines(a.stdout + b.stdout).filter((line) => line.includes('"applied migration"')).length,
    migrations.length, 'each migration is applied by one instance only')

  const db = await pgClient(t, dbUrl)
  const tables = await db.query(
    "SELECT table_schema, table_name FROM information_schema.tables WHERE table_name IN ('books', 'schema_migrations') ORDER BY table_name"
  )
  t.strictSame(tables.rows, [
    { table_schema: 'public', table_name: 'books' },
    { table_schema: 'public', table_name: 'schema_migrations' }
  ], 'each table exists once')
  const versions = await db.query('SELECT version, count(*)::int AS count FROM schema_migrations GROUP BY version ORDER BY version')
  t.strictSame(versions.rows, migrations.map(({ version }) => ({ version, count: 1 })), 'one row per version')
  const columns = await db.query(
    `SELECT column_name, data_type, is_nullable, is_identity FROM information_schema.columns
     WHERE table_schema = 'public' AND table_name = 'books' ORDER BY ordinal_position`
  )
  t.strictSame(columns.rows, [
    { column_name: 'id', data_type: 'bigint', is_nullable: 'NO', is_identity: 'YES' },
    { column_name: 'title', data_type: 'text', is_nullable: 'NO', is_identity: 'NO' },
    { column_name: 'author', data_type: 'text', is_nullable: 'NO', is_identity: 'NO' },
    { column_name: 'year', data_type: 'integer', is_nullable: 'NO', is_identity: 'NO' },
    { column_name: 'version', data_type: 'integer', is_nullable: 'NO', is_identity: 'NO' },
    { column_name: 'title_xid', data_type: 'xid8', is_nullable: 'YES', is_identity: 'NO' },
    { column_name: 'author_xid', data_type: 'xid8', is_nullable: 'YES', is_identity: 'NO' },
    { column_name: 'year_xid', data_type: 'xid8', is_nullable: 'YES', is_identity: 'NO' }
  ], 'books columns')
})

t.test('SIGTERM lets a request in flight finish, then exits 0', { skip: NEEDS_SERVER }, async (t) => {
  const { dbUrl, service, token, book } = await serviceWithBook(t, { title: 'Emma', author: 'Jane Austen', year: 1815 })

  const admin = await pgClient(t, ADMIN_URL)
  const locker = await pgClient(t, dbUrl)
  await locker.query('BEGIN')
  await locker.query('SELECT * FROM books WHERE id = $1 FOR UPDATE', [book.id])

  let settled = false
  const put = service.request('PUT', `/book/${book.id}`, { token, body: { year: 2000 } })
  put.then(() => { settled = true }, () => { settled = true })

  // The UPDATE has reached the database and waits for the row lock
  await waitForSessionsOnLock(admin, dbUrl, 1, 5000)

  const signalled = Date.now()
  service.child.kill('SIGTERM')
  // While it drains, the listening socket is closed already (a connection caught in the middle
  // of that may be reset rather than refused: probe again)
  await waitUntil(async () => await probe(service.port) === 'refused', 3000, 'the listener closed after SIGTERM')
  // Longer than fastify-cli's default grace of 500 ms, which would cut the request off, and
  // shorter than the 3 s statement timeout, which would fail it
  await sleep(Math.max(0, 2000 - (Date.now() - signalled)))
  t.equal(settled, false, 'the PUT is still waiting on the lock')
  t.equal(service.exit, null, 'the process waits for the request in flight')

  await locker.query('COMMIT')
  const response = await withTimeout(put, 5000, 'the PUT to complete')
  t.equal(response.status, 200, `the PUT in flight completes: ${response.text}`)
  t.strictSame(response.body, { status: 200, message: 'Book updated successfully', data: { ...book, year: 2000 } }, 'with the updated book')
  t.strictSame(await service.waitForExit(5000), { code: 0, signal: null }, 'exits 0 after draining')
  t.equal(await probe(service.port), 'refused', 'nothing listens after the exit')

  const stored = await locker.query('SELECT year FROM books WHERE id = $1', [book.id])
  t.strictSame(stored.rows, [{ year: 2000 }], 'the update was committed')
})

t.test('SIGINT on an idle server exits 0', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  service.child.kill('SIGINT')
  t.strictSame(await service.waitForExit(5000), { code: 0, signal: null }, 'exits 0')
  t.equal(await probe(service.port), 'refused', 'nothing listens after the exit')
})

t.test("errors of Node's HTTP parser and of routing are envelopes", { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const cases = [
    {
      name: '20 KiB header',
      request: `GET /books HTTP/1.1\r\nHost: localhost\r\nX-Filler: ${'a'.repeat(20 * 1024)}\r\nConnection: close\r\n\r\n`,
      status: 431,
      message: 'Request header fields too large'
    },
    { name: 'malformed request line', request: 'GARBAGE\r\n\r\n', status: 400, message: 'Bad request' },
    {
      name: 'malformed URL',
      request: 'GET /book/%zz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n',
      status: 400,
      message: 'Bad request'
    },
    {
      name: 'unknown path',
      request: 'GET /no/such/path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n',
      status: 404,
      message: 'Route not found'
    },
    {
      name: 'unsupported method',
      request: 'PATCH /books HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
      status: 405,
      message: 'Method not allowed'
    },
    {
      name: 'CONNECT',
      request: 'CONNECT /token HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n',
      status: 405,
      message: 'Method not allowed'
    },
    {
      name: 'HTTP/1.1 without Host',
      request: 'GET /books HTTP/1.1\r\nConnection: close\r\n\r\n',
      status: 400,
      message: 'Bad request'
    },
    {
      name: 'unknown expectation',
      request: 'POST /token HTTP/1.1\r\nHost: localhost\r\nExpect: nonsense\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
      status: 417,
      message: 'Expectation failed'
    }
  ]
  for (const { name, request, status, message } of cases) {
    const response = await rawRequest(service.port, request)
    t.equal(response.status, status, `${name}: status\n${response.text}`)
    t.match(response.headers['content-type'], /^application\/json(;|$)/, `${name}: JSON content type`)
    let body: unknown
    t.doesNotThrow(() => { body = JSON.parse(response.text) }, `${name}: the body is JSON`)
    t.strictSame(body, { status, message, data: null }, `${name}: envelope`)
    if (status === 405) {
      const allow = (response.headers.allow ?? '').split(',').map((method) => method.trim())
      t.ok(allow.includes('GET'), `${name}: Allow names GET (${response.headers.allow})`)
      t.notOk(allow.includes('PATCH'), `${name}: Allow does not name PATCH`)
    }
  }
  t.equal(service.exit, null, 'the process is still running')
})

t.test('the process survives its idle pool connections being killed', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  // Concurrent requests leave several idle clients in the pool
  const warm = await Promise.all(Array.from({ length: 5 }, () => service.request('GET', '/books', { token })))
  t.strictSame(warm.map(({ status }) => status), [200, 200, 200, 200, 200], 'five concurrent GET /books')

  const admin = await pgClient(t, ADMIN_URL)
  const killed = await admin.query(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bookkeeping' AND datname = $1",
    [databaseName(dbUrl)]
  )
  t.ok(killed.rowCount !== null && killed.rowCount >= 1, `idle pool connections were terminated (${killed.rowCount})`)
  await service.waitFor(() => service.stdout.includes('"idle database connection lost"'), 5000, 'the pool to notice')
  t.equal(service.exit, null, 'the process is alive')

  const statuses: number[] = []
  for (let attempt = 0; attempt < 2; attempt++) {
    const response = await service.request('GET', '/books', { token })
    statuses.push(response.status)
    if (response.status === 200) {
      t.strictSame(response.body, { status: 200, message: 'Books retrieved successfully', data: [] })
      break
    }
    t.strictSame(response.body, { status: 503, message: 'Service unavailable', data: null }, 'a failed attempt is a 503')
  }
  t.equal(statuses.at(-1), 200, `GET /books answers 200, at most one 503 first (got ${statuses.join(', ')})`)
  t.equal(service.exit, null, 'the process has not exited')
})

t.test('the database going away while running gives 503, and coming back gives 200', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  t.equal((await service.request('GET', '/books', { token })).status, 200)

  const allowConnections = await refuseConnections(t, dbUrl)
  await service.waitFor(() => service.stdout.includes('"idle database connection lost"'), 5000, 'the pool to notice')

  const started = Date.now()
  const down = await service.request('GET', '/books', { token, ms: 6000 })
  t.ok(Date.now() - started < 6000, 'answered within 6 s')
  t.equal(down.status, 503, `GET /books with the database gone: ${down.text}`)
  t.strictSame(down.body, { status: 503, message: 'Service unavailable', data: null }, '503 envelope')
  t.notMatch(down.text, /database|connect|terminat|accepting|ECONN|postgres|SQL|\bat\b|bookkeeping_test/i, 'no driver text')
  t.equal(service.exit, null, 'the process is alive')
  const login = await service.request('POST', '/token', { body: { username: USERNAME, password: PASSWORD } })
  t.equal(login.status, 200, 'POST /token still works')

  await allowConnections()
  const up = await service.request('GET', '/books', { token })
  t.equal(up.status, 200, `GET /books with the database back: ${up.text}`)
  t.strictSame(up.body, { status: 200, message: 'Books retrieved successfully', data: [] }, 'the empty list')
  t.equal(service.exit, null, 'no restart was needed')
})

import t from 'tap'
import pg from 'pg'
import { PASSWORD, SECRET, USERNAME, build, createDatabase, getToken, testEnv } from './helper.js'
import { startService } from './server-helper.js'

const tokenRequest = (remoteAddress: string, password = PASSWORD) => ({
  method: 'POST' as const, url: '/token', remoteAddress, payload: { username: USERNAME, password }
})

t.test('POST /token is limited per client address; book routes are not', async (t) => {
  const app = await build(t, undefined, { TOKEN_RATE_LIMIT: '5' })
  const token = await getToken(app)
  for (let attempt = 1; attempt <= 5; attempt++) {
    const response = await app.inject(tokenRequest('192.0.2.1', attempt % 2 ? 'wrong' : PASSWORD))
    t.equal(response.statusCode, attempt % 2 ? 401 : 200, `attempt ${attempt} is answered`)
  }
  const limited = await app.inject(tokenRequest('192.0.2.1'))
  t.equal(limited.statusCode, 429)
  t.strictSame(limited.json(), { status: 429, message: 'Too many requests', data: null })
  const retryAfter = Number(limited.headers['retry-after'])
  t.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 60, `Retry-After: ${limited.headers['retry-after']}`)
  t.equal(limited.headers['cache-control'], 'no-store')

  const other = await app.inject(tokenRequest('192.0.2.2'))
  t.equal(other.statusCode, 200, 'another address has its own budget')

  for (let i = 0; i < 20; i++) {
    const books = await app.inject({ method: 'GET', url: '/books', remoteAddress: '192.0.2.1', headers: { authorization: token } })
    t.equal(books.statusCode, 200, `book request ${i + 1} from the limited address`)
  }
})

t.test('security headers', async (t) => {
  const app = await build(t)
  const token = await getToken(app)
  const responses = {
    'token 200': await app.inject(tokenRequest('127.0.0.1')),
    'token 401': await app.inject(tokenRequest('127.0.0.1', 'wrong')),
    'token 400': await app.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/json' }, payload: '[' }),
    'books 200': await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } }),
    'books 401': await app.inject({ method: 'GET', url: '/books' }),
    'book 404': await app.inject({ method: 'GET', url: '/book/7', headers: { authorization: token } }),
    'route 404': await app.inject({ method: 'GET', url: '/nowhere' }),
    'method 405': await app.inject({ method: 'PATCH', url: '/books' }),
    'bad URL 400': await app.inject({ method: 'GET', url: '/book/%zz' }),
    'body 413': await app.inject({ method: 'POST', url: '/book', headers: { authorization: token }, payload: { title: 'x'.repeat(70_000) } })
  }
  for (const [name, response] of Object.entries(responses)) {
    t.equal(response.headers['x-content-type-options'], 'nosniff', `${name}: nosniff`)
    t.notOk('x-powered-by' in response.headers, `${name}: no X-Powered-By`)
    t.match(response.headers['x-request-id'], /^[0-9a-f-]{36}$/, `${name}: request id`)
    if (name.startsWith('token')) t.equal(response.headers['cache-control'], 'no-store', `${name}: no-store`)
  }
})

t.test('the logger censors secrets should a line ever carry them', async (t) => {
  const lines: string[] = []
  const stream = { write: (line: string) => { lines.push(line) } }
  const app = await build(t, undefined, {}, { logger: { level: 'info', stream } })
  app.log.info({
    req: { headers: { authorization: 'header-token' } },
    password: 'top-level-password',
    body: { password: 'body-password', token: 'body-token' },
    config: { SECRET_TOKEN: SECRET, AUTH_PASSWORD: PASSWORD, DB_URL: 'postgres://u:db-password@h/d' }
  }, 'probe')
  const probe = lines.find((line) => line.includes('"probe"')) ?? ''
  t.match(probe, /\[redacted\]/, 'the probe line was written, censored')
  for (const secret of ['header-token', 'top-level-password', 'body-password', 'body-token', SECRET, PASSWORD, 'db-password']) {
    t.notOk(probe.includes(secret), `no ${secret.slice(0, 12)}... in the line`)
  }
})

t.test('the log: one line per request, no secrets, database errors with their cause', async (t) => {
  const dbUrl = await createDatabase(t)
  // The most verbose level: no line at any level may carry a secret
  const service = await startService(t, { ...testEnv(dbUrl), LOG_LEVEL: 'trace' })
  const token = await service.token()
  const wrong = await service.request('POST', '/token', { body: { username: USERNAME, password: 'not-the-password' } })
  t.equal(wrong.status, 401)
  const created = await service.request('POST', '/book', { token, body: { title: 'Dune', author: 'Frank Herbert', year: 1965 } })
  t.equal(created.status, 201)
  const bearer = await service.request('GET', '/books', { token: `Bearer ${token}` })
  t.equal(bearer.status, 401)
  const missing = await service.request('GET', '/nowhere')
  t.equal(missing.status, 404)
  const undecodable = await service.request('GET', '/book/%zz')
  t.equal(undecodable.status, 400)

  const admin = new pg.Client({ connectionString: dbUrl })
  await admin.connect()
  t.teardown(() => admin.end())
  await admin.query('ALTER TABLE books RENAME TO books_away')
  const failed = await service.request('GET', '/books', { token })
  t.equal(failed.status, 500)
  await admin.query('ALTER TABLE books_away RENAME TO books')

  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null })

  const lines = service.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line))
  const requestLines = lines.filter((line) => line.msg === 'request')
  t.strictSame(requestLines.map((line) => [line.method, line.route, line.statusCode]), [
    ['POST', '/token', 200],
    ['POST', '/token', 401],
    ['POST', '/book', 201],
    ['GET', '/books', 401],
    ['GET', null, 404],
    ['GET', null, 400],
    ['GET', '/books', 500]
  ], 'one line per request, in order')
  for (const line of requestLines) {
    t.match(line, { reqId: /^[0-9a-f-]{36}$/, url: String, responseTime: Number, level: 30 })
  }
  t.equal(new Set(requestLines.map((line) => line.reqId)).size, requestLines.length, 'request ids are unique')
  t.equal(requestLines[6].reqId, failed.headers.get('x-request-id'), 'the response names its log line')

  const failure = lines.find((line) => line.level >= 50 && line.reqId === requestLines[6].reqId)
  t.match(failure, { err: { code: '42P01', message: /books/ } }, 'the database error is logged with its cause')

  for (const secret of [token, PASSWORD, 'not-the-password', SECRET]) {
    t.notOk(service.stdout.includes(secret) || service.stderr.includes(secret), 'no token, password or secret in the log')
  }
})

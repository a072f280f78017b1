/**
 * The log of a real service process at its most verbose level: one line per request, database
 * errors with their cause, and no token, password or secret anywhere.
 */
import pg from 'pg'
import t from 'tap'
import { PASSWORD, SECRET, testEnv, USERNAME } from '../helper.js'
import { createDatabase } from '../helpers/database.js'
import { startService } from '../helpers/service.js'

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

  const lines = service.logLines()
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
  t.equal(requestLines[6]!.reqId, failed.headers.get('x-request-id'), 'the response names its log line')

  const failure = lines.find((line) => line.level >= 50 && line.reqId === requestLines[6]!.reqId)
  t.match(failure, { err: { code: '42P01', message: /books/ } }, 'the database error is logged with its cause')

  for (const secret of [token, PASSWORD, 'not-the-password', SECRET]) {
    t.notOk(service.stdout.includes(secret) || service.stderr.includes(secret), 'no token, password or secret in the log')
  }
})

/**
 * The log of a real service process holds no query string: a token a client puts there
 * (`GET /books?token=...`), in a URL the router cannot decode or one no route has, never reaches
 * it, and neither does the client's own `X-Request-Id`.
 */
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { rawRequest } from '../helpers/raw-http.js'
import { startService } from '../helpers/service.js'

t.test('the log: paths without their query strings', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  // The most verbose level: no line at any level may carry the query
  const service = await startService(t, { ...testEnv(dbUrl), LOG_LEVEL: 'trace' })
  const token = await service.token()

  const listed = await service.request('GET', `/books?token=${token}`, { token })
  t.equal(listed.status, 200)
  const unauthorized = await service.request('GET', `/books?token=${token}&x=1`)
  t.equal(unauthorized.status, 401)
  const undecodable = await service.request('GET', `/book/%zz?token=${token}`)
  t.equal(undecodable.status, 400)
  const unknown = await service.request('GET', `/nowhere?token=${token}`)
  t.equal(unknown.status, 404)
  // Raw: an HTTP client would resolve the `%2e%2e` itself
  const docs = await rawRequest(service.port, `GET /docs/static/%2e%2e/json?token=${token} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`)
  t.equal(docs.status, 404)
  // A request id of the client's own is neither used nor logged
  const ownId = await rawRequest(service.port,
    `GET /books HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\nX-Request-Id: ${token}\r\nConnection: close\r\n\r\n`)
  t.equal(ownId.status, 200)
  t.not(ownId.headers['x-request-id'], token)

  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null })

  const lines = service.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line))
  const requestLines = lines.filter((line) => line.msg === 'request' && line.route !== '/token')
  // In any order: on a loaded machine a line can come after a later one (its time the
  // earlier), stdout being a pipe the test reads
  const sorted = (entries: unknown[][]) => entries.map((entry) => JSON.stringify(entry)).sort()
  t.strictSame(sorted(requestLines.map((line) => [line.method, line.url, line.statusCode])), sorted([
    ['GET', '/books', 200],
    ['GET', '/books', 401],
    ['GET', '/book/%zz', 400],
    ['GET', '/nowhere', 404],
    ['GET', '/docs/static/%2e%2e/json', 404],
    ['GET', '/books', 200]
  ]), 'one line per request, its path without the query')
  for (const line of requestLines) t.match(line, { reqId: /^[0-9a-f-]{36}$/, responseTime: Number, level: 30 })
  t.notOk(service.stdout.includes(token) || service.stderr.includes(token), 'the token is nowhere in the log')
  t.notOk(service.stdout.includes('token=') || service.stderr.includes('token='), 'no query is in the log')
})

/**
 * What Node's HTTP layer would answer itself or no route matches, through inject: 404 and 405
 * with Allow, an undecodable URL, a body on a route that takes none. What needs a raw socket
 * (CONNECT, Expect, no Host, parser errors) is in test/process/lifecycle.test.ts and
 * test/unit/http-edge.test.ts.
 */
import t from 'tap'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'

t.test('responses outside the routes are envelopes too', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  const token = await getToken(app)

  t.test('unknown path: 404 Route not found', async (t) => {
    for (const url of ['/', '/nope', '/books/1', '/book/1/extra', '/token/x', '/%E2%82%AC']) {
      const response = await app.inject({ method: 'GET', url, headers: { authorization: token } })
      t.equal(response.statusCode, 404, url)
      t.match(response.headers['content-type'], /^application\/json/)
      t.strictSame(response.json(), errorEnvelope(404, 'Route not found'), url)
    }
  })

  t.test('known path, unsupported method: 405 with Allow', async (t) => {
    const cases: Array<[string, string, string]> = [
      ['PATCH', '/books', 'GET, HEAD, POST'],
      ['DELETE', '/books', 'GET, HEAD, POST'],
      ['GET', '/token', 'POST'],
      ['PUT', '/book', 'POST'],
      ['POST', '/book/1', 'GET, HEAD, PUT, DELETE'],
      ['PATCH', '/book/abc?x=1', 'GET, HEAD, PUT, DELETE']
    ]
    for (const [method, url, allow] of cases) {
      const response = await app.inject({ method: method as 'GET', url })
      t.equal(response.statusCode, 405, `${method} ${url}`)
      t.equal(response.headers.allow, allow)
      t.strictSame(response.json(), errorEnvelope(405, 'Method not allowed'))
    }
  })

  t.test('malformed URL: 400 Bad request', async (t) => {
    const response = await app.inject({ method: 'GET', url: '/book/%zz', headers: { authorization: token } })
    t.equal(response.statusCode, 400)
    t.strictSame(response.json(), errorEnvelope(400, 'Bad request'))
  })

  t.test('a body on a route that takes none is still checked, in the envelope', async (t) => {
    const { status, body } = await call(app, token, {
      method: 'DELETE', url: '/book/1', headers: { 'content-type': 'application/json' }, payload: '{oops'
    })
    t.strictSame({ status, body }, { status: 400, body: errorEnvelope(400, 'Bad request') })
  })
})

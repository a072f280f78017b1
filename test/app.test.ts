import t from 'tap'
import pg from 'pg'
import { NEEDS_SERVER, build, call, createDatabase, getToken, refuseConnections } from './helper.js'

const envelopeOf = (status: number, message: string) => ({ status, message, data: null })

t.test('responses outside the routes are envelopes too', async (t) => {
  const app = await build(t)
  const token = await getToken(app)

  t.test('unknown path: 404 Route not found', async (t) => {
    for (const url of ['/', '/nope', '/books/1', '/book/1/extra', '/token/x', '/%E2%82%AC']) {
      const response = await app.inject({ method: 'GET', url, headers: { authorization: token } })
      t.equal(response.statusCode, 404, url)
      t.match(response.headers['content-type'], /^application\/json/)
      t.strictSame(response.json(), envelopeOf(404, 'Route not found'), url)
    }
  })

  t.test('known path, unsupported method: 405 with Allow', async (t) => {
    const cases: Array<[string, string, string]> = [
      ['PATCH', '/books', 'GET, HEAD'],
      ['DELETE', '/books', 'GET, HEAD'],
      ['GET', '/token', 'POST'],
      ['PUT', '/book', 'POST'],
      ['POST', '/book/1', 'GET, HEAD, PUT, DELETE'],
      ['PATCH', '/book/abc?x=1', 'GET, HEAD, PUT, DELETE']
    ]
    for (const [method, url, allow] of cases) {
      const response = await app.inject({ method: method as 'GET', url })
      t.equal(response.statusCode, 405, `${method} ${url}`)
      t.equal(response.headers.allow, allow)
      t.strictSame(response.json(), envelopeOf(405, 'Method not allowed'))
    }
  })

  t.test('malformed URL: 400 Bad request', async (t) => {
    const response = await app.inject({ method: 'GET', url: '/book/%zz', headers: { authorization: token } })
    t.equal(response.statusCode, 400)
    t.strictSame(response.json(), envelopeOf(400, 'Bad request'))
  })

  t.test('a body on a route that takes none is still checked, in the envelope', async (t) => {
    const { status, body } = await call(app, token, {
      method: 'DELETE', url: '/book/1', headers: { 'content-type': 'application/json' }, payload: '{oops'
    })
    t.strictSame({ status, body }, { status: 400, body: envelopeOf(400, 'Bad request') })
  })
})

t.test('a database fault is a generic 500 and the service goes on', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const created = await call(app, token, { method: 'POST', url: '/book', payload: { title: 't', author: 'a', year: 1 } })
  t.equal(created.status, 201)

  const admin = new pg.Client({ connectionString: dbUrl })
  await admin.connect()
  t.teardown(() => admin.end())
  await admin.query('ALTER TABLE books RENAME TO books_elsewhere')

  const failed = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
  t.equal(failed.statusCode, 500)
  t.strictSame(failed.json(), envelopeOf(500, 'Internal server error'))
  t.notMatch(failed.body, /books|relation|select|pg|stack/i, 'no SQL or driver text')

  await admin.query('ALTER TABLE books_elsewhere RENAME TO books')
  const again = await call(app, token, { method: 'GET', url: `/book/${created.body.data.id}` })
  t.equal(again.status, 200)
})

t.test('an id no book can have is answered without a query', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  // With the database refusing the service, any query would fail with a 5xx
  await refuseConnections(t, dbUrl)
  for (const method of ['GET', 'PUT', 'DELETE'] as const) {
    const { status, body } = await call(app, token, { method, url: '/book/abc', payload: method === 'PUT' ? {} : undefined })
    t.strictSame({ status, body }, { status: 404, body: envelopeOf(404, 'Book not found') }, method)
  }
  const real = await call(app, token, { method: 'GET', url: '/book/1' })
  t.equal(real.status, 503, 'a real lookup does reach the database, which is cut off')
  t.strictSame(real.body, envelopeOf(503, 'Service unavailable'))
})

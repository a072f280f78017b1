/**
 * The one error handler with a real database fault: a generic 500 in the envelope, no SQL or
 * driver text, and the service goes on.
 */
import pg from 'pg'
import t from 'tap'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { createDatabase } from '../helpers/database.js'

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
  t.strictSame(failed.json(), errorEnvelope(500, 'Internal server error'))
  t.notMatch(failed.body, /books|relation|select|pg|stack/i, 'no SQL or driver text')

  await admin.query('ALTER TABLE books_elsewhere RENAME TO books')
  const again = await call(app, token, { method: 'GET', url: `/book/${created.body.data.id}` })
  t.equal(again.status, 200)
})

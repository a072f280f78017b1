/**
 * A request that sends no body (no Transfer-Encoding, no Content-Length or 0) is answered as one,
 * whatever its Content-Type, on a route that takes no body (DELETE /book/<id>) and on no route;
 * a route that takes a body still refuses an empty one as it always did, and a body that is sent
 * is still parsed.
 */
import type { AddressInfo } from 'node:net'
import type { InjectOptions } from 'fastify'
import t from 'tap'
import { build, errorEnvelope, getToken } from '../helper.js'
import { rawRequest } from '../helpers/raw-http.js'

const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }
const NOT_FOUND = errorEnvelope(404, 'Book not found')
const MISSING_ID = '999999'

t.test('body-less requests with a Content-Type', async (t) => {
  const app = await build(t)
  const token = await getToken(app)
  const request = async (options: InjectOptions) => {
    const response = await app.inject({ ...options, headers: { authorization: token, ...options.headers } })
    return { status: response.statusCode, body: response.json() }
  }
  const create = async () => (await request({ method: 'POST', url: '/book', payload: BOOK })).body.data as { id: number }
  const count = async () => (await request({ method: 'GET', url: '/books' })).body.data.length as number

  t.test('DELETE of a missing book is 404 Book not found, whatever the Content-Type of its missing body', async (t) => {
    for (const headers of [
      { 'content-type': 'application/json' },
      { 'content-type': 'application/json', 'content-length': '0' },
      { 'content-type': 'application/json; charset=utf-8', 'content-length': '0' },
      { 'content-type': 'text/plain', 'content-length': '0' },
      { 'content-type': 'application/x-www-form-urlencoded' }
    ]) {
      t.strictSame(await request({ method: 'DELETE', url: `/book/${MISSING_ID}`, headers }), { status: 404, body: NOT_FOUND }, JSON.stringify(headers))
    }
  })

  t.test('DELETE of a book with Content-Type: application/json and no body deletes it', async (t) => {
    const { id } = await create()
    const deleted = await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'content-type': 'application/json', 'content-length': '0' } })
    t.strictSame(deleted, { status: 200, body: errorEnvelope(200, 'Book deleted successfully') })
  })

  t.test('a body that is sent is still parsed: a broken one is 400, another media type 415', async (t) => {
    const { id } = await create()
    t.strictSame(await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'content-type': 'application/json' }, payload: '{' }),
      { status: 400, body: errorEnvelope(400, 'Bad request') })
    t.strictSame(await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'content-type': 'text/plain' }, payload: 'x' }),
      { status: 415, body: errorEnvelope(415, 'Unsupported media type') })
    t.equal((await request({ method: 'GET', url: `/book/${id}` })).status, 200, 'the book is still there')
  })

  t.test('POST /book and PUT /book/<id> with an empty body are refused as before, nothing stored', async (t) => {
    const { id } = await create()
    const before = await count()
    const empty = { 'content-type': 'application/json', 'content-length': '0' }
    t.strictSame(await request({ method: 'POST', url: '/book', headers: empty }), { status: 400, body: errorEnvelope(400, 'Invalid input') })
    t.strictSame(await request({ method: 'PUT', url: `/book/${id}`, headers: empty }), { status: 400, body: errorEnvelope(400, 'Invalid input') })
    t.strictSame(await request({ method: 'PUT', url: `/book/${MISSING_ID}`, headers: empty }), { status: 404, body: NOT_FOUND })
    const plain = { 'content-type': 'text/plain', 'content-length': '0' }
    t.strictSame(await request({ method: 'POST', url: '/book', headers: plain }), { status: 415, body: errorEnvelope(415, 'Unsupported media type') })
    t.equal(await count(), before, 'nothing stored')
    t.equal((await request({ method: 'GET', url: `/book/${id}` })).body.data.title, BOOK.title, 'nothing changed')
  })

  t.test('a body-less request to no route is 404 Route not found, whatever its Content-Type', async (t) => {
    for (const headers of [{ 'content-type': 'application/json', 'content-length': '0' }, { 'content-type': 'text/plain' }]) {
      t.strictSame(await request({ method: 'POST', url: '/nowhere', headers }), { status: 404, body: errorEnvelope(404, 'Route not found') })
    }
  })

  t.test('on a real socket: DELETE with Content-Type: application/json and no Content-Length', async (t) => {
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as AddressInfo
    const response = await rawRequest(port, `DELETE /book/${MISSING_ID} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${token}\r\n` +
      'Content-Type: application/json\r\nConnection: close\r\n\r\n')
    t.equal(response.status, 404)
    t.strictSame(JSON.parse(response.text), NOT_FOUND)
  })
})

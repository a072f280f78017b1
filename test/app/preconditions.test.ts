/**
 * ETags and preconditions on /book/<id> (docs/api.md, Preconditions): the tag of every answer
 * that carries a book, 304 for If-None-Match, 412 for an If-Match that does not hold, 400 for a
 * malformed header, 404 before any of them, and one 200 for two PUTs racing on one tag.
 */
import t from 'tap'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { createDatabase } from '../helpers/database.js'

const BOOK = { title: 'Solaris', author: 'Stanisław Lem', year: 1961 }
const STRONG_TAG = /^"[\x21\x23-\x7E]+"$/

t.test('preconditions', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const request = (options: Parameters<typeof call>[2]) => call(app, token, options)
  const create = async () => {
    const created = await request({ method: 'POST', url: '/book', payload: BOOK })
    return { id: created.body.data.id as number, tag: created.headers.etag as string }
  }
  const read = (id: number, headers: Record<string, string> = {}) => app.inject({ method: 'GET', url: `/book/${id}`, headers: { authorization: token, ...headers } })

  t.test('GET, the 201 of POST and the 200 of PUT carry a strong ETag that changes with the book', async (t) => {
    const { id, tag } = await create()
    t.match(tag, STRONG_TAG, 'POST 201: a strong tag')
    t.equal((await read(id)).headers.etag, tag, 'GET: the same tag')
    const renamed = await request({ method: 'PUT', url: `/book/${id}`, payload: { title: 'Solaris (1961)' } })
    t.match(renamed.headers.etag, STRONG_TAG)
    t.not(renamed.headers.etag, tag, 'PUT that changes the book: a new tag')
    t.equal((await read(id)).headers.etag, renamed.headers.etag, 'GET after it: that tag')
    const same = await request({ method: 'PUT', url: `/book/${id}`, payload: { title: 'Solaris (1961)', year: 1961 } })
    t.equal(same.headers.etag, renamed.headers.etag, 'PUT that changes nothing: the tag stays')
    const back = await request({ method: 'PUT', url: `/book/${id}`, payload: { title: 'Solaris' } })
    t.not(back.headers.etag, tag, 'back to the first values: still a tag never given before')
    const other = await create()
    t.not(other.tag, tag, 'another book: another tag')
    const replayed = await request({ method: 'POST', url: '/book', payload: BOOK, headers: { 'idempotency-key': `k-${id}` } })
    const again = await request({ method: 'POST', url: '/book', payload: BOOK, headers: { 'idempotency-key': `k-${id}` } })
    t.equal(again.headers.etag, replayed.headers.etag, 'a replayed create: the tag of the first answer')
    for (const answer of [await request({ method: 'GET', url: '/books' }), await request({ method: 'DELETE', url: `/book/${other.id}` })]) {
      t.equal(answer.headers.etag, undefined, 'no tag on a listing or a delete')
    }
  })

  t.test('If-None-Match that names the current tag is 304 without a body; any other is 200', async (t) => {
    const { id, tag } = await create()
    for (const value of [tag, `W/${tag}`, `"nope", ${tag}`, `"a",${tag} , "b"`, '*', ` ${tag} `]) {
      const response = await read(id, { 'if-none-match': value })
      t.equal(response.statusCode, 304, `${value}: 304`)
      t.equal(response.body, '', 'no body')
      t.equal(response.headers.etag, tag, 'the ETag repeated')
    }
    for (const value of ['"nope"', `W/"${id}.9"`, `"${id}.2"`, '""']) {
      const response = await read(id, { 'if-none-match': value })
      t.equal(response.statusCode, 200, `${value}: 200`)
      t.equal(response.headers.etag, tag)
      t.strictSame(response.json().data, { id, ...BOOK })
    }
    const absent = await read(id + 1000, { 'if-none-match': '*' })
    t.equal(absent.statusCode, 404, 'a missing book is 404 whatever If-None-Match says')
  })

  t.test('If-Match that does not hold is 412 and changes nothing; one that holds lets the write through', async (t) => {
    const { id, tag } = await create()
    const put = (ifMatch: string, payload: object = { year: 2000 }) =>
      request({ method: 'PUT', url: `/book/${id}`, payload, headers: { 'if-match': ifMatch } })
    const other = await create()
    for (const value of [`W/${tag}`, '"nope"', other.tag, `"${id}.2"`, `"${id}.01"`, '""', '"a", W/' + tag]) {
      const { status, body } = await put(value)
      t.equal(status, 412, `PUT If-Match ${value}: 412`)
      t.strictSame(body, errorEnvelope(412, 'Precondition failed'))
      const { status: deleted, body: deleteBody } = await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'if-match': value } })
      t.equal(deleted, 412, `DELETE If-Match ${value}: 412`)
      t.strictSame(deleteBody, errorEnvelope(412, 'Precondition failed'))
    }
    t.strictSame((await read(id)).json().data, { id, ...BOOK }, 'nothing changed')
    t.equal((await read(id)).headers.etag, tag, 'the tag neither')
    const first = await put(`"a", ${tag}`)
    t.equal(first.status, 200, 'a list with the current tag: 200')
    t.equal((await put(tag)).status, 412, 'the tag it replaced: 412')
    t.equal((await put('*', { year: 2001 })).status, 200, '*: any existing book')
    const current = (await read(id)).headers.etag as string
    const { status, body } = await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'if-match': current } })
    t.equal(status, 200, 'DELETE with the current tag')
    t.strictSame(body.message, 'Book deleted successfully')
    for (const value of [current, '*', 'malformed']) {
      t.equal((await put(value)).status, 404, `PUT of a missing book with If-Match ${value}: 404`)
      t.equal((await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'if-match': value } })).status, 404, `DELETE: 404 (${value})`)
      t.equal((await read(id, { 'if-none-match': value })).statusCode, 404, `GET: 404 (If-None-Match ${value})`)
    }
  })

  t.test('a malformed If-Match or If-None-Match is 400 Invalid input and changes nothing', async (t) => {
    const { id, tag } = await create()
    const malformed = ['', ' ', 'abc', tag.slice(1), `${tag} ${tag}`, `${tag};`, 'w/"a"', 'W/ "a"', '"a"b', '**', '*, "a"', '"a b"', ',', '"a" "b"', '"']
    for (const value of malformed) {
      const label = JSON.stringify(value)
      const put = await request({ method: 'PUT', url: `/book/${id}`, payload: { year: 1 }, headers: { 'if-match': value } })
      t.same([put.status, put.body], [400, errorEnvelope(400, 'Invalid input')], `PUT If-Match ${label}`)
      const del = await request({ method: 'DELETE', url: `/book/${id}`, headers: { 'if-match': value } })
      t.same([del.status, del.body], [400, errorEnvelope(400, 'Invalid input')], `DELETE If-Match ${label}`)
      const get = await read(id, { 'if-none-match': value })
      t.same([get.statusCode, get.json()], [400, errorEnvelope(400, 'Invalid input')], `GET If-None-Match ${label}`)
    }
    t.strictSame((await read(id)).json().data, { id, ...BOOK }, 'nothing changed')
    t.equal((await read(id)).headers.etag, tag)
  })

  t.test('two PUTs at once with the same If-Match: one 200, one 412, on one instance or two', async (t) => {
    const second = await build(t, dbUrl)
    const secondToken = await getToken(second)
    for (const [label, other] of [['one instance', { app, token }], ['two instances', { app: second, token: secondToken }]] as const) {
      for (let round = 0; round < 10; round++) {
        const { id, tag } = await create()
        const answers = await Promise.all([
          call(app, token, { method: 'PUT', url: `/book/${id}`, payload: { title: `first ${round}` }, headers: { 'if-match': tag } }),
          call(other.app, other.token, { method: 'PUT', url: `/book/${id}`, payload: { title: `second ${round}` }, headers: { 'if-match': tag } })
        ])
        const statuses = answers.map(({ status }) => status).sort()
        t.strictSame(statuses, [200, 412], `${label}, round ${round}: one 200, one 412`)
        const winner = answers.find(({ status }) => status === 200)!
        t.strictSame((await read(id)).json().data, winner.body.data, 'the book is what the 200 answered')
      }
    }
  })

  t.test('without the headers every answer is what it was', async (t) => {
    const { id } = await create()
    t.strictSame((await request({ method: 'PUT', url: `/book/${id}`, payload: { year: 1 } })).body.data, { id, ...BOOK, year: 1 })
    t.strictSame((await request({ method: 'PUT', url: `/book/${id + 1000}`, payload: { year: 1 } })).body, errorEnvelope(404, 'Book not found'))
    t.strictSame((await request({ method: 'DELETE', url: `/book/${id}` })).body, { status: 200, message: 'Book deleted successfully', data: null })
  })
})

/**
 * What a real service process does with input that is not what it seems: strings that are not
 * well-formed Unicode (lone surrogates, bytes that are not UTF-8), bodies in a content coding or a
 * charset it does not read, and paths under /docs/static/ and /console/ that climb out of them.
 * Every one is a 4xx envelope and changes nothing; the well-formed neighbours of each still work.
 */
import t from 'tap'
import { PASSWORD, testEnv, USERNAME } from '../helper.js'
import { createDatabase, pgClient } from '../helpers/database.js'
import { rawRequest } from '../helpers/raw-http.js'
import { type Service, startService } from '../helpers/service.js'

const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }

interface Exchange {
  method: string
  path: string
  token?: string
  headers?: Record<string, string>
  /** A string is sent as UTF-8; a Buffer byte for byte */
  body?: string | Buffer
}

/** One exchange on a raw socket, so that headers and bytes go out exactly as given. */
async function send (service: Service, { method, path, token, headers = {}, body }: Exchange) {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: localhost', 'Connection: close']
  if (token !== undefined) lines.push(`Authorization: ${token}`)
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`)
  const bytes = body === undefined ? Buffer.alloc(0) : Buffer.from(body)
  if (body !== undefined) lines.push(`Content-Length: ${bytes.length}`)
  const answer = await rawRequest(service.port, Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), bytes]))
  let json: unknown = null
  if ((answer.headers['content-type'] ?? '').startsWith('application/json')) json = JSON.parse(answer.text)
  return { ...answer, json }
}

const envelope = (status: number, message: string) => ({ status, message, data: null })

t.test('request input: ill-formed Unicode, content codings, charsets, /docs/static/ paths', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: BOOK })
  t.equal(created.status, 201)
  const id = (created.body as { data: { id: number } }).data.id

  const db = await pgClient(t, dbUrl)
  const books = async () => (await db.query('SELECT id::int, title, author, year FROM books ORDER BY id')).rows
  const stored = await books()
  t.strictSame(stored, [{ id, ...BOOK }])

  const json = { 'Content-Type': 'application/json' }
  const book = `/book/${id}`
  const missing = `/book/${id + 1000}`

  await t.test('a lone surrogate in any string of a body is 400 with the route\'s message, and nothing is stored', async (t) => {
    // JSON escapes of lone surrogates, high and low, in values and in keys; JSON.stringify writes them as escapes
    const cases: Array<[string, string, unknown, string]> = [
      ['POST', '/book', { ...BOOK, title: '\ud800' }, 'Invalid input'],
      ['POST', '/book', { ...BOOK, author: 'x\udfffy' }, 'Invalid input'],
      ['POST', '/book', { ...BOOK, title: '\ude00\ud83d' }, 'Invalid input'],
      ['POST', '/book', { ...BOOK, unknown: ['\udc00'] }, 'Invalid input'],
      ['POST', '/book', { ...BOOK, '\ud800': 1 }, 'Invalid input'],
      ['PUT', book, { title: '\ud800' }, 'Invalid input'],
      ['PUT', book, { author: 'a\udbff' }, 'Invalid input'],
      ['DELETE', book, { x: '\ud800' }, 'Bad request'],
      ['POST', '/token', { username: '\ud800', password: PASSWORD }, 'Invalid request payload'],
      ['POST', '/token', { username: USERNAME, password: `${PASSWORD}\udc00` }, 'Invalid request payload']
    ]
    for (const [method, path, body, message] of cases) {
      const text = JSON.stringify(body)
      t.match(text, /\\ud[89a-f]/, `the body carries an escaped surrogate: ${text}`)
      const answer = await send(service, { method, path, token: path === '/token' ? undefined : token, headers: json, body: text })
      t.strictSame([answer.status, answer.json], [400, envelope(400, message)], `${method} ${path} ${text}`)
    }
    // The same with bytes that are not UTF-8: raw surrogates (ED A0 80), stray bytes, overlong forms
    for (const bytes of [[0xed, 0xa0, 0x80], [0xff, 0xfe], [0xc0, 0xaf], [0x80]]) {
      const body = Buffer.concat([Buffer.from('{"title":"'), Buffer.from(bytes), Buffer.from('","author":"A","year":1}')])
      const answer = await send(service, { method: 'POST', path: '/book', token, headers: json, body })
      t.strictSame([answer.status, answer.json], [400, envelope(400, 'Invalid input')], `POST /book with bytes ${Buffer.from(bytes).toString('hex')}`)
      const put = await send(service, { method: 'PUT', path: book, token, headers: json, body })
      t.strictSame([put.status, put.json], [400, envelope(400, 'Invalid input')], `PUT with bytes ${Buffer.from(bytes).toString('hex')}`)
    }
    // On PUT the book is looked up first: a missing book is 404 whatever the body
    const onMissing = await send(service, { method: 'PUT', path: missing, token, headers: json, body: '{"title":"\\ud800"}' })
    t.strictSame([onMissing.status, onMissing.json], [404, envelope(404, 'Book not found')])
    t.strictSame(await books(), stored, 'nothing was stored or changed')

    // Well-formed neighbours: a surrogate pair, escaped or raw, and an escaped backslash before "ud800"
    const pair = await send(service, { method: 'PUT', path: book, token, headers: json, body: '{"title":"\\ud83d\\ude00 \u{1F600} \\\\ud800"}' })
    t.strictSame([pair.status, pair.json], [200, {
      status: 200, message: 'Book updated successfully', data: { id, ...BOOK, title: '\u{1F600} \u{1F600} \\ud800' }
    }])
    t.strictSame(await books(), [{ id, ...BOOK, title: '\u{1F600} \u{1F600} \\ud800' }], 'stored exactly as answered')
    const back = await send(service, { method: 'PUT', path: book, token, headers: json, body: JSON.stringify({ title: BOOK.title }) })
    t.equal(back.status, 200)
  })

  await t.test('a Content-Encoding other than identity, or a charset other than UTF-8, is 415 on every route with a body', async (t) => {
    const bodies: Array<[string, string, string]> = [
      ['POST', '/book', JSON.stringify(BOOK)],
      ['PUT', book, JSON.stringify({ title: 'Changed' })],
      ['DELETE', book, '{}'],
      ['POST', '/token', JSON.stringify({ username: USERNAME, password: PASSWORD })]
    ]
    const refused: Array<Record<string, string>> = [
      { 'Content-Encoding': 'x-foo' },
      { 'Content-Encoding': 'gzip' },
      { 'Content-Encoding': 'br' },
      { 'Content-Encoding': 'deflate' },
      { 'Content-Encoding': 'identity, gzip' },
      { 'Content-Encoding': 'gzip, identity' },
      { 'Content-Type': 'application/json; charset=latin1' },
      { 'Content-Type': 'application/json; charset=utf-16' },
      { 'Content-Type': 'application/json; charset="iso-8859-1"' },
      { 'Content-Type': 'application/json; charset=' },
      { 'Content-Type': 'application/json; charset=nonsense' }
    ]
    for (const [method, path, body] of bodies) {
      for (const headers of refused) {
        const answer = await send(service, { method, path, token: path === '/token' ? undefined : token, headers: { ...json, ...headers }, body })
        t.strictSame([answer.status, answer.json], [415, envelope(415, 'Unsupported media type')], `${method} ${path} ${JSON.stringify(headers)}`)
      }
    }
    // PUT looks the book up before the body: 404 for a missing book, whatever the coding
    const onMissing = await send(service, { method: 'PUT', path: missing, token, headers: { ...json, 'Content-Encoding': 'gzip' }, body: '{}' })
    t.strictSame([onMissing.status, onMissing.json], [404, envelope(404, 'Book not found')])
    t.strictSame(await books(), stored, 'nothing was stored, changed or deleted')

    // What is still read: identity in any case and spacing, and UTF-8 under each of its names
    const accepted: Array<Record<string, string>> = [
      { 'Content-Encoding': 'identity' },
      { 'Content-Encoding': ' IDENTITY , ' },
      { 'Content-Type': 'application/json; charset=utf-8' },
      { 'Content-Type': 'application/json;charset=UTF-8' },
      { 'Content-Type': 'application/json; charset="utf-8"' },
      { 'Content-Type': 'application/json; charset=utf8' },
      { 'Content-Type': 'application/json; charset=unicode-1-1-utf-8; foo=bar' }
    ]
    for (const headers of accepted) {
      const answer = await send(service, { method: 'POST', path: '/token', headers: { ...json, ...headers }, body: bodies[3]![2] })
      t.equal(answer.status, 200, `POST /token ${JSON.stringify(headers)}`)
    }
  })

  await t.test('a /docs/static/ or /console/ path that climbs out is 404 Route not found; the real files load', async (t) => {
    const css = await send(service, { method: 'GET', path: '/docs/static/swagger-ui.css' })
    t.equal(css.status, 200)
    t.match(css.headers['content-type'], /^text\/css/)
    const page = await send(service, { method: 'GET', path: '/console/' })
    t.equal(page.status, 200)
    t.match(page.headers['content-type'], /^text\/html/)
    // Each under both directories of files: the Swagger UI's and the console's
    const climbing = [
      '../json', '%2e%2e/json', '%2E%2E%2Fjson', '..%2fjson', '%252e%252e/json', '..\\json', '%2e%2e%5cjson',
      '\\..\\..\\package.json', '/etc/passwd', 'a/../index.html', '..', '%2e%2e', '%00', 'a%2f..%2f..%2fpackage.json',
      '../../../../etc/passwd', '../../package.json', '%2e%2e/%2e%2e/package.json'
    ]
    for (const path of ['/docs/static/', '/console/'].flatMap((directory) => climbing.map((climb) => directory + climb))) {
      for (const method of ['GET', 'HEAD']) {
        const answer = await rawRequest(service.port, `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`, { head: method === 'HEAD' })
        t.equal(answer.status, 404, `${method} ${path}`)
        if (method === 'GET') t.strictSame(JSON.parse(answer.text), envelope(404, 'Route not found'), path)
      }
    }
  })
})

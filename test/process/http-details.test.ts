/**
 * What the second outside probe found at the HTTP level, on a real socket, each case the exact
 * answer: two `Host` fields (400), a request line of another HTTP version (505, whether Node's
 * parser takes it or not), more header fields than the service reads (431, so a second
 * `Authorization` past them cannot slip through), `Cache-Control: no-store` on every answer that
 * needs a token, and tokens whose header holds more than `alg` and `typ` (401). The same kinds of
 * requests are in the random ones of hostile-http.test.ts.
 */
import t from 'tap'
import { MAX_HEADER_FIELDS } from '../../plugins/app/http-edge.js'
import { failure, Message } from '../../src/envelope.js'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { rawRequest } from '../helpers/raw-http.js'
import { type Service, startService } from '../helpers/service.js'
import { b64url, encodeJson, mint, nowSeconds, signInput } from '../helpers/tokens.js'

/** `GET /books` with `token` and `fields` more header lines, on a connection closed after it. */
function listing (service: Service, token: string, fields: string[] = [], requestLine = 'GET /books HTTP/1.1') {
  return rawRequest(service.port, `${requestLine}\r\nHost: localhost\r\nAuthorization: ${token}\r\n` +
    fields.map((field) => `${field}\r\n`).join('') + 'Connection: close\r\n\r\n')
}

const fillers = (count: number) => Array.from({ length: count }, (_, i) => `X-Filler-${i}: x`)

t.test('HTTP details', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const token = await service.token()

  t.test('two Host fields: 400', async (t) => {
    const answer = await listing(service, token, ['Host: evil.example'])
    t.equal(answer.status, 400)
    t.strictSame(JSON.parse(answer.text), failure(400, Message.BadRequest))
  })

  t.test('HTTP/2.0 and HTTP/1.2 in the request line: 505, and the connection closes', async (t) => {
    for (const version of ['HTTP/2.0', 'HTTP/1.2']) {
      const answer = await listing(service, token, [], `GET /books ${version}`)
      t.equal(answer.status, 505, version)
      t.strictSame(JSON.parse(answer.text), failure(505, Message.HttpVersionNotSupported), `${version}: the envelope`)
      t.equal(answer.headers.connection, 'close', `${version}: Connection: close`)
    }
    t.equal((await listing(service, token, [], 'GET /books HTTP/1.0')).status, 200, 'HTTP/1.0 is served')
  })

  t.test(`header fields: ${MAX_HEADER_FIELDS} are read, one more is 431, and nothing past them is missed`, async (t) => {
    // Host, Authorization and Connection are three of them
    t.equal((await listing(service, token, fillers(MAX_HEADER_FIELDS - 3))).status, 200, `${MAX_HEADER_FIELDS} fields: served`)
    const over = await listing(service, token, fillers(MAX_HEADER_FIELDS - 2))
    t.equal(over.status, 431, `${MAX_HEADER_FIELDS + 1} fields: 431`)
    t.strictSame(JSON.parse(over.text), failure(431, Message.HeadersTooLarge))
    // The probe's request: a valid token, 1,021 small fields (4 KB), then a second Authorization
    const hidden = await listing(service, token, [...fillers(1021), 'Authorization: garbage'])
    t.equal(hidden.status, 431, 'a second Authorization after 1,021 fields does not slip through')
    t.equal((await listing(service, token, [...fillers(10), 'Authorization: garbage'])).status, 401, 'as it does not after 10')
  })

  t.test('Cache-Control: no-store on every answer that needs a token, errors included', async (t) => {
    const book = await service.request('POST', '/book', { token, body: { title: 'Dune', author: 'Frank Herbert', year: 1965 } })
    const id = (book.body as { data: { id: number } }).data.id
    const answers = {
      'POST /book': book,
      'GET /books': await service.request('GET', '/books', { token }),
      'GET /book/<id>': await service.request('GET', `/book/${id}`, { token }),
      'PUT /book/<id>': await service.request('PUT', `/book/${id}`, { token, body: { year: 1966 } }),
      'GET /book/<missing id>': await service.request('GET', '/book/999999', { token }),
      'GET /books without a token': await service.request('GET', '/books'),
      'DELETE /book/<id>': await service.request('DELETE', `/book/${id}`, { token })
    }
    for (const [name, answer] of Object.entries(answers)) {
      t.equal(answer.headers.get('cache-control'), 'no-store', `${name} (${answer.status})`)
    }
    t.equal((await service.request('GET', '/health/live')).headers.get('cache-control'), null, 'not on an answer that needs no token')
  })

  t.test('a token whose header holds more than alg and typ: 401, though signed with the secret', async (t) => {
    const payload = { exp: nowSeconds() + 600 }
    t.equal((await listing(service, mint({ header: { alg: 'HS256', typ: 'JWT' }, payload }))).status, 200, 'precondition: {"alg":"HS256","typ":"JWT"} is ours')
    const headers: Record<string, unknown> = {
      'no typ': { alg: 'HS256' },
      kid: { alg: 'HS256', typ: 'JWT', kid: '../../etc/passwd' },
      jku: { alg: 'HS256', typ: 'JWT', jku: 'http://evil.example/keys' },
      x5u: { alg: 'HS256', typ: 'JWT', x5u: 'http://evil.example/cert' },
      jwk: { alg: 'HS256', typ: 'JWT', jwk: { kty: 'oct', k: 'c2VjcmV0' } },
      'typ other than JWT': { alg: 'HS256', typ: 'at+jwt' }
    }
    for (const [name, header] of Object.entries(headers)) {
      const answer = await listing(service, mint({ header, payload }))
      t.equal(answer.status, 401, name)
      t.strictSame(JSON.parse(answer.text), failure(401, Message.InvalidToken), `${name}: Invalid token`)
    }
    // Two alg keys: JSON.parse keeps the last, so the signature checks out as HS256's
    const twice = signInput(`${b64url('{"alg":"none","alg":"HS256","typ":"JWT"}')}.${encodeJson(payload)}`)
    t.equal((await listing(service, twice)).status, 401, 'two alg keys')
  })
})

/**
 * CORS: off unless CORS_ORIGINS lists origins; then only those origins get CORS headers, a
 * preflight is answered before authentication on every path, and everything else (the 404 and
 * 405 envelopes, OPTIONS from other origins) stays as it is with CORS off.
 */
import type { FastifyInstance, InjectOptions } from 'fastify'
import t, { type Test } from 'tap'
import { build, getToken } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'

const APP = 'https://app.example'
const DEV = 'http://localhost:5173'
const METHOD_NOT_ALLOWED = { status: 405, message: 'Method not allowed', data: null }
const ROUTE_NOT_FOUND = { status: 404, message: 'Route not found', data: null }

function corsHeaders (headers: Record<string, unknown>) {
  return Object.keys(headers).filter((name) => name.startsWith('access-control-'))
}

function preflight (url: string, origin: string | undefined, method = 'PUT'): InjectOptions {
  return {
    method: 'OPTIONS',
    url,
    headers: {
      ...(origin === undefined ? {} : { origin }),
      'access-control-request-method': method,
      'access-control-request-headers': 'authorization,content-type'
    }
  }
}

/** What OPTIONS and a cross-origin GET get when CORS does nothing for them, as with CORS off. */
async function untouched (t: Test, app: FastifyInstance, token: string, origin: string | undefined) {
  const options = await app.inject(preflight('/book/1', origin))
  t.equal(options.statusCode, 405, 'OPTIONS on a known path: 405 as without CORS')
  t.equal(options.headers.allow, 'GET, HEAD, PUT, DELETE')
  t.strictSame(options.json(), METHOD_NOT_ALLOWED)
  t.strictSame(corsHeaders(options.headers), [], 'no CORS headers on the preflight')

  const unknown = await app.inject(preflight('/nowhere', origin))
  t.equal(unknown.statusCode, 404, 'OPTIONS on an unknown path: 404')
  t.strictSame(unknown.json(), ROUTE_NOT_FOUND)
  t.strictSame(corsHeaders(unknown.headers), [])

  const get = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token, ...(origin === undefined ? {} : { origin }) } })
  t.equal(get.statusCode, 200, 'the request itself is served (the browser decides)')
  t.strictSame(corsHeaders(get.headers), [], 'no CORS headers on the response')
}

t.test('off by default: no CORS headers, OPTIONS answered as before', { skip: STORE_INDEPENDENT }, async (t) => {
  // The build's configuration has no CORS_ORIGINS: unset
  const app = await build(t)
  const token = await getToken(app)
  await untouched(t, app, token, APP)
  const get = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token, origin: APP } })
  t.notOk(String(get.headers.vary ?? '').toLowerCase().includes('origin'), 'no Vary: Origin either')
})

t.test('a listed origin', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t, undefined, { CORS_ORIGINS: ` ${APP} ,${DEV}` })
  const token = await getToken(app)

  t.test('preflight: 204 with the methods and headers the routes use, before authentication', async (t) => {
    for (const [origin, url, method] of [[APP, '/book/1', 'PUT'], [APP, '/book', 'POST'], [DEV, '/token', 'POST'], [APP, '/books', 'GET'], [APP, '/book/7', 'DELETE']]) {
      const response = await app.inject(preflight(url!, origin, method))
      t.equal(response.statusCode, 204, `${origin} ${method} ${url}`)
      t.equal(response.body, '')
      t.equal(response.headers['access-control-allow-origin'], origin)
      t.equal(response.headers['access-control-allow-methods'], 'GET, HEAD, POST, PUT, DELETE')
      t.equal(response.headers['access-control-allow-headers'], 'Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match')
      t.equal(response.headers['access-control-max-age'], '7200')
      t.notOk('access-control-allow-credentials' in response.headers, 'no credentials: the token is a header, not a cookie')
      t.match(response.headers.vary, /origin/i, 'Vary: Origin for caches')
    }
  })

  t.test('actual requests: the origin allowed, X-Request-Id readable, errors too', async (t) => {
    const cases: Array<[InjectOptions, number]> = [
      [{ method: 'GET', url: '/books', headers: { authorization: token, origin: APP } }, 200],
      [{ method: 'POST', url: '/book', headers: { authorization: token, origin: DEV }, payload: { title: 'Dune', author: 'Frank Herbert', year: 1965 } }, 201],
      [{ method: 'GET', url: '/books', headers: { origin: APP } }, 401],
      [{ method: 'GET', url: '/book/999', headers: { authorization: token, origin: APP } }, 404],
      [{ method: 'GET', url: '/nowhere', headers: { origin: APP } }, 404],
      [{ method: 'PATCH', url: '/books', headers: { origin: APP } }, 405]
    ]
    for (const [request, status] of cases) {
      const response = await app.inject(request)
      const label = `${request.method} ${request.url} ${status}`
      t.equal(response.statusCode, status, label)
      t.equal(response.headers['access-control-allow-origin'], (request.headers as { origin: string }).origin, `${label}: allowed origin`)
      t.equal(response.headers['access-control-expose-headers'], 'X-Request-Id, Retry-After, ETag, Link, RateLimit-Policy, RateLimit', `${label}: exposed headers`)
      t.match(response.headers['x-request-id'], /^[0-9a-f-]{36}$/)
      t.notOk('access-control-allow-methods' in response.headers, `${label}: preflight headers only on preflights`)
    }
  })

  t.test('an OPTIONS from the origin without Access-Control-Request-Method: 204, no plain-text 400', async (t) => {
    const response = await app.inject({ method: 'OPTIONS', url: '/books', headers: { origin: APP } })
    t.equal(response.statusCode, 204)
    t.equal(response.headers['access-control-allow-origin'], APP)
  })

  t.test('an OPTIONS without Origin is no CORS request: answered as without CORS', async (t) => {
    await untouched(t, app, token, undefined)
  })

  t.test('other origins: no CORS headers at all, OPTIONS answered as without CORS', async (t) => {
    for (const origin of ['https://evil.example', 'http://app.example', 'https://app.example:8443', 'https://app.example.evil.example', 'null', `${APP}/`]) {
      t.test(origin, async (t) => untouched(t, app, token, origin))
    }
  })
})

t.test('origins are compared as browsers send them', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t, await createDatabase(t), { CORS_ORIGINS: 'https://App.Example:443' })
  const response = await app.inject(preflight('/books', APP, 'GET'))
  t.equal(response.statusCode, 204)
  t.equal(response.headers['access-control-allow-origin'], APP)
})

t.test('CORS_ORIGINS must list origins: no wildcard, path or bare host', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  for (const value of ['*', `${APP}/`, 'app.example', `${APP}/app`, `${APP}, *`, 'ftp://app.example']) {
    await t.rejects(build(t, dbUrl, { CORS_ORIGINS: value }), /CORS_ORIGINS/, JSON.stringify(value))
  }
  const off = await build(t, dbUrl, { CORS_ORIGINS: '' })
  const response = await off.inject(preflight('/books', APP, 'GET'))
  t.equal(response.statusCode, 405, 'empty is off')
  t.strictSame(corsHeaders(response.headers), [])
})

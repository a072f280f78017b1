/**
 * The authenticate hook of the book routes: every kind of missing or bad token is 401 on every
 * protected route before the body is read and without the database; HMAC-family tokens with
 * only `exp` pass; expiry is exact to the millisecond.
 */
import { constants, generateKeyPairSync } from 'node:crypto'
import type { FastifyInstance, InjectOptions } from 'fastify'
import pg from 'pg'
import t from 'tap'
import { build, expectEnvelope, getToken, PASSWORD, postToken, USERNAME } from '../helper.js'
import { ADMIN_URL, createDatabase, NEEDS_SERVER, refuseConnections, STORE_INDEPENDENT } from '../helpers/database.js'
import {
  b64url, base64urlTwin, decodeToken, encodeJson, HS256_HEADER, mint, mintAsymmetric, nowSeconds, signInput, tokenWithUrlSafeSignatureChars
} from '../helpers/tokens.js'
import { waitUntil } from '../helpers/wait.js'

const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }

/** The protected routes, each with a well-formed body where it takes one. */
const PROTECTED: InjectOptions[] = [
  { method: 'POST', url: '/book', payload: BOOK },
  { method: 'GET', url: '/books' },
  { method: 'GET', url: '/book/1' },
  { method: 'PUT', url: '/book/1', payload: { title: 'Changed' } },
  { method: 'DELETE', url: '/book/1' }
]

function routeName (route: InjectOptions): string {
  return `${route.method} ${route.url}`
}

/** `route` with the Authorization header set to `authorization`, or without one when undefined. */
function callRoute (app: FastifyInstance, route: InjectOptions, authorization?: string) {
  const headers = authorization === undefined ? {} : { authorization }
  return app.inject({ ...route, headers: { ...route.headers, ...headers } })
}

// ---------------------------------------------------------------------------------------------
// 4. Every protected route rejects every kind of bad token with 401
// ---------------------------------------------------------------------------------------------

interface AuthCase {
  name: string
  message: 'Authorization token required' | 'Invalid token'
  /** The Authorization header value (undefined: no header); built just before use. */
  authorization: (validToken: string) => string | undefined
}

const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
const ed = generateKeyPairSync('ed25519')

/** A token valid in every respect except the one the case changes. */
const live = () => ({ exp: nowSeconds() + 60 })

const AUTH_CASES: AuthCase[] = [
  { name: 'header absent', message: 'Authorization token required', authorization: () => undefined },
  { name: 'header empty', message: 'Authorization token required', authorization: () => '' },

  { name: 'Bearer prefix before a valid token', message: 'Invalid token', authorization: (valid) => `Bearer ${valid}` },
  {
    // The instance keeps the valid token as verified (it was accepted just before): a kept token
    // is found by its exact text, never by the bytes it decodes to
    name: 'the valid token, its signature spelled otherwise (the same bytes), after the valid one was accepted and kept',
    message: 'Invalid token',
    authorization: (valid) => {
      const dot = valid.lastIndexOf('.')
      const twin = valid.slice(0, dot + 1) + base64urlTwin(valid.slice(dot + 1))
      if (twin === valid) throw new Error('an HS256 signature has unused bits: it has a twin')
      return twin
    }
  },
  { name: 'garbage abc', message: 'Invalid token', authorization: () => 'abc' },
  { name: 'a.b.c', message: 'Invalid token', authorization: () => 'a.b.c' },
  {
    name: 'alg none, empty signature',
    message: 'Invalid token',
    authorization: () => `${encodeJson({ alg: 'none', typ: 'JWT' })}.${encodeJson(live())}.`
  },
  {
    name: 'alg none, with a signature',
    message: 'Invalid token',
    authorization: () => mint({ header: { alg: 'none', typ: 'JWT' }, payload: live() })
  },
  {
    name: 'RS256 signed with a real RSA key',
    message: 'Invalid token',
    authorization: () => mintAsymmetric('RS256', live(), 'sha256', rsa.privateKey)
  },
  {
    name: 'ES256 signed with a real EC key',
    message: 'Invalid token',
    authorization: () => mintAsymmetric('ES256', live(), 'sha256', ec.privateKey, { dsaEncoding: 'ieee-p1363' })
  },
  {
    name: 'PS256 signed with a real RSA key',
    message: 'Invalid token',
    authorization: () => mintAsymmetric('PS256', live(), 'sha256', rsa.privateKey,
      { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 })
  },
  {
    name: 'EdDSA signed with a real ed25519 key',
    message: 'Invalid token',
    authorization: () => mintAsymmetric('EdDSA', live(), null, ed.privateKey)
  },
  {
    name: 'alg hs256 (lowercase) signed with SECRET',
    message: 'Invalid token',
    authorization: () => mint({ header: { alg: 'hs256', typ: 'JWT' }, payload: live() })
  },
  {
    name: 'HS256 signed with another secret',
    message: 'Invalid token',
    authorization: () => mint({ payload: live(), secret: 'another-secret-that-is-also-32-bytes-long!' })
  },
  {
    name: 'payload edited (exp increased), old signature kept',
    message: 'Invalid token',
    authorization: (valid) => {
      const [header, , signature] = valid.split('.')
      const { payload } = decodeToken(valid)
      return `${header}.${encodeJson({ ...payload, exp: payload.exp + 3600 })}.${signature}`
    }
  },
  { name: 'expired 10 s ago', message: 'Invalid token', authorization: () => mint({ payload: { exp: nowSeconds() - 10 } }) },
  { name: 'exp is the current second', message: 'Invalid token', authorization: () => mint({ payload: { exp: nowSeconds() } }) },
  { name: 'no exp (payload {})', message: 'Invalid token', authorization: () => mint({ payload: {} }) },
  { name: 'exp as a string', message: 'Invalid token', authorization: () => mint({ payload: { exp: '9999999999' } }) },
  { name: 'exp null', message: 'Invalid token', authorization: () => mint({ payload: { exp: null } }) },
  { name: 'exp as an array', message: 'Invalid token', authorization: () => mint({ payload: { exp: [nowSeconds() + 60] } }) },
  { name: 'payload a JSON array', message: 'Invalid token', authorization: () => mint({ payload: [1] }) },
  { name: 'payload a JSON number', message: 'Invalid token', authorization: () => mint({ payload: 42 }) },
  {
    name: 'payload not JSON',
    message: 'Invalid token',
    authorization: () => signInput(`${encodeJson(HS256_HEADER)}.${b64url('not json')}`)
  },
  {
    name: 'header not JSON',
    message: 'Invalid token',
    authorization: () => signInput(`${b64url('{"alg":"HS256"')}.${encodeJson(live())}`)
  },
  {
    name: 'base64 padding (=) on the signature',
    message: 'Invalid token',
    authorization: () => `${mint({ payload: live() })}=`
  },
  {
    name: 'base64 padding (=) on the payload, correctly signed',
    message: 'Invalid token',
    authorization: () => {
      // 19 bytes of valid JSON: standard base64 pads them with ==
      const payload = Buffer.from(`{"exp":${live().exp} }`).toString('base64')
      if (!payload.endsWith('==')) throw new Error(`payload segment ${payload} is not padded`)
      return signInput(`${encodeJson(HS256_HEADER)}.${payload}`)
    }
  },
  {
    name: 'signature in the + / alphabet',
    message: 'Invalid token',
    authorization: () => {
      const token = tokenWithUrlSafeSignatureChars()
      const dot = token.lastIndexOf('.')
      return token.slice(0, dot + 1) + token.slice(dot + 1).replace(/-/g, '+').replace(/_/g, '/')
    }
  },
  {
    name: '* inside the payload, correctly signed',
    message: 'Invalid token',
    authorization: () => {
      const payload = encodeJson(live())
      return signInput(`${encodeJson(HS256_HEADER)}.${payload.slice(0, 4)}*${payload.slice(4)}`)
    }
  },
  {
    name: '* inside the signature',
    message: 'Invalid token',
    authorization: () => {
      const token = mint({ payload: live() })
      return `${token.slice(0, -4)}*${token.slice(-4)}`
    }
  },
  {
    name: 'whitespace inside the payload, correctly signed',
    message: 'Invalid token',
    authorization: () => {
      const payload = encodeJson(live())
      return signInput(`${encodeJson(HS256_HEADER)}.${payload.slice(0, 4)} ${payload.slice(4)}`)
    }
  },
  {
    name: 'whitespace inside the signature',
    message: 'Invalid token',
    authorization: () => {
      const token = mint({ payload: live() })
      return `${token.slice(0, -4)} ${token.slice(-4)}`
    }
  },
  // docs/api.md: the header is {"alg":...,"typ":"JWT"}, spelled as the service writes it
  {
    name: 'a header without typ, {"alg":"HS256"}, correctly signed',
    message: 'Invalid token',
    authorization: () => mint({ header: { alg: 'HS256' }, payload: live() })
  },
  {
    name: 'a header with typ before alg, {"typ":"JWT","alg":"HS256"}, correctly signed',
    message: 'Invalid token',
    authorization: () => mint({ header: { typ: 'JWT', alg: 'HS256' }, payload: live() })
  },
  {
    name: 'a header with a space, {"alg":"HS256", "typ":"JWT"}, correctly signed',
    message: 'Invalid token',
    authorization: () => signInput(`${b64url('{"alg":"HS256", "typ":"JWT"}')}.${encodeJson(live())}`)
  },
  {
    name: 'crit ["foo"] with a foo field, correctly signed',
    message: 'Invalid token',
    authorization: () => mint({ header: { alg: 'HS256', typ: 'JWT', crit: ['foo'], foo: 'bar' }, payload: live() })
  }
]

t.test('protected routes reject missing and invalid tokens', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  const valid = await getToken(app)

  // Book 1 exists, so a request that slipped through would answer 200/201, not 401
  const created = await callRoute(app, { method: 'POST', url: '/book', payload: BOOK }, valid)
  expectEnvelope(t, created, 201, 'Book created successfully', { id: 1, ...BOOK })

  for (const authCase of AUTH_CASES) {
    t.test(authCase.name, async (t) => {
      for (const route of PROTECTED) {
        const response = await callRoute(app, route, authCase.authorization(valid))
        t.test(routeName(route), async (t) => {
          expectEnvelope(t, response, 401, authCase.message)
        })
      }
    })
  }

  // Our tokens never carry nbf; one that is not valid yet is refused like any other bad token
  t.test('a token with a future nbf', async (t) => {
    const notYet = mint({ payload: { exp: nowSeconds() + 600, nbf: nowSeconds() + 300 } })
    expectEnvelope(t, await callRoute(app, { method: 'GET', url: '/books' }, notYet), 401, 'Invalid token')
  })

  t.test('no handler ran: the one book is unchanged and still there', async (t) => {
    const list = await callRoute(app, { method: 'GET', url: '/books' }, valid)
    expectEnvelope(t, list, 200, 'Books retrieved successfully', [{ id: 1, ...BOOK }])
  })
})

t.test('correctly signed HMAC-family tokens with only exp are accepted', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  for (const [alg, hash] of [['HS256', 'sha256'], ['HS384', 'sha384'], ['HS512', 'sha512']] as const) {
    t.test(alg, async (t) => {
      const token = mint({ header: { alg, typ: 'JWT' }, payload: { exp: nowSeconds() + 60 }, hash })
      const response = await callRoute(app, { method: 'GET', url: '/books' }, token)
      expectEnvelope(t, response, 200, 'Books retrieved successfully', [])
    })
  }
})

// ---------------------------------------------------------------------------------------------
// 5. Authentication runs before the body is read
// ---------------------------------------------------------------------------------------------

t.test('authentication runs before the body is parsed', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  const invalid = mint({ payload: { exp: nowSeconds() + 60 }, secret: 'another-secret-that-is-also-32-bytes-long!' })
  const oversized = JSON.stringify({ title: 'x'.repeat(100 * 1024), author: 'A', year: 2000 })

  const bodies: Array<[string, string]> = [['malformed JSON', '{"title":'], ['100 KiB body', oversized]]
  const auths: Array<[string, string | undefined, string]> = [
    ['no token', undefined, 'Authorization token required'],
    ['invalid token', invalid, 'Invalid token']
  ]
  for (const url of ['/book', '/book/1']) {
    const method = url === '/book' ? 'POST' : 'PUT'
    for (const [bodyName, payload] of bodies) {
      for (const [authName, authorization, message] of auths) {
        t.test(`${method} ${url}, ${bodyName}, ${authName}`, async (t) => {
          const headers: Record<string, string> = { 'content-type': 'application/json' }
          if (authorization !== undefined) headers.authorization = authorization
          const response = await app.inject({ method, url, headers, payload })
          expectEnvelope(t, response, 401, message)
        })
      }
    }
  }
})

// ---------------------------------------------------------------------------------------------
// 6. Authentication never touches the database
// ---------------------------------------------------------------------------------------------

async function adminQuery (sql: string) {
  const client = new pg.Client({ connectionString: ADMIN_URL })
  await client.connect()
  try {
    return await client.query(sql)
  } finally {
    await client.end()
  }
}

t.test('authentication and POST /token work with the database cut off', { skip: STORE_INDEPENDENT || NEEDS_SERVER }, async (t) => {
  const url = await createDatabase(t)
  const name = new URL(url).pathname.slice(1)
  t.match(name, /^bookkeeping_test_[0-9]+_[0-9a-f]+$/, 'database name from the URL')
  const app = await build(t, url)
  const valid = await getToken(app)

  await refuseConnections(t, url)
  const remaining = await adminQuery(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${name}'`)
  t.equal(remaining.rows[0].n, 0, 'no session left on the database')
  // The pool sees its connections die and drops them
  await waitUntil(() => app.pg.pool.totalCount === 0, 2000, 'the pool to drop its dead connections')

  for (const route of PROTECTED) {
    t.test(`${routeName(route)} without a token`, async (t) => {
      expectEnvelope(t, await callRoute(app, route), 401, 'Authorization token required')
    })
    t.test(`${routeName(route)} with an invalid token`, async (t) => {
      const invalid = mint({ payload: { exp: nowSeconds() - 10 } })
      expectEnvelope(t, await callRoute(app, route, invalid), 401, 'Invalid token')
    })
  }

  t.test('POST /token still issues a token', async (t) => {
    const response = await postToken(app, { username: USERNAME, password: PASSWORD })
    t.equal(response.statusCode, 200)
    t.equal(response.json().message, 'Token generated successfully')
    t.type(response.json().data.token, 'string')
  })

  t.test('the cut is real: a valid token on GET /books gets 503', async (t) => {
    const response = await callRoute(app, { method: 'GET', url: '/books' }, valid)
    expectEnvelope(t, response, 503, 'Service unavailable')
  })
})

// ---------------------------------------------------------------------------------------------
// 7. Expiry is exact, for a token kept as verified too (src/verified-tokens.ts): a token accepted
//    a millisecond before its `exp` is refused at `exp`, and after it
// ---------------------------------------------------------------------------------------------

t.test('a token is refused at the exact millisecond of its exp, accepted one before, though verified once and kept', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  const exp = nowSeconds() + 30
  const token = mint({ payload: { exp } })
  // Only Date.now() (what the hook and fast-jwt read) is the test's: timers, sockets and the
  // database run for real; restored when the test ends
  let now = exp * 1000 - 20_000
  t.capture(Date, 'now', () => now)
  const list = () => app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
  expectEnvelope(t, await list(), 200, 'Books retrieved successfully', [])
  now = exp * 1000 - 1
  expectEnvelope(t, await list(), 200, 'Books retrieved successfully', [])
  now = exp * 1000
  expectEnvelope(t, await list(), 401, 'Invalid token')
  // Long after its exp too: a cache that kept the verdict rather than the expiry (a flaw fast-jwt's
  // own cache is known for) would accept it for minutes
  now = exp * 1000 + 600_000
  expectEnvelope(t, await list(), 401, 'Invalid token')
})

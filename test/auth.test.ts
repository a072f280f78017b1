import { constants, createHmac, generateKeyPairSync, sign, type KeyObject } from 'node:crypto'
import { mock } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type { JWT } from '@fastify/jwt'
import Fastify, { type FastifyInstance, type InjectOptions, type LightMyRequestResponse } from 'fastify'
import pg from 'pg'
import t, { type Test } from 'tap'
import { errorHandler } from '../src/errors.js'
import tokenRoutes from '../routes/token.js'
import { ADMIN_URL, NEEDS_SERVER, PASSWORD, SECRET, USERNAME, build, createDatabase, getToken, refuseConnections } from './helper.js'

// ---------------------------------------------------------------------------------------------
// Helpers: tokens crafted byte for byte, and the exact envelope check
// ---------------------------------------------------------------------------------------------

type Hash = 'sha256' | 'sha384' | 'sha512'

const HS256_HEADER = { alg: 'HS256', typ: 'JWT' }
const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }

function b64url (input: string | Buffer): string {
  return Buffer.from(input).toString('base64url')
}

function fromB64url (segment: string): string {
  return Buffer.from(segment, 'base64url').toString('utf8')
}

function encodeJson (value: unknown): string {
  return b64url(JSON.stringify(value))
}

/** Unix time in whole seconds, as a JWT `exp` counts it. */
function nowSeconds (): number {
  return Math.floor(Date.now() / 1000)
}

/** base64url HMAC of `input`. */
function hmac (input: string, secret = SECRET, hash: Hash = 'sha256'): string {
  return createHmac(hash, secret).update(input).digest('base64url')
}

/** `input.signature` with an HMAC over exactly `input` (whatever its segments look like). */
function signInput (input: string, secret = SECRET, hash: Hash = 'sha256'): string {
  return `${input}.${hmac(input, secret, hash)}`
}

/** A JWT whose header and payload are the JSON of the given values, HMAC-signed. */
function mint ({ header = HS256_HEADER, payload, secret = SECRET, hash = 'sha256' }: {
  header?: unknown, payload: unknown, secret?: string, hash?: Hash
}): string {
  return signInput(`${encodeJson(header)}.${encodeJson(payload)}`, secret, hash)
}

/** A JWT signed with an asymmetric key (`options` selects padding or signature encoding). */
function mintAsymmetric (alg: string, payload: unknown, digest: string | null,
  key: KeyObject, options: { padding?: number, saltLength?: number, dsaEncoding?: 'ieee-p1363' } = {}): string {
  const input = `${encodeJson({ alg, typ: 'JWT' })}.${encodeJson(payload)}`
  const signature = sign(digest, Buffer.from(input), { key, ...options })
  return `${input}.${b64url(signature)}`
}

/** A correctly signed HS256 token whose signature contains `-` or `_` (so it has a `+`/`/` twin). */
function tokenWithUrlSafeSignatureChars (): string {
  for (let extra = 60; ; extra++) {
    const token = mint({ payload: { exp: nowSeconds() + extra } })
    if (/[-_]/.test(token.slice(token.lastIndexOf('.') + 1))) return token
  }
}

function decodeToken (token: string) {
  const [header = '', payload = '', signature = ''] = token.split('.')
  return { header: JSON.parse(fromB64url(header)), payload: JSON.parse(fromB64url(payload)), signature }
}

/** The response is exactly `{status, message, data}` with `status` equal to the HTTP status. */
function expectEnvelope (t: Test, response: LightMyRequestResponse, status: number, message: string, data: unknown = null) {
  t.equal(response.statusCode, status, `HTTP ${status}`)
  t.match(response.headers['content-type'], /^application\/json/, 'JSON body')
  const body = response.json()
  t.strictSame(Object.keys(body).sort(), ['data', 'message', 'status'], 'exactly the envelope keys')
  t.strictSame(body, { status, message, data }, `envelope ${status} ${message}`)
}

function postToken (app: FastifyInstance, payload: unknown, headers: Record<string, string> = {}) {
  return app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload)
  })
}

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
// 1. POST /token issues the token SPEC.md describes
// ---------------------------------------------------------------------------------------------

t.test('POST /token issues an HS256 token with only exp, 15 minutes ahead', async (t) => {
  const app = await build(t)
  const before = nowSeconds()
  const response = await postToken(app, { username: USERNAME, password: PASSWORD })
  const after = nowSeconds()

  t.equal(response.statusCode, 200)
  const body = response.json()
  t.strictSame(Object.keys(body).sort(), ['data', 'message', 'status'])
  t.equal(body.status, 200)
  t.equal(body.message, 'Token generated successfully')
  t.strictSame(Object.keys(body.data), ['token'], 'data holds only token')
  t.type(body.data.token, 'string')

  const token: string = body.data.token
  const segments = token.split('.')
  t.equal(segments.length, 3, 'three segments')
  for (const segment of segments) t.match(segment, /^[A-Za-z0-9_-]+$/, 'canonical base64url segment')

  const { header, payload, signature } = decodeToken(token)
  t.strictSame(header, { alg: 'HS256', typ: 'JWT' }, 'header is exactly alg HS256, typ JWT')
  t.strictSame(Object.keys(header).sort(), ['alg', 'typ'], 'header has exactly two keys')
  t.strictSame(Object.keys(payload), ['exp'], 'payload has exp only (no iat)')
  t.ok(Number.isInteger(payload.exp), 'exp is an integer number of seconds')
  t.ok(payload.exp >= before + 900 - 2, `exp ${payload.exp} >= issue time + 900 - 2 (${before + 898})`)
  t.ok(payload.exp <= after + 900 + 2, `exp ${payload.exp} <= issue time + 900 + 2 (${after + 902})`)

  const [headerSegment, payloadSegment] = segments
  t.equal(signature, hmac(`${headerSegment}.${payloadSegment}`), 'HMAC-SHA256 over header.payload with SECRET')

  const books = await callRoute(app, { method: 'GET', url: '/books' }, token)
  expectEnvelope(t, books, 200, 'Books retrieved successfully', [])
})

// ---------------------------------------------------------------------------------------------
// 2. POST /token rejects wrong credentials and bodies that are not a Login request
// ---------------------------------------------------------------------------------------------

t.test('POST /token rejections', async (t) => {
  const app = await build(t)

  const wrongCredentials: Record<string, unknown> = {
    'wrong username': { username: 'someone-else', password: PASSWORD },
    'wrong password': { username: USERNAME, password: 'wrong password' },
    'both wrong': { username: 'someone-else', password: 'wrong password' },
    'empty strings': { username: '', password: '' },
    'username with the right prefix': { username: USERNAME.slice(0, -1), password: PASSWORD },
    'password with a trailing space': { username: USERNAME, password: `${PASSWORD} ` }
  }
  for (const [name, payload] of Object.entries(wrongCredentials)) {
    t.test(name, async (t) => {
      expectEnvelope(t, await postToken(app, payload), 401, 'Invalid credentials')
    })
  }

  const invalidValues: Record<string, unknown> = {
    number: 123,
    null: null,
    array: [USERNAME],
    object: { value: USERNAME }
  }
  const invalidBodies: Record<string, string> = {
    'username missing': JSON.stringify({ password: PASSWORD }),
    'password missing': JSON.stringify({ username: USERNAME }),
    'both missing': '{}',
    'empty body': '',
    'non-JSON body': 'username=librarian',
    'truncated JSON': '{"username":',
    'JSON array': JSON.stringify([USERNAME, PASSWORD]),
    'JSON string': JSON.stringify(USERNAME),
    'JSON null': 'null',
    'JSON number': '42'
  }
  for (const [kind, value] of Object.entries(invalidValues)) {
    invalidBodies[`username ${kind}`] = JSON.stringify({ username: value, password: PASSWORD })
    invalidBodies[`password ${kind}`] = JSON.stringify({ username: USERNAME, password: value })
  }
  for (const [name, payload] of Object.entries(invalidBodies)) {
    t.test(`400 for ${name}`, async (t) => {
      expectEnvelope(t, await postToken(app, payload), 400, 'Invalid request payload')
    })
  }

  for (const contentType of ['text/plain', 'application/xml']) {
    t.test(`415 for ${contentType}`, async (t) => {
      const body = contentType === 'text/plain'
        ? JSON.stringify({ username: USERNAME, password: PASSWORD })
        : `<login><username>${USERNAME}</username><password>${PASSWORD}</password></login>`
      const response = await postToken(app, body, { 'content-type': contentType })
      expectEnvelope(t, response, 415, 'Unsupported media type')
    })
  }
})

// ---------------------------------------------------------------------------------------------
// 3. A failing signer gives 500 `Could not generate token` and leaks nothing
// ---------------------------------------------------------------------------------------------

t.test('POST /token answers 500 Could not generate token when signing fails', async (t) => {
  const leak = 'SIGNER-EXPLODED-secret-detail-4711'
  const app = Fastify()
  t.teardown(() => app.close())
  // The only settings the token route reads
  app.decorate('config', { AUTH_USERNAME: USERNAME, AUTH_PASSWORD: PASSWORD, TOKEN_RATE_LIMIT: 30 } as FastifyInstance['config'])

  let signCalls = 0
  // Only the signer is faked; the route uses nothing else of @fastify/jwt
  const failingJwt = {
    sign () {
      signCalls++
      throw new Error(leak)
    }
  }
  app.decorate('jwt', failingJwt as unknown as JWT)
  app.setErrorHandler(errorHandler)
  await app.register(tokenRoutes)

  const response = await postToken(app, { username: USERNAME, password: PASSWORD })
  expectEnvelope(t, response, 500, 'Could not generate token')
  t.equal(signCalls, 1, 'the signer was called')
  t.notMatch(response.body, /SIGNER|EXPLODED|4711|secret-detail|stack/i, 'no text from the thrown error')

  // Wrong credentials never reach the signer
  const wrong = await postToken(app, { username: USERNAME, password: 'nope' })
  expectEnvelope(t, wrong, 401, 'Invalid credentials')
  t.equal(signCalls, 1, 'the signer was not called for wrong credentials')
})

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
  {
    name: 'crit ["foo"] with a foo field, correctly signed',
    message: 'Invalid token',
    authorization: () => mint({ header: { alg: 'HS256', typ: 'JWT', crit: ['foo'], foo: 'bar' }, payload: live() })
  }
]

t.test('protected routes reject missing and invalid tokens', async (t) => {
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

t.test('correctly signed HMAC-family tokens with only exp are accepted', async (t) => {
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

t.test('authentication runs before the body is parsed', async (t) => {
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

t.test('authentication and POST /token work with the database cut off', { skip: NEEDS_SERVER }, async (t) => {
  const url = await createDatabase(t)
  const name = new URL(url).pathname.slice(1)
  t.match(name, /^bookkeeping_test_[0-9]+_[0-9a-f]+$/, 'database name from the URL')
  const app = await build(t, url)
  const valid = await getToken(app)

  await refuseConnections(t, url)
  const remaining = await adminQuery(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${name}'`)
  t.equal(remaining.rows[0].n, 0, 'no session left on the database')
  // Let the pool see its connections die
  await sleep(200)

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
// 7. Expiry is exact and nothing is cached: a token accepted a millisecond before its `exp` is
//    refused at `exp`
// ---------------------------------------------------------------------------------------------

t.test('a token is refused at the exact millisecond of its exp, accepted one before', async (t) => {
  const app = await build(t)
  const exp = nowSeconds() + 30
  const token = mint({ payload: { exp } })
  // Only Date is faked: timers, sockets and the database run for real
  mock.timers.enable({ apis: ['Date'], now: exp * 1000 - 1 })
  t.teardown(() => mock.timers.reset())
  const before = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
  expectEnvelope(t, before, 200, 'Books retrieved successfully', [])
  mock.timers.setTime(exp * 1000)
  const at = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
  expectEnvelope(t, at, 401, 'Invalid token')
})

/**
 * POST /token: the token the contract describes (HS256, only `exp`, 15 minutes ahead), the
 * rejections of wrong credentials and of bodies that are not a Login request, and the 500 of a
 * failing signer. Tokens of one `exp` are one string, signed once.
 */
import t from 'tap'
import { build, expectEnvelope, PASSWORD, postToken, USERNAME } from '../helper.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'
import { decodeToken, hmac, nowSeconds } from '../helpers/tokens.js'

// ---------------------------------------------------------------------------------------------
// 1. POST /token issues the token the contract describes
// ---------------------------------------------------------------------------------------------

t.test('POST /token issues an HS256 token with only exp, 15 minutes ahead', { skip: STORE_INDEPENDENT }, async (t) => {
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

  const books = await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } })
  expectEnvelope(t, books, 200, 'Books retrieved successfully', [])
})

t.test('POST /token signs once per exp: the tokens of one second are one string, a later second gets its own', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  const sign = app.jwt.sign
  let signCalls = 0
  app.jwt.sign = ((payload: object) => {
    signCalls++
    return sign(payload)
  }) as typeof sign
  const issue = async () => (await postToken(app, { username: USERNAME, password: PASSWORD })).json().data.token as string

  // Just after a second begins, so that the requests below have most of it
  await new Promise((resolve) => setTimeout(resolve, 1000 - Date.now() % 1000 + 10))
  const tokens = []
  for (let i = 0; i < 6; i++) tokens.push(await issue())
  // Grouped by exp, should a busy machine spread them over two seconds
  const byExp = new Map<number, string[]>()
  for (const token of tokens) {
    const exp = decodeToken(token).payload.exp as number
    byExp.set(exp, [...byExp.get(exp) ?? [], token])
  }
  t.ok(byExp.size < tokens.length, `six tokens, ${byExp.size} exp`)
  for (const [exp, same] of byExp) {
    t.equal(new Set(same).size, 1, `the tokens with exp ${exp} are one string`)
    const [header, payload] = same[0]!.split('.')
    t.equal(decodeToken(same[0]!).signature, hmac(`${header}.${payload}`), 'signed over its own header and payload')
  }
  t.equal(signCalls, byExp.size, 'signed once per exp')

  const last = tokens.at(-1)!
  await new Promise((resolve) => setTimeout(resolve, 1000 - Date.now() % 1000 + 10))
  const later = await issue()
  t.ok(decodeToken(later).payload.exp > decodeToken(last).payload.exp, 'a later second: a later exp')
  t.equal(signCalls, byExp.size + 1, 'signed afresh')

  // The token handed out again is accepted like any other
  const books = await app.inject({ method: 'GET', url: '/books', headers: { authorization: last } })
  expectEnvelope(t, books, 200, 'Books retrieved successfully', [])
})

// ---------------------------------------------------------------------------------------------
// 2. POST /token rejects wrong credentials and bodies that are not a Login request
// ---------------------------------------------------------------------------------------------

t.test('POST /token rejections', { skip: STORE_INDEPENDENT }, async (t) => {
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

t.test('POST /token answers 500 Could not generate token when signing fails', { skip: STORE_INDEPENDENT }, async (t) => {
  const leak = 'SIGNER-EXPLODED-secret-detail-4711'
  const app = await build(t)
  let signCalls = 0
  // Only the signer fails; the route uses nothing else of @fastify/jwt
  app.jwt.sign = () => {
    signCalls++
    throw new Error(leak)
  }

  const response = await postToken(app, { username: USERNAME, password: PASSWORD })
  expectEnvelope(t, response, 500, 'Could not generate token')
  t.equal(signCalls, 1, 'the signer was called')
  t.notMatch(response.body, /SIGNER|EXPLODED|4711|secret-detail|stack/i, 'no text from the thrown error')

  // Wrong credentials never reach the signer
  const wrong = await postToken(app, { username: USERNAME, password: 'nope' })
  expectEnvelope(t, wrong, 401, 'Invalid credentials')
  t.equal(signCalls, 1, 'the signer was not called for wrong credentials')
})

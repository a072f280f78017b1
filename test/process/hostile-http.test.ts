/**
 * Property-based hostile traffic against one real service process (started exactly as
 * `npm start` starts it, so `npm run build` must have run). Random requests are written byte for
 * byte on fresh sockets: odd methods, request targets and HTTP versions, missing or repeated
 * headers, garbage and forged tokens, odd content types, and bodies that are deep, huge,
 * truncated, not UTF-8 or shaped like books with the wrong types. Whatever arrives, the answer
 * must be the envelope ({status, message, data}, status the HTTP status, data null on errors) with
 * a status and message docs/api.md lists, never a 5xx, never a success without a token
 * the service must accept, and the process must stay up. No request that could change a book is
 * sent with such a token, so the books table must be exactly what it was.
 */
import { createHmac } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import t from 'tap'
import { CLOCK_TOLERANCE_MS } from '../../plugins/app/authenticate.js'
import { MAX_HEADER_FIELDS } from '../../plugins/app/http-edge.js'
import { TOKEN_LIFETIME_S } from '../../src/schemas/auth.js'
import { BODY_LIMIT } from '../../src/app.js'
import { YEAR_MAX, YEAR_MIN } from '../../src/schemas/book-limits.js'
import { PASSWORD, SECRET, testEnv, USERNAME } from '../helper.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { base64urlTwin } from '../helpers/tokens.js'
import { parseResponses, rawExchange, rawRequest, type RawResponse } from '../helpers/raw-http.js'
import { MAX_WAITING_PER_CONNECTION } from '../../src/connections.js'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { type Service, startService } from '../helpers/service.js'
import { withTimeout } from '../helpers/wait.js'

/** How long one exchange may take; every request sent is complete, so the answer is prompt. */
const ANSWER_TIMEOUT = 4000
/** Per property; a service that is merely slow shows up as an interrupted run, not a pass. */
const PROPERTY_TIME_LIMIT = 40_000

const SEEDS = [
  { title: 'Dune', author: 'Frank Herbert', year: 1965 },
  { title: 'Emma', author: 'Jane Austen', year: 1815 },
  { title: 'Beowulf', author: 'Unknown', year: -1000 }
]

/** The (status, message) pairs the contract fixes for its endpoints and errors. */
const CONTRACT_PAIRS: Array<[number, string]> = [
  [200, 'Token generated successfully'], [200, 'Books retrieved successfully'],
  [200, 'Book retrieved successfully'], [200, 'Book updated successfully'],
  [200, 'Book deleted successfully'], [201, 'Book created successfully'],
  [400, 'Invalid input'], [400, 'Invalid request payload'], [401, 'Authorization token required'],
  [401, 'Invalid token'], [401, 'Invalid credentials'], [404, 'Book not found'],
  [500, 'Could not generate token']
]

/**
 * Every (status, message) pair the service may answer: the contract's, and the rows of the tables
 * of docs/api.md ("| 405 | `Method not allowed` | ... |"), which it says are complete.
 */
function documentedPairs (): Map<number, Set<string>> {
  const api = readFileSync(join(PROJECT_ROOT, 'docs', 'api.md'), 'utf8')
  const rows = [...api.matchAll(/^\|\s*(\d{3})\s*\|\s*`([^`]+)`\s*\|/gm)]
    .map((match): [number, string] => [Number(match[1]), match[2] ?? ''])
  const pairs = new Map<number, Set<string>>()
  for (const [status, message] of [...CONTRACT_PAIRS, ...rows]) {
    pairs.set(status, (pairs.get(status) ?? new Set()).add(message))
  }
  return pairs
}

// ---------------------------------------------------------------------------------------------
// The request model: small, printable values (fast-check shows them as the counterexample),
// rendered to bytes only when sent

/**
 * A token signed with the service's secret but with hostile header and claims. docs/api.md says
 * which of them the service accepts: HS256, HS384 or HS512, a JSON object payload, a numeric `exp`
 * in the future but at most 15 minutes and the clock tolerance ahead, no `nbf` in the future, no
 * `crit`, every segment spelled canonically; every other one is `Invalid token`.
 */
interface ForgedSpec {
  alg: 'HS256' | 'HS384' | 'HS512' | 'hs256' | 'none' | 'RS256' | 'HS384 header, HS256 signature'
  exp: 'in 10 min' | 'in 10 min, fractional' | '1e308' | '1e400' | '10 min ago' | 'absent' | 'a numeric string' | 'null' | 'an array' | 'true'
    | 'just inside the lifetime bound' | 'just outside the lifetime bound' | 'in 2100'
  nbf: 'absent' | '10 min ago' | 'in 10 min'
  crit: boolean
  payload: 'object' | 'array' | 'string' | 'null' | 'number'
  signature: 'intact' | 'first character changed' | 'last character\'s twin'
  /** The token's header: ours (`alg`, `typ`), or with a field this service never issues. */
  header?: 'ours' | 'kid' | 'jku' | 'x5u' | 'jwk' | 'alg twice' | 'typ not JWT' | 'no typ'
}

type AuthSpec =
  | 'absent' | 'empty' | 'valid' | 'valid, padded' | 'valid HS512' | 'Bearer valid'
  | 'valid twice' | 'valid, then wrong secret' | 'wrong secret, then valid' | 'empty, then valid'
  | 'expired' | 'alg none' | 'tampered payload' | 'wrong secret' | { garbage: string } | { forged: ForgedSpec }

const HMAC_ALGS: Record<string, 'sha256' | 'sha384' | 'sha512'> = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' }
/** No further ahead than TOKEN_LIFETIME_S + CLOCK_TOLERANCE_MS: 1e308, 1e400 and 2100 are not. */
const ACCEPTED_EXP = new Set<ForgedSpec['exp']>(['in 10 min', 'in 10 min, fractional', 'just inside the lifetime bound'])

/** Whether docs/api.md says the service accepts this Authorization; only these reach a handler. */
function isValidAuth (auth: AuthSpec): boolean {
  if (typeof auth === 'string') return auth === 'valid' || auth === 'valid, padded' || auth === 'valid HS512'
  if ('garbage' in auth) return false
  const { alg, exp, nbf, crit, payload, signature, header = 'ours' } = auth.forged
  // An HS384 signature (64 characters) has no unused bits, so no twin: it stays intact
  const intact = signature === 'intact' || (signature === 'last character\'s twin' && alg === 'HS384')
  return HMAC_ALGS[alg] !== undefined && ACCEPTED_EXP.has(exp) && nbf !== 'in 10 min' && !crit &&
    payload === 'object' && intact && (header === 'ours' || header === 'no typ')
}

type HostSpec = 'normal' | 'absent' | 'twice' | 'empty' | { garbage: string }

type BodySpec =
  | { text: string, encoding: 'utf8' | 'latin1' }
  | { depth: number, open: '[' | '{"a":', closed: boolean }
  | { size: number, title: string }

interface RequestSpec {
  method: string
  target: string
  /** latin1 sends every char below U+0100 as one raw byte: 'é' becomes 0xE9, not UTF-8 */
  targetEncoding: 'utf8' | 'latin1'
  version: string
  host: HostSpec
  auth: AuthSpec
  contentType: string | null
  extra: Array<[string, string]>
  body: BodySpec | null
  framing: 'content-length' | 'chunked'
}

interface Tokens {
  valid: string
  hs512: string
  expired: string
  none: string
  tampered: string
  wrongSecret: string
}

const b64url = (value: string) => Buffer.from(value).toString('base64url')

/** For counting the header fields of a spec: one field per token, whatever its value. */
const FIELD_COUNTING_TOKENS: Tokens = { valid: 'v', hs512: 'v', expired: 'v', none: 'v', tampered: 'v', wrongSecret: 'v' }

function signJwt (header: object, payload: object, secret: string, hash: 'sha256' | 'sha512'): string {
  const signingInput = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`
  return `${signingInput}.${createHmac(hash, secret).update(signingInput).digest('base64url')}`
}

function makeTokens (valid: string): Tokens {
  const now = Math.floor(Date.now() / 1000)
  const [header = '', , signature = ''] = valid.split('.')
  return {
    valid,
    hs512: signJwt({ alg: 'HS512', typ: 'JWT' }, { exp: now + 900 }, SECRET, 'sha512'),
    expired: signJwt({ alg: 'HS256', typ: 'JWT' }, { exp: now - 60 }, SECRET, 'sha256'),
    none: `${b64url(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${b64url(JSON.stringify({ exp: now + 900 }))}.`,
    tampered: `${header}.${b64url(JSON.stringify({ exp: now + 86_400 }))}.${signature}`,
    wrongSecret: signJwt({ alg: 'HS256', typ: 'JWT' }, { exp: now + 900 }, `${SECRET}-but-another-one`, 'sha256')
  }
}

/** The token `spec` describes, assembled from JSON text so that `exp` can be `1e400` (Infinity). */
function forgeToken (spec: ForgedSpec): string {
  const now = Math.floor(Date.now() / 1000)
  const alg = spec.alg === 'HS384 header, HS256 signature' ? 'HS384' : spec.alg
  const fields = JSON.stringify(spec.crit ? { alg, typ: 'JWT', crit: ['x-unknown'], 'x-unknown': 1 } : { alg, typ: 'JWT' }).slice(0, -1)
  const header = {
    ours: `${fields}}`,
    kid: `${fields},"kid":"../../etc/passwd"}`,
    jku: `${fields},"jku":"http://evil.example/keys"}`,
    x5u: `${fields},"x5u":"http://evil.example/cert"}`,
    jwk: `${fields},"jwk":{"kty":"oct","k":"c2VjcmV0"}}`,
    // JSON.parse keeps the last of two keys
    'alg twice': `{"alg":"none",${fields.slice(1)}}`,
    'typ not JWT': `${fields.replace('"typ":"JWT"', '"typ":"at+jwt"')}}`,
    'no typ': `${fields.replace(',"typ":"JWT"', '')}}`
  }[spec.header ?? 'ours']
  const claims: string[] = []
  const exp = {
    'in 10 min': String(now + 600),
    'in 10 min, fractional': String(now + 600.5),
    '1e308': '1e308',
    '1e400': '1e400',
    '10 min ago': String(now - 600),
    absent: null,
    'a numeric string': `"${now + 600}"`,
    null: 'null',
    'an array': `[${now + 600}]`,
    true: 'true',
    'just inside the lifetime bound': String(now + TOKEN_LIFETIME_S + CLOCK_TOLERANCE_MS / 1000 - 1),
    'just outside the lifetime bound': String(now + TOKEN_LIFETIME_S + CLOCK_TOLERANCE_MS / 1000 + 2),
    'in 2100': String(Date.UTC(2100, 0, 1) / 1000)
  }[spec.exp]
  if (exp !== null) claims.push(`"exp":${exp}`)
  if (spec.nbf !== 'absent') claims.push(`"nbf":${spec.nbf === 'in 10 min' ? now + 600 : now - 600}`)
  const payload = { object: `{${claims.join(',')}}`, array: `[{${claims.join(',')}}]`, string: '"exp"', null: 'null', number: String(now + 600) }[spec.payload]
  const signingInput = `${b64url(header)}.${b64url(payload)}`
  const hash = spec.alg === 'HS384 header, HS256 signature' || spec.alg === 'hs256' || spec.alg === 'RS256'
    ? 'sha256'
    : HMAC_ALGS[spec.alg]
  let signature = hash === undefined ? '' : createHmac(hash, SECRET).update(signingInput).digest('base64url')
  if (spec.signature === 'first character changed') {
    // The first character: the last one of a base64url HMAC may differ in padding bits only
    signature = (signature.startsWith('A') ? 'B' : 'A') + signature.slice(1)
  }
  if (spec.signature === 'last character\'s twin') signature = base64urlTwin(signature)
  return `${signingInput}.${signature}`
}

/** The Authorization fields sent for `auth`, in order: two for the duplicated ones. */
function authorizationValues (auth: AuthSpec, tokens: Tokens): string[] {
  switch (auth) {
    case 'valid twice': return [tokens.valid, tokens.valid]
    case 'valid, then wrong secret': return [tokens.valid, tokens.wrongSecret]
    case 'wrong secret, then valid': return [tokens.wrongSecret, tokens.valid]
    case 'empty, then valid': return ['', tokens.valid]
  }
  const value = authorizationValue(auth, tokens)
  return value === null ? [] : [value]
}

function authorizationValue (auth: AuthSpec, tokens: Tokens): string | null {
  if (typeof auth === 'object') return 'garbage' in auth ? auth.garbage : forgeToken(auth.forged)
  switch (auth) {
    case 'absent': return null
    case 'empty': return ''
    case 'valid': return tokens.valid
    case 'valid, padded': return `  ${tokens.valid}\t`
    case 'valid HS512': return tokens.hs512
    case 'Bearer valid': return `Bearer ${tokens.valid}`
    case 'expired': return tokens.expired
    case 'alg none': return tokens.none
    case 'tampered payload': return tokens.tampered
    case 'wrong secret': return tokens.wrongSecret
    default: throw new Error(`${JSON.stringify(auth)} is more than one field (authorizationValues)`)
  }
}

function renderBody (body: BodySpec): Buffer {
  if ('text' in body) return Buffer.from(body.text, body.encoding)
  if ('depth' in body) {
    const { depth, open, closed } = body
    if (!closed) return Buffer.from(open.repeat(depth))
    return Buffer.from(open === '[' ? '['.repeat(depth) + ']'.repeat(depth) : open.repeat(depth) + '1' + '}'.repeat(depth))
  }
  // Exactly `size` bytes of JSON, a book with some title and a long pad
  const head = `{"title":${body.title},"author":"a","year":1,"pad":"`
  const tail = '"}'
  return Buffer.from(head + 'a'.repeat(Math.max(0, body.size - head.length - tail.length)) + tail)
}

function renderHeaderLine (name: string, value: string): Buffer {
  return Buffer.from(`${name}: ${value}\r\n`, 'utf8')
}

/** How many header fields `render` writes for `spec`. */
function fieldCount (spec: RequestSpec): number {
  return render(spec, FIELD_COUNTING_TOKENS).toString('latin1').split('\r\n\r\n', 1)[0]!.split('\r\n').length - 1
}

/** The exact bytes put on the wire for `spec`. */
function render (spec: RequestSpec, tokens: Tokens): Buffer {
  const parts: Buffer[] = [
    Buffer.from(`${spec.method} `, 'latin1'),
    Buffer.from(spec.target, spec.targetEncoding),
    Buffer.from(` ${spec.version}\r\n`, 'latin1')
  ]
  const { host } = spec
  if (host === 'normal') parts.push(renderHeaderLine('Host', 'localhost'))
  else if (host === 'twice') parts.push(renderHeaderLine('Host', 'localhost'), renderHeaderLine('Host', 'evil.example'))
  else if (host === 'empty') parts.push(renderHeaderLine('Host', ''))
  else if (typeof host === 'object') parts.push(renderHeaderLine('Host', host.garbage))
  for (const value of authorizationValues(spec.auth, tokens)) parts.push(renderHeaderLine('Authorization', value))
  if (spec.contentType !== null) parts.push(renderHeaderLine('Content-Type', spec.contentType))
  for (const [name, value] of spec.extra) parts.push(renderHeaderLine(name, value))
  const body = spec.body === null ? null : renderBody(spec.body)
  if (body !== null && spec.framing === 'chunked') {
    parts.push(renderHeaderLine('Transfer-Encoding', 'chunked'), Buffer.from('Connection: close\r\n\r\n'))
    // Chunks of a size that depends on the body only, so a counterexample replays exactly
    const chunkSize = 1 + (body.length % 7) * 1000
    for (let offset = 0; offset < body.length; offset += chunkSize) {
      const chunk = body.subarray(offset, offset + chunkSize)
      parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'))
    }
    parts.push(Buffer.from('0\r\n\r\n'))
  } else {
    if (body !== null) parts.push(renderHeaderLine('Content-Length', String(body.length)))
    parts.push(Buffer.from('Connection: close\r\n\r\n'))
    if (body !== null) parts.push(body)
  }
  return Buffer.concat(parts)
}

// ---------------------------------------------------------------------------------------------
// Which requests could change a stored book: those are never sent with a valid token

const MUTATING_METHODS = new Set(['POST', 'PUT', 'DELETE', 'PATCH'])

/**
 * True when the body, decoded as the service decodes it (UTF-8, a leading BOM dropped), is
 * certainly refused as a book or as a book patch: not JSON, not an object, or a book field of
 * the wrong type or out of range. Anything else might be stored.
 */
function certainlyNotABook (body: Buffer): boolean {
  let value: unknown
  try {
    // Bytes that are not UTF-8 are refused (docs/api.md, Bodies)
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body))
  } catch (err) {
    if (err instanceof SyntaxError || err instanceof TypeError) return true
    throw err
  }
  if (!everyStringWellFormed(value)) return true
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return true
  const fields = value as Record<string, unknown>
  for (const key of ['title', 'author']) {
    if (Object.hasOwn(fields, key) && (typeof fields[key] !== 'string' || fields[key] === '')) return true
  }
  if (Object.hasOwn(fields, 'year')) {
    const year = fields.year
    if (typeof year !== 'number' || !Number.isInteger(year) || year < YEAR_MIN || year > YEAR_MAX) return true
  }
  return false
}

/** A DELETE with a valid token only ever names, literally, an id that no book has. */
function namesNoStoredBook (target: string, storedIds: Set<string>): boolean {
  const match = /^\/book\/([1-9][0-9]{0,17})$/.exec(target)
  return match !== null && !storedIds.has(match[1] ?? '')
}

/**
 * `spec` as sent: a token the service accepts stays only where no book can change (reads, a
 * DELETE of an id no book has, a body that is certainly refused); elsewhere it is swapped for a
 * tampered one. So every book stays as seeded, whatever the service does with what it accepts.
 */
/** Whether no string of a parsed JSON value, keys included, holds a lone surrogate. Bodies nest deep: no recursion. */
function everyStringWellFormed (value: unknown): boolean {
  const wellFormed = (text: string) => !/\p{Surrogate}/u.test(text.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, ''))
  const pending = [value]
  while (pending.length > 0) {
    const next = pending.pop()
    if (typeof next === 'string') {
      if (!wellFormed(next)) return false
    } else if (next !== null && typeof next === 'object') {
      for (const [key, item] of Object.entries(next)) {
        if (!wellFormed(key)) return false
        pending.push(item)
      }
    }
  }
  return true
}

/** Content codings the service certainly refuses (415): it decodes none but `identity`. */
const REFUSED_CODINGS = new Set(['gzip', 'x-foo', 'br', 'deflate', 'identity, gzip', 'gzip, identity', 'X-FOO', 'compress'])

/** A body in a coding from REFUSED_CODINGS is 415 whatever it holds. */
function certainlyRefusedCoding (spec: RequestSpec): boolean {
  return spec.body !== null && renderBody(spec.body).length > 0 &&
    spec.extra.some(([name, value]) => name.toLowerCase() === 'content-encoding' && REFUSED_CODINGS.has(value))
}

function makeHarmless (spec: RequestSpec, storedIds: Set<string>): RequestSpec {
  if (!isValidAuth(spec.auth) || !MUTATING_METHODS.has(spec.method)) return spec
  const harmless = spec.method === 'DELETE'
    ? namesNoStoredBook(spec.target, storedIds) && spec.targetEncoding === 'utf8'
    : certainlyNotABook(spec.body === null ? Buffer.alloc(0) : renderBody(spec.body)) || certainlyRefusedCoding(spec)
  return harmless ? spec : { ...spec, auth: 'tampered payload' }
}

// ---------------------------------------------------------------------------------------------
// Arbitraries. Each choice lists its plainest option first; cross-shrinking lets a counterexample
// fall back to it, so what is left of a failure is only what it needs

const CROSS_SHRINK = { withCrossShrink: true }

const headerText = fc.string({ unit: 'binary', maxLength: 40 }).map((value) => value.replace(/[\r\n]/g, ''))
const latin1Text = (maxLength: number) =>
  fc.string({ unit: fc.integer({ min: 0, max: 255 }).map((code) => String.fromCharCode(code)), maxLength })

const methodArb = fc.oneof(
  CROSS_SHRINK,
  { weight: 7, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS') },
  // Methods Node's parser knows, which reach the server as they are
  { weight: 2, arbitrary: fc.constantFrom('TRACE', 'CONNECT', 'PROPFIND', 'PURGE', 'SEARCH', 'QUERY') },
  { weight: 2, arbitrary: fc.stringMatching(/^[A-Z]{1,12}$/) },
  { weight: 1, arbitrary: fc.constantFrom('get', 'Post', 'G ET', '', 'GET\t') }
)

function idArb (storedIds: string[]) {
  return fc.oneof(
    CROSS_SHRINK,
    fc.constantFrom(...storedIds),
    fc.nat().map(String),
    fc.constantFrom(
      '-1', '0', '01', '1e3', '0x1', '1.5', '+1', '1%20', '%31', '%2e%2e', '..', '.', '', 'abc',
      'NaN', 'Infinity', '9223372036854775807', '9223372036854775808', '99999999999999999999'
    ),
    fc.stringMatching(/^[1-9][0-9]{18,400}$/)
  )
}

function realTargetArb (storedIds: string[]) {
  return fc.oneof(
    CROSS_SHRINK,
    fc.constantFrom('/token', '/book', '/books'),
    idArb(storedIds).map((id) => `/book/${id}`)
  )
}

const segmentArb = fc.oneof(
  fc.constantFrom(
    'book', 'books', 'token', '..', '.', '', '%2e%2e', '%2E%2e', '%2f', '%2F..%2F', '%zz', '%', '%0',
    '%00', '%C3%A9', '%ff', '%ED%A0%80', '%c0%af', 'é', '日本', '\u0000', ' ', '\t', '#frag', ';x', '*'
  ),
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'grapheme', maxLength: 10 }),
  fc.string({ unit: 'binary', maxLength: 10 }).map((value) => encodeURIComponent(value.replace(/[\uD800-\uDFFF]/g, '')))
)

const longTargetArb = fc.tuple(
  fc.constantFrom('/book/', '/books/', '/', '/token?x='),
  fc.integer({ min: 200, max: 4096 }),
  fc.constantFrom('a', '9', '%41', '/', 'é', '../', '%')
).map(([prefix, length, unit]) => prefix + unit.repeat(Math.ceil(length / unit.length)).slice(0, length))

const queryArb = fc.oneof(
  { weight: 4, arbitrary: fc.constant('') },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }).map((query) => `?${query}`) },
  { weight: 1, arbitrary: fc.constantFrom('?', '?a=1&a=2', '?%zz', '?__proto__[x]=1', '?id=1', '?constructor[prototype][x]=1') }
)

function targetArb (storedIds: string[]) {
  return fc.tuple(
    fc.oneof(
      CROSS_SHRINK,
      { weight: 4, arbitrary: realTargetArb(storedIds) },
      { weight: 3, arbitrary: fc.array(segmentArb, { maxLength: 8 }).map((segments) => `/${segments.join('/')}`) },
      { weight: 1, arbitrary: longTargetArb },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          '*', 'http://localhost/books', 'books', '//books', '/./books', '/book/../books', '/books/',
          '/book/1/../../token', '/%2e%2e/books', '/BOOKS', '/book/1/'
        )
      }
    ),
    queryArb
  ).map(([path, query]) => path + query)
}

const versionArb = fc.oneof(
  CROSS_SHRINK,
  { weight: 12, arbitrary: fc.constant('HTTP/1.1') },
  { weight: 1, arbitrary: fc.constantFrom('HTTP/1.0', 'HTTP/2.0', 'HTTP/1.2', 'HTTP/0.9', 'HTTP/3', 'http/1.1', 'HTTP/1.1 x', '') }
)

const hostArb: fc.Arbitrary<HostSpec> = fc.oneof(
  CROSS_SHRINK,
  { weight: 8, arbitrary: fc.constant<HostSpec>('normal') },
  { weight: 1, arbitrary: fc.constantFrom<HostSpec>('absent', 'twice', 'empty') },
  { weight: 1, arbitrary: headerText.map((garbage): HostSpec => ({ garbage })) }
)

const forgedArb: fc.Arbitrary<ForgedSpec> = fc.record({
  alg: fc.constantFrom<ForgedSpec['alg']>('HS256', 'HS384', 'HS512', 'hs256', 'none', 'RS256', 'HS384 header, HS256 signature'),
  exp: fc.constantFrom<ForgedSpec['exp']>(
    'in 10 min', 'in 10 min, fractional', '1e308', '1e400', '10 min ago', 'absent', 'a numeric string', 'null',
    'an array', 'true', 'just inside the lifetime bound', 'just outside the lifetime bound', 'in 2100'
  ),
  nbf: fc.constantFrom<ForgedSpec['nbf']>('absent', '10 min ago', 'in 10 min'),
  crit: fc.boolean(),
  payload: fc.constantFrom<ForgedSpec['payload']>('object', 'object', 'array', 'string', 'null', 'number'),
  signature: fc.constantFrom<ForgedSpec['signature']>('intact', 'intact', 'first character changed', 'last character\'s twin'),
  header: fc.constantFrom<ForgedSpec['header']>('ours', 'ours', 'ours', 'kid', 'jku', 'x5u', 'jwk', 'alg twice', 'typ not JWT', 'no typ')
})

const authArb: fc.Arbitrary<AuthSpec> = fc.oneof(
  CROSS_SHRINK,
  {
    weight: 4,
    arbitrary: fc.constantFrom<AuthSpec>(
      'absent', 'empty', 'valid', 'valid, padded', 'valid HS512', 'Bearer valid', 'expired', 'alg none',
      'tampered payload', 'wrong secret', 'valid twice', 'valid, then wrong secret', 'wrong secret, then valid',
      'empty, then valid'
    )
  },
  { weight: 1, arbitrary: headerText.map((garbage): AuthSpec => ({ garbage })) },
  { weight: 2, arbitrary: forgedArb.map((forged): AuthSpec => ({ forged })) }
)

/** Mostly tokens the service accepts, so bodies get as far as the body checks. */
const mostlyValidAuthArb: fc.Arbitrary<AuthSpec> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom<AuthSpec>('valid', 'valid, padded', 'valid HS512') },
  { weight: 1, arbitrary: authArb }
)

const contentTypeArb: fc.Arbitrary<string | null> = fc.oneof(
  CROSS_SHRINK,
  { weight: 2, arbitrary: fc.constant(null) },
  {
    weight: 6,
    arbitrary: fc.constantFrom(
      'application/json', 'application/json; charset=utf-8', 'application/json; charset=UTF-8',
      'application/json;charset=utf-16', 'application/json; charset=latin1', 'APPLICATION/JSON',
      'application/json; foo=bar', 'application/json;;;===', ' application/json ', 'text/plain',
      'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
      'application/jsonx', 'application/*', '*/*', '', ';', 'application/json, text/plain',
      'application/problem+json', 'text/json'
    )
  },
  { weight: 1, arbitrary: headerText }
)

/**
 * Random extra header names leave out those the model sets itself (framing, auth, content type)
 * and Expect, which comes only with the values listed below.
 */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'authorization', 'content-type', 'expect'])

const extraHeadersArb = fc.array(fc.oneof(
  CROSS_SHRINK,
  fc.tuple(fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/).filter((name) => !RESERVED_HEADERS.has(name.toLowerCase())), headerText),
  fc.constantFrom<[string, string]>(
    ['Expect', '100-continue'], ['Expect', 'nonsense'], ['Upgrade', 'websocket'], ['Upgrade', 'h2c'],
    ['X-HTTP-Method-Override', 'DELETE'], ['Content-Encoding', 'gzip'], ['Content-Encoding', 'identity'],
    ['Accept', 'text/html'], ['Accept-Encoding', 'br, gzip'], ['Cookie', 'a=b; __proto__=x'],
    ['Origin', 'http://evil.example'], ['X-Forwarded-For', '1.2.3.4, ::1'], ['Range', 'bytes=0-1'],
    ['If-None-Match', '*'], ['Trailer', 'X-Foo'], ['Keep-Alive', 'timeout=1'], ['TE', 'trailers'],
    ['Proxy-Authorization', 'Basic eDp5'], ['X-Filler', 'x'.repeat(8000)]
  )
), { maxLength: 4 })

const bookFieldArb = fc.oneof(
  fc.constantFrom<unknown>('Dune', '', '   ', 'a\u0000b', 'x'.repeat(1001), '\uD800'),
  fc.string(), fc.integer(), fc.double(), fc.boolean(), fc.constant(null),
  fc.array(fc.string(), { maxLength: 2 }), fc.dictionary(fc.string(), fc.string(), { maxKeys: 2 })
)

const yearArb = fc.oneof(
  fc.integer(),
  fc.constantFrom<unknown>(2147483648, -2147483649, 1999.5, '1999', null, true, [1999], {}, 0),
  fc.double()
)

/** Looks like a book, usually with some field of the wrong type. */
const bookishTextArb = fc.record({
  title: bookFieldArb,
  author: bookFieldArb,
  year: yearArb,
  id: fc.oneof(fc.integer(), fc.string()),
  extra: fc.anything({ maxDepth: 2 })
}, { requiredKeys: [] }).map((book) => JSON.stringify(book))

const hugeNumberTextArb = fc.tuple(
  fc.constantFrom('title', 'author', 'year', 'id'),
  fc.oneof(
    fc.constantFrom(
      '1e400', '-1e400', '1e-400', '-0', '1E3', '0.0', '2147483648', '-2147483649', '1.0',
      '1999.0000000000000001', '123456789012345678901234567890'
    ),
    fc.stringMatching(/^-?[1-9][0-9]{300,400}$/)
  )
).map(([field, number]) => `{"title":"T","author":"A","year":1999,"${field}":${number}}`)

const PROTO_BODIES = [
  '{"__proto__":{"title":"x"},"title":"T","author":"A","year":1}',
  '{"title":"T","author":"A","year":1,"__proto__":null}',
  '{"constructor":{"prototype":{"isAdmin":true}},"title":"T","author":"A","year":1}',
  '{"a":[{"__proto__":{"polluted":1}}]}',
  '{"\\u005f_proto__":{"polluted":1}}',
  '{"username":"x","password":"y","__proto__":{"username":"z"}}',
  '{"constructor":{"prototype":null}}'
]

const INVALID_UTF8_BODIES = [
  '{"title":"\xff\xfe","author":"b","year":1}',
  '{"title":"\xc0\xaf","author":"\xed\xa0\x80","year":"x"}',
  '\xef\xbb\xbf{"title":1}',
  '{"\xff":1}',
  '\xff\xff\xff\xff'
]

const loginTextArb = fc.record({
  username: fc.oneof(fc.constant<unknown>(USERNAME), fc.string(), fc.integer(), fc.constant(null)),
  password: fc.oneof(fc.constant<unknown>(PASSWORD), fc.string(), fc.constant(['x']))
}, { requiredKeys: [] }).map((login) => JSON.stringify(login))

const utf8 = (text: string): BodySpec => ({ text, encoding: 'utf8' })

const bodyArb: fc.Arbitrary<BodySpec> = fc.oneof(
  CROSS_SHRINK,
  { weight: 3, arbitrary: fc.json({ maxDepth: 3 }).map(utf8) },
  { weight: 3, arbitrary: bookishTextArb.map(utf8) },
  { weight: 1, arbitrary: hugeNumberTextArb.map(utf8) },
  { weight: 1, arbitrary: fc.constantFrom(...PROTO_BODIES).map(utf8) },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.oneof(fc.json({ maxDepth: 3 }), bookishTextArb), fc.nat())
      .map(([text, cut]) => utf8(text.slice(0, text.length === 0 ? 0 : cut % text.length)))
  },
  {
    weight: 1,
    arbitrary: fc.oneof(
      fc.constantFrom(...INVALID_UTF8_BODIES),
      latin1Text(40),
      latin1Text(20).map((title) => `{"title":"${title}","author":"b","year":1}`)
    ).map((text): BodySpec => ({ text, encoding: 'latin1' }))
  },
  {
    weight: 1,
    arbitrary: fc.record({
      depth: fc.oneof(fc.integer({ min: 1, max: 100 }), fc.integer({ min: 5000, max: 20_000 })),
      open: fc.constantFrom<'[' | '{"a":'>('[', '{"a":'),
      closed: fc.boolean()
    })
  },
  {
    weight: 1,
    arbitrary: fc.record({
      size: fc.integer({ min: BODY_LIMIT - 64, max: BODY_LIMIT + 4096 }),
      title: fc.constantFrom('"Dune"', '1', 'null', '[]', '""')
    })
  },
  { weight: 1, arbitrary: loginTextArb.map(utf8) },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }).map(utf8) }
)

type Overrides = { [K in keyof RequestSpec]?: fc.Arbitrary<RequestSpec[K]> }

function requestArb (storedIds: string[], overrides: Overrides = {}): fc.Arbitrary<RequestSpec> {
  const stored = new Set(storedIds)
  return fc.record<RequestSpec>({
    method: methodArb,
    target: targetArb(storedIds),
    targetEncoding: fc.constantFrom<'utf8' | 'latin1'>('utf8', 'utf8', 'latin1'),
    version: versionArb,
    host: hostArb,
    auth: authArb,
    contentType: contentTypeArb,
    extra: extraHeadersArb,
    body: fc.option(bodyArb, { nil: null, freq: 3 }),
    framing: fc.constantFrom<'content-length' | 'chunked'>('content-length', 'content-length', 'chunked'),
    ...overrides
  }).map((spec) => makeHarmless(spec, stored))
}

// ---------------------------------------------------------------------------------------------
// Input: strings that are not well-formed Unicode, content codings, charsets, paths that leave
// /docs/static/, tokens in query strings (docs/api.md, Bodies; operations.md, Logs)

const loneSurrogateArb = fc.oneof(
  fc.constantFrom('\uD800', '\uDBFF', '\uDC00', '\uDFFF', 'a\uD800b', '\uDE00\uD83D', '\uD83D\uDE00\uD800'),
  fc.tuple(fc.string({ maxLength: 5 }), fc.integer({ min: 0xD800, max: 0xDFFF }), fc.string({ maxLength: 5 }))
    .map(([before, code, after]) => before + String.fromCharCode(code) + after)
)

/** A book, patch or login whose one string (a value, an unknown field or a key) holds a lone surrogate. */
const illFormedJsonArb = fc.tuple(
  fc.constantFrom('title', 'author', 'username', 'password', 'unknown', 'a key'),
  loneSurrogateArb,
  fc.boolean()
).map(([field, lone, login]): BodySpec => {
  const base: Record<string, unknown> = login ? { username: USERNAME, password: PASSWORD } : { ...SEEDS[0] }
  // JSON.stringify writes a lone surrogate as its escape, `\ud800`
  return utf8(JSON.stringify(field === 'a key' ? { ...base, [lone]: 1 } : { ...base, [field]: lone }))
})

/** A good book but for bytes that are not UTF-8 in its title: an encoded surrogate, stray or overlong bytes. */
const notUtf8BookArb = fc.constantFrom([0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF], [0xFF], [0xC0, 0xAF], [0xF8, 0x88, 0x80, 0x80, 0x80], [0xE2, 0x82], [0x80])
  .map((bytes): BodySpec => ({ text: `{"title":"${String.fromCharCode(...bytes)}","author":"A","year":1}`, encoding: 'latin1' }))

const codingArb = fc.constantFrom<[string, string]>(
  ['Content-Encoding', 'gzip'], ['Content-Encoding', 'x-foo'], ['Content-Encoding', 'X-FOO'], ['Content-Encoding', 'br'],
  ['Content-Encoding', 'deflate'], ['Content-Encoding', 'compress'], ['Content-Encoding', 'identity, gzip'],
  ['Content-Encoding', 'gzip, identity'], ['Content-Encoding', 'identity'], ['Content-Encoding', ' IDENTITY ']
)

const charsetTypeArb = fc.oneof(
  fc.constantFrom(
    'application/json; charset=latin1', 'application/json; charset=utf-16', 'application/json; charset="ISO-8859-1"',
    'application/json; charset=', 'application/json; charset=utf-7', 'application/json; charset=x-nonsense',
    'application/json; charset=utf8', 'application/json; charset="UTF-8"', 'application/json; charset=utf-8; foo=bar'
  ),
  fc.stringMatching(/^[a-zA-Z0-9-]{0,12}$/).map((charset) => `application/json; charset=${charset}`)
)

/** Paths under /docs/static/ that climb out of it, raw, encoded, doubly encoded, with backslashes. */
const traversalArb = fc.tuple(
  fc.array(fc.constantFrom('..', '%2e%2e', '%2E%2E', '.%2e', '%2e.', '..%2f', '%2e%2e%2f', '%2E%2E%2F', '%252e%252e', '..\\', '%5c..', '..%5c', '', 'a', '%00'), { minLength: 1, maxLength: 4 }),
  fc.constantFrom('json', 'package.json', 'etc/passwd', 'swagger-ui.css', '')
).map(([steps, file]) => `/docs/static/${steps.join('/')}/${file}`)

/** Requests of this section; `token` is a valid token, to be put in query strings. */
function inputRequestArb (storedIds: string[], token: string): fc.Arbitrary<RequestSpec> {
  const withToken = fc.constantFrom('', `?token=${token}`, `?access_token=${token}&x=1`, `?token=${token}%zz`)
  return fc.oneof(
    {
      weight: 3,
      arbitrary: requestArb(storedIds, {
        method: fc.constantFrom('POST', 'PUT', 'DELETE'),
        target: realTargetArb(storedIds),
        targetEncoding: fc.constant<'utf8'>('utf8'),
        version: fc.constant('HTTP/1.1'),
        host: fc.constant<HostSpec>('normal'),
        auth: mostlyValidAuthArb,
        contentType: fc.oneof(fc.constant('application/json'), charsetTypeArb),
        extra: fc.array(codingArb, { maxLength: 2 }),
        body: fc.oneof(illFormedJsonArb, notUtf8BookArb, bookishTextArb.map(utf8), loginTextArb.map(utf8))
      })
    },
    {
      weight: 1,
      arbitrary: requestArb(storedIds, {
        method: fc.constantFrom('GET', 'HEAD', 'GET', 'POST'),
        target: fc.tuple(fc.oneof(traversalArb, fc.constantFrom('/books', '/book/%zz', '/nowhere')), withToken).map(([path, query]) => path + query),
        targetEncoding: fc.constant<'utf8'>('utf8'),
        version: fc.constant('HTTP/1.1'),
        host: fc.constant<HostSpec>('normal'),
        extra: fc.constant([]),
        body: fc.constant(null)
      })
    }
  )
}

function inputExamples (storedId: string, token: string): RequestSpec[] {
  const book = `/book/${storedId}`
  const coded = (spec: RequestSpec, coding: string): RequestSpec => ({ ...spec, extra: [['Content-Encoding', coding]] })
  const get = (target: string): RequestSpec => ({ ...plain, target })
  return [
    json('POST', '/book', utf8(JSON.stringify({ ...SEEDS[0], title: '\uD800' }))),
    json('PUT', book, utf8(JSON.stringify({ author: 'x\uDFFF' }))),
    json('POST', '/token', utf8(JSON.stringify({ username: '\uD800', password: PASSWORD })), 'absent'),
    json('DELETE', book, utf8(JSON.stringify({ '\uDC00': 1 }))),
    json('POST', '/book', { text: '{"title":"\xed\xa0\x80","author":"A","year":1}', encoding: 'latin1' }),
    coded(json('POST', '/book', utf8(JSON.stringify(SEEDS[0]))), 'x-foo'),
    coded(json('PUT', book, utf8('{"title":"T"}')), 'gzip'),
    coded(json('DELETE', book, utf8('{}')), 'identity, gzip'),
    coded(json('POST', '/token', utf8(JSON.stringify({ username: USERNAME, password: PASSWORD })), 'absent'), 'br'),
    { ...json('POST', '/token', utf8(JSON.stringify({ username: USERNAME, password: PASSWORD })), 'absent'), contentType: 'application/json; charset=latin1' },
    get('/docs/static/../json'), get('/docs/static/%2e%2e/json'), get('/docs/static/%2E%2E%2Fjson'), get('/docs/static/..%2fjson'),
    get('/docs/static/%252e%252e/json'), get('/docs/static/..\\json'), get('/docs/static//etc/passwd'), get('/docs/static/%00'),
    get(`/books?token=${token}`), get(`/book/%zz?token=${token}`)
  ]
}

// ---------------------------------------------------------------------------------------------
// The properties of every single answer

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value)

function checkAnswer (spec: RequestSpec, answer: RawResponse, service: Service, documented: Map<number, Set<string>>) {
  const { status } = answer
  const head = spec.method === 'HEAD'
  const text = answer.body.toString('utf8')
  const context = `answered ${status} ${JSON.stringify(answer.headers)} ${JSON.stringify(text.slice(0, 300))}`
  if (service.exit !== null) throw new Error(`the service exited (${JSON.stringify(service.exit)}); ${context}`)
  // Versions this server does not speak: 505, whether Node's parser takes them (2.0) or not
  // (1.2), or the 400 of what was wrong before the version was looked at (a malformed target)
  if ((spec.version === 'HTTP/2.0' || spec.version === 'HTTP/1.2') && status !== 505 && status !== 400) {
    throw new Error(`neither 505 nor 400 to ${spec.version}: ${context}`)
  }
  if (status >= 500 && !(status === 505 && !/^HTTP\/1\.[01]$/.test(spec.version))) throw new Error(`a 5xx: ${context}`)
  if (status >= 200 && status < 300 && spec.host === 'twice') throw new Error(`a success with two Host fields: ${context}`)
  if (status >= 200 && status < 300 && fieldCount(spec) > MAX_HEADER_FIELDS) throw new Error(`a success with ${fieldCount(spec)} header fields: ${context}`)
  // 304, bodiless: a GET or HEAD of a book or a listing whose If-None-Match names what it would
  // answer (docs/api.md, Preconditions), which `If-None-Match: *` does for any book that exists
  if (status === 304) {
    const conditional = spec.extra.some(([name]) => name.toLowerCase() === 'if-none-match')
    if (!((spec.method === 'GET' || spec.method === 'HEAD') && conditional && isValidAuth(spec.auth))) {
      throw new Error(`a 304 to other than a GET or HEAD with If-None-Match and a valid token: ${context}`)
    }
    if (answer.body.length !== 0 || answer.headers.etag === undefined) throw new Error(`a 304 with a body or without an ETag: ${context}`)
    return
  }
  if (!documented.has(status)) throw new Error(`a status docs/api.md does not list: ${context}`)
  if (status >= 200 && status < 300 && !isValidAuth(spec.auth) && !(spec.method === 'POST' && text.includes('"Token generated successfully"'))) {
    throw new Error(`a success without a valid token: ${context}`)
  }
  if (head) return

  if (!/^application\/json(;|$)/.test(answer.headers['content-type'] ?? '')) throw new Error(`not a JSON content type: ${context}`)
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw new Error(`the body is not JSON: ${context}`)
  }
  if (!isPlainObject(body)) throw new Error(`the body is not an object: ${context}`)
  const keys = Object.keys(body).sort()
  if (keys.join() !== 'data,message,status') throw new Error(`envelope keys are ${JSON.stringify(keys)}: ${context}`)
  if (body.status !== status) throw new Error(`envelope status ${JSON.stringify(body.status)} is not the HTTP status: ${context}`)
  if (typeof body.message !== 'string') throw new Error(`message is not a string: ${context}`)
  if (!documented.get(status)?.has(body.message)) throw new Error(`a (status, message) pair docs/api.md does not list: ${context}`)
  if (status >= 400 && body.data !== null) throw new Error(`data is not null on an error: ${context}`)
}

// ---------------------------------------------------------------------------------------------
// Named hostile cases, always tried: each property runs its examples before its random requests

const plain: RequestSpec = {
  method: 'GET',
  target: '/books',
  targetEncoding: 'utf8',
  version: 'HTTP/1.1',
  host: 'normal',
  auth: 'valid',
  contentType: null,
  extra: [],
  body: null,
  framing: 'content-length'
}

const json = (method: string, target: string, body: BodySpec, auth: AuthSpec = 'valid'): RequestSpec =>
  ({ ...plain, method, target, auth, contentType: 'application/json', body })

function requestLineExamples (storedId: string): RequestSpec[] {
  const get = (target: string, targetEncoding: 'utf8' | 'latin1' = 'utf8'): RequestSpec => ({ ...plain, target, targetEncoding })
  return [
    get('/book/%zz'), get('/book/%'), get('/book/%2e%2e'), get('/../books'), get('/./books'), get('//books'),
    get('/%2e%2e/book/1'), get('/book/-1'), get('/book/1e3'), get('/book/0x1'), get(`/book/${'9'.repeat(400)}`),
    get(`/book/${storedId}?id=1&%zz`), get('/b\u00e9ok'), get('/book/\u00ff\u00fe', 'latin1'), get('/%C3%A9/%ED%A0%80'),
    get(`/book/${'a'.repeat(4000)}`), get(`/${'%41'.repeat(1300)}`),
    { ...plain, method: 'PATCH', target: '/books' }, { ...plain, method: 'OPTIONS', target: `/book/${storedId}` },
    { ...plain, method: 'FOO', target: '/books' }
  ]
}

function headerExamples (): RequestSpec[] {
  const login = utf8(JSON.stringify({ username: USERNAME, password: PASSWORD }))
  return [
    ...(['absent', 'empty', 'Bearer valid', 'valid', { garbage: '\u00ff\u0000x' }] as AuthSpec[])
      .map((auth): RequestSpec => ({ ...plain, auth })),
    ...[null, 'application/json; charset=utf-8', 'APPLICATION/JSON', 'text/plain', '', 'application/jsonx', ';;;']
      .map((contentType): RequestSpec => ({ ...plain, method: 'POST', target: '/token', auth: 'absent', contentType, body: login })),
    { ...plain, extra: [['X-Filler', 'x'.repeat(8000)], ['X-Filler-2', 'x'.repeat(9000)]] },
    // Two Host fields (RFC 9112: 400), and a second Authorization past the fields Node reads
    { ...plain, host: 'twice' },
    { ...plain, extra: [...Array.from({ length: MAX_HEADER_FIELDS }, (_, i): [string, string] => [`X-F${i}`, 'x']), ['Authorization', 'garbage']] },
    { ...plain, extra: Array.from({ length: 2500 }, (_, i): [string, string] => [`X-${i}`, 'x']) },
    // A version Node's parser serves as 1.1, and one it refuses: both 505; CONNECT too, which
    // Node hands to the server's 'connect' listener rather than to the app
    { ...plain, version: 'HTTP/2.0' }, { ...plain, version: 'HTTP/1.2' }, { ...plain, method: 'CONNECT', version: 'HTTP/2.0' },
    // A precondition any book that exists meets: 304, no body (a random run found it)
    { ...plain, target: '/book/1', extra: [['If-None-Match', '*']] },
    ...tokenExamples()
  ]
}

/**
 * The bounds of the authenticate hook on GET /books: `exp` just inside and just outside the
 * lifetime bound and far ahead, each signature's non-canonical twin, two Authorization fields.
 */
function tokenExamples (): RequestSpec[] {
  const forged = (overrides: Partial<ForgedSpec>): AuthSpec => ({
    forged: { alg: 'HS256', exp: 'in 10 min', nbf: 'absent', crit: false, payload: 'object', signature: 'intact', ...overrides }
  })
  const exps: Array<ForgedSpec['exp']> = ['just inside the lifetime bound', 'just outside the lifetime bound', '1e308', '1e400', 'in 2100']
  const algs: Array<ForgedSpec['alg']> = ['HS256', 'HS384', 'HS512']
  const headers: Array<ForgedSpec['header']> = ['kid', 'jku', 'x5u', 'jwk', 'alg twice', 'typ not JWT', 'no typ']
  return [
    ...exps.map((exp) => forged({ exp })),
    ...algs.map((alg) => forged({ alg, signature: 'last character\'s twin' })),
    ...headers.map((header) => forged({ header })),
    ...(['valid twice', 'valid, then wrong secret', 'wrong secret, then valid', 'empty, then valid'] as AuthSpec[])
  ].map((auth): RequestSpec => ({ ...plain, auth }))
}

function bodyExamples (storedId: string): RequestSpec[] {
  const book = `/book/${storedId}`
  return [
    json('POST', '/book', { depth: 10_000, open: '[', closed: false }),
    json('PUT', book, { depth: 10_000, open: '[', closed: true }),
    json('POST', '/book', { depth: 10_000, open: '{"a":', closed: true }),
    json('POST', '/book', utf8('{"title":"T","author":"A","year":1e400}')),
    json('PUT', book, utf8(`{"year":${'9'.repeat(400)}}`)),
    json('POST', '/token', utf8(`{"username":${'9'.repeat(400)},"password":"x"}`), 'absent'),
    json('POST', '/book', { text: '{"title":"\xff\xfe","author":"\xc0\xaf","year":"1"}', encoding: 'latin1' }),
    json('POST', '/book', utf8('{"__proto__":{"title":"x"},"title":"T","author":"A","year":"1"}')),
    json('PUT', book, utf8('{"constructor":{"prototype":{"year":1}},"year":null}')),
    json('POST', '/token', utf8('{"__proto__":{"username":"x"},"username":"x","password":"y"}'), 'absent'),
    json('PUT', book, utf8('{"title":1999,"author":["x"],"year":"1999"}')),
    json('POST', '/book', utf8('{"title":"Dune","author":"Frank Herbert","year":19')),
    json('POST', '/book', { size: BODY_LIMIT + 1, title: '1' }),
    json('POST', '/token', { size: BODY_LIMIT + 1, title: '"Dune"' }, 'absent'),
    { ...json('PUT', book, utf8('{"year":"x"}')), framing: 'chunked' },
    { ...json('DELETE', book, utf8('{')), auth: 'absent' }
  ]
}

/** HEADs that Node's parser rejects, and bodies far over the limit written whole. */
function headAndHugeExamples (storedId: string): RequestSpec[] {
  const head = (overrides: Partial<RequestSpec>): RequestSpec => ({ ...plain, method: 'HEAD', ...overrides })
  return [
    head({ target: '/\u00e9' }), head({ target: `/book/${storedId}\u00e9` }), head({ target: '/books', auth: 'absent' }),
    head({ target: '/nope' }), head({ extra: [['X-Filler', 'x'.repeat(20 * 1024)]] }), head({ extra: [['Bad Header', 'x']] }),
    head({ version: 'HTTP/9.9' }),
    json('POST', '/book', { size: 5 * 1024 * 1024, title: '1' }),
    { ...json('POST', '/book', { size: 5 * 1024 * 1024, title: '1' }), framing: 'chunked' },
    json('POST', '/token', { size: 5 * 1024 * 1024, title: '"Dune"' }, 'absent')
  ]
}

t.test('hostile requests: always an envelope, never a 5xx, the process stays up, no book changes', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  for (const book of SEEDS) {
    const created = await service.request('POST', '/book', { token, body: book })
    t.equal(created.status, 201, `seeding ${book.title}: ${created.text}`)
  }
  const tokens = makeTokens(token)

  const db = await pgClient(t, dbUrl)
  const snapshot = async () => (await db.query('SELECT id, title, author, year FROM books ORDER BY id')).rows
  const before = await snapshot()
  t.equal(before.length, SEEDS.length, 'the seeded books are stored')
  const storedIds = before.map((row: { id: string }) => row.id)

  const documented = documentedPairs()
  t.ok([405, 413, 415].every((status) => documented.has(status)), 'the tables of docs/api.md were read')

  const histogram = new Map<number, number>()
  let sent = 0

  async function send (spec: RequestSpec) {
    const answer = await rawRequest(service.port, render(spec, tokens), { head: spec.method === 'HEAD', idleMs: ANSWER_TIMEOUT })
    sent++
    histogram.set(answer.status, (histogram.get(answer.status) ?? 0) + 1)
    checkAnswer(spec, answer, service, documented)
    // RFC 9110 section 9.3.2: a body would be read as the start of the next response
    if (spec.method === 'HEAD' && answer.body.length > 0) throw new Error(`a HEAD answered with a body: ${answer.status} ${JSON.stringify(answer.text.slice(0, 100))}`)
  }

  const stored = new Set(storedIds)
  const storedId = storedIds[0] ?? '1'
  const properties: Array<{ name: string, numRuns: number, examples: RequestSpec[], arbitrary: fc.Arbitrary<RequestSpec> }> = [
    {
      name: 'request lines: methods, targets, HTTP versions',
      numRuns: 100,
      examples: requestLineExamples(storedId),
      arbitrary: requestArb(storedIds, {
        host: fc.constant<HostSpec>('normal'),
        extra: fc.constant([]),
        body: fc.constant(null)
      })
    },
    {
      name: 'headers: Host, Authorization, Content-Type and extras on the real routes',
      numRuns: 100,
      examples: headerExamples(),
      arbitrary: requestArb(storedIds, {
        method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'HEAD'),
        target: realTargetArb(storedIds),
        targetEncoding: fc.constant<'utf8'>('utf8'),
        version: fc.constant('HTTP/1.1'),
        body: fc.option(fc.oneof(bookishTextArb, loginTextArb).map(utf8), { nil: null })
      })
    },
    {
      name: 'bodies: hostile JSON and content types on the real routes',
      numRuns: 100,
      examples: bodyExamples(storedId),
      arbitrary: requestArb(storedIds, {
        method: fc.constantFrom('POST', 'POST', 'PUT', 'PUT', 'DELETE', 'GET', 'PATCH'),
        target: realTargetArb(storedIds),
        targetEncoding: fc.constant<'utf8'>('utf8'),
        version: fc.constant('HTTP/1.1'),
        host: fc.constant<HostSpec>('normal'),
        auth: mostlyValidAuthArb,
        contentType: fc.oneof(
          { weight: 3, arbitrary: fc.constant('application/json') },
          { weight: 2, arbitrary: contentTypeArb }
        ),
        extra: fc.constant([]),
        body: bodyArb
      })
    },
    {
      name: 'input: lone surrogates, bytes not UTF-8, content codings, charsets, /docs/static/ traversal, tokens in queries',
      numRuns: 100,
      examples: inputExamples(storedId, token),
      arbitrary: inputRequestArb(storedIds, token)
    },
    {
      name: 'HEAD and huge bodies: no answer to a HEAD has a body, a body of megabytes gets its 413',
      numRuns: 50,
      examples: headAndHugeExamples(storedId),
      arbitrary: requestArb(storedIds, { method: fc.constant('HEAD') })
    },
    {
      name: 'everything at once',
      numRuns: 100,
      examples: [],
      arbitrary: requestArb(storedIds)
    }
  ]

  /**
   * Requests pipelined on one connection, then one that asks to close it: answered in order,
   * each as alone, and no more than the one in hand and those that may wait.
   */
  const CLOSING = 'GET /health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'
  async function sendPipelined (specs: RequestSpec[]) {
    const request = Buffer.concat([...specs.map((spec) => render(spec, tokens)), Buffer.from(CLOSING)])
    const { raw } = await rawExchange(service.port, request, ANSWER_TIMEOUT)
    const answers = parseResponses(raw, specs.map((spec) => spec.method === 'HEAD'))
    sent += specs.length
    if (answers.length > 1 + MAX_WAITING_PER_CONNECTION) throw new Error(`${answers.length} answers to ${specs.length} pipelined requests`)
    for (const [i, answer] of answers.entries()) {
      histogram.set(answer.status, (histogram.get(answer.status) ?? 0) + 1)
      checkAnswer(specs[i]!, answer, service, documented)
    }
  }
  await t.test('pipelined: up to 8 hostile requests on one connection', async (t) => {
    const details = await fc.check(fc.asyncProperty(fc.array(requestArb(storedIds, { body: fc.constant(null) }), { minLength: 1, maxLength: 8 }), sendPipelined), {
      numRuns: 50,
      interruptAfterTimeLimit: PROPERTY_TIME_LIMIT,
      markInterruptAsFailure: true
    })
    const failure = details.errorInstance instanceof Error ? `\n${details.errorInstance.message}` : ''
    t.notOk(details.failed, (fc.defaultReportMessage(details) ?? `${details.numRuns} runs, none failed`) + failure)
    t.equal(service.exit, null, 'the process is still running')
  })

  for (const { name, numRuns, examples, arbitrary } of properties) {
    await t.test(name, async (t) => {
      const details = await fc.check(fc.asyncProperty(arbitrary, send), {
        numRuns,
        examples: examples.map((spec): [RequestSpec] => [makeHarmless(spec, stored)]),
        interruptAfterTimeLimit: PROPERTY_TIME_LIMIT,
        markInterruptAsFailure: true
      })
      const failure = details.errorInstance instanceof Error ? `\n${details.errorInstance.message}` : ''
      t.notOk(details.failed, (fc.defaultReportMessage(details) ?? `${details.numRuns} runs, none failed`) + failure)
      t.equal(service.exit, null, 'the process is still running')
    })
  }

  t.comment(`${sent} requests; statuses: ${JSON.stringify(Object.fromEntries([...histogram].sort(([a], [b]) => a - b)))}`)
  t.equal(service.exit, null, 'the process is still running after all of them')
  for (const status of [400, 401, 404, 415]) {
    t.ok((histogram.get(status) ?? 0) > 0, `some requests were answered ${status}`)
  }

  const after = await snapshot()
  t.strictSame(after, before, 'the books table is exactly what it was')
  // Tokens went in query strings: the log holds paths only
  t.notOk(service.stdout.includes(token) || service.stderr.includes(token), 'the token is nowhere in the log')
  const list = await withTimeout(service.request('GET', '/books', { token }), 5000, 'GET /books')
  t.strictSame(list.body, {
    status: 200,
    message: 'Books retrieved successfully',
    data: before.map((row: { id: string, title: string, author: string, year: number }) => ({ ...row, id: Number(row.id) }))
  }, 'the service still answers, with the same books')
})

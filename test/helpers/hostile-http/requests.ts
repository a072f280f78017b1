/**
 * The request model of the hostile traffic (test/process/hostile-http.test.ts): small, printable
 * values, which fast-check shows as they are when it reports a counterexample, rendered to the
 * exact bytes put on the wire only when sent.
 */
import { createHmac } from 'node:crypto'
import { CLOCK_TOLERANCE_MS } from '../../../plugins/app/authenticate.js'
import { TOKEN_LIFETIME_S } from '../../../src/schemas/auth.js'
import { SECRET } from '../../helper.js'
import { base64urlTwin } from '../tokens.js'

/** The books stored before the traffic: it must leave them exactly as they are. */
export const SEEDS = [
  { title: 'Dune', author: 'Frank Herbert', year: 1965 },
  { title: 'Emma', author: 'Jane Austen', year: 1815 },
  { title: 'Beowulf', author: 'Unknown', year: -1000 }
]

/**
 * A token signed with the service's secret but with hostile header and claims. docs/api.md says
 * which of them the service accepts: HS256, HS384 or HS512, a JSON object payload, a numeric `exp`
 * in the future but at most 15 minutes and the clock tolerance ahead, no `nbf` in the future, no
 * `crit`, every segment spelled canonically; every other one is `Invalid token`.
 */
export interface ForgedSpec {
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

export type AuthSpec =
  | 'absent' | 'empty' | 'valid' | 'valid, padded' | 'valid HS512' | 'Bearer valid'
  | 'valid twice' | 'valid, then wrong secret' | 'wrong secret, then valid' | 'empty, then valid'
  | 'expired' | 'alg none' | 'tampered payload' | 'wrong secret' | { garbage: string } | { forged: ForgedSpec }

const HMAC_ALGS: Record<string, 'sha256' | 'sha384' | 'sha512'> = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' }
/** No further ahead than TOKEN_LIFETIME_S + CLOCK_TOLERANCE_MS: 1e308, 1e400 and 2100 are not. */
const ACCEPTED_EXP = new Set<ForgedSpec['exp']>(['in 10 min', 'in 10 min, fractional', 'just inside the lifetime bound'])

/** Whether docs/api.md says the service accepts this Authorization; only these reach a handler. */
export function isValidAuth (auth: AuthSpec): boolean {
  if (typeof auth === 'string') return auth === 'valid' || auth === 'valid, padded' || auth === 'valid HS512'
  if ('garbage' in auth) return false
  const { alg, exp, nbf, crit, payload, signature, header = 'ours' } = auth.forged
  // An HS384 signature (64 characters) has no unused bits, so no twin: it stays intact
  const intact = signature === 'intact' || (signature === 'last character\'s twin' && alg === 'HS384')
  return HMAC_ALGS[alg] !== undefined && ACCEPTED_EXP.has(exp) && nbf !== 'in 10 min' && !crit &&
    payload === 'object' && intact && header === 'ours'
}

export type HostSpec = 'normal' | 'absent' | 'twice' | 'empty' | { garbage: string }

export type BodySpec =
  | { text: string, encoding: 'utf8' | 'latin1' }
  | { depth: number, open: '[' | '{"a":', closed: boolean }
  | { size: number, title: string }

export interface RequestSpec {
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

export interface Tokens {
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

export function makeTokens (valid: string): Tokens {
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

export function renderBody (body: BodySpec): Buffer {
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
export function fieldCount (spec: RequestSpec): number {
  return render(spec, FIELD_COUNTING_TOKENS).toString('latin1').split('\r\n\r\n', 1)[0]!.split('\r\n').length - 1
}

/** The exact bytes put on the wire for `spec`. */
export function render (spec: RequestSpec, tokens: Tokens): Buffer {
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

/** A body of this UTF-8 text. */
export const utf8 = (text: string): BodySpec => ({ text, encoding: 'utf8' })

/**
 * fast-check's arbitraries of hostile requests (./requests.ts), each made harmless
 * (./harmless.ts) before it is sent. Each choice lists its plainest option first; cross-shrinking
 * lets a counterexample fall back to it, so what is left of a failure is only what it needs.
 */
import fc from 'fast-check'
import { BODY_LIMIT } from '../../../src/app.js'
import { PASSWORD, USERNAME } from '../../helper.js'
import { makeHarmless } from './harmless.js'
import { SEEDS, utf8, type AuthSpec, type BodySpec, type ForgedSpec, type HostSpec, type RequestSpec } from './requests.js'

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

export function realTargetArb (storedIds: string[]) {
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
export const mostlyValidAuthArb: fc.Arbitrary<AuthSpec> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom<AuthSpec>('valid', 'valid, padded', 'valid HS512') },
  { weight: 1, arbitrary: authArb }
)

export const contentTypeArb: fc.Arbitrary<string | null> = fc.oneof(
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
export const bookishTextArb = fc.record({
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

export const loginTextArb = fc.record({
  username: fc.oneof(fc.constant<unknown>(USERNAME), fc.string(), fc.integer(), fc.constant(null)),
  password: fc.oneof(fc.constant<unknown>(PASSWORD), fc.string(), fc.constant(['x']))
}, { requiredKeys: [] }).map((login) => JSON.stringify(login))

export const bodyArb: fc.Arbitrary<BodySpec> = fc.oneof(
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

export function requestArb (storedIds: string[], overrides: Overrides = {}): fc.Arbitrary<RequestSpec> {
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
export function inputRequestArb (storedIds: string[], token: string): fc.Arbitrary<RequestSpec> {
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

/**
 * Named hostile requests (./requests.ts), always tried: each property of
 * test/process/hostile-http.test.ts runs its examples before its random requests.
 */
import { MAX_HEADER_FIELDS } from '../../../plugins/app/http-edge.js'
import { BODY_LIMIT } from '../../../src/app.js'
import { PASSWORD, USERNAME } from '../../helper.js'
import { SEEDS, utf8, type AuthSpec, type BodySpec, type ForgedSpec, type RequestSpec } from './requests.js'

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

export function requestLineExamples (storedId: string): RequestSpec[] {
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

export function headerExamples (): RequestSpec[] {
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

export function bodyExamples (storedId: string): RequestSpec[] {
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
export function headAndHugeExamples (storedId: string): RequestSpec[] {
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

/** Strings that are not well-formed Unicode, content codings, charsets, paths that leave /docs/static/, tokens in query strings. */
export function inputExamples (storedId: string, token: string): RequestSpec[] {
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

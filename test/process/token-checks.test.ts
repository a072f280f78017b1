/**
 * What the authenticate hook refuses beyond fast-jwt, against a real service process (started
 * as `npm start` starts it, so `npm run build` must have run): an `exp` further ahead than a
 * token of ours can be (1e308, Infinity, the year 2100, just past 15 minutes plus the clock
 * tolerance), a signature or segment spelled non-canonically (another last character that
 * decodes to the same bytes), and two Authorization fields, whichever comes first.
 */
import t from 'tap'
import { CLOCK_TOLERANCE_MS } from '../../plugins/app/authenticate.js'
import { TOKEN_LIFETIME_S } from '../../src/schemas/auth.js'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { rawRequest } from '../helpers/raw-http.js'
import { b64url, encodeJson, HS256_HEADER, mint, nowSeconds, signInput, type Hash } from '../helpers/tokens.js'
import { startService, type Service } from '../helpers/service.js'

const TOLERANCE_S = CLOCK_TOLERANCE_MS / 1000
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

/** GET /books with exactly these Authorization fields, on a raw socket: (status, message). */
async function getBooks (service: Service, authorizations: string[]) {
  const fields = authorizations.map((value) => `Authorization: ${value}\r\n`).join('')
  const answer = await rawRequest(service.port, `GET /books HTTP/1.1\r\nHost: localhost\r\n${fields}Connection: close\r\n\r\n`)
  return `${answer.status} ${JSON.parse(answer.text).message}`
}

const ACCEPTED = '200 Books retrieved successfully'
const REFUSED = '401 Invalid token'

/** The token with the last character of one segment replaced by a twin decoding to the same bytes. */
function twin (token: string, segment: number): string {
  const parts = token.split('.')
  const part = parts[segment]!
  const unused = [0, 0, 4, 2][part.length % 4]!
  if (unused === 0) throw new Error(`segment ${segment} (${part.length} chars) has no unused bits`)
  const last = ALPHABET.indexOf(part.slice(-1))
  parts[segment] = part.slice(0, -1) + ALPHABET[last + 1]!
  if (Buffer.from(parts[segment]!, 'base64url').compare(Buffer.from(part, 'base64url')) !== 0) throw new Error('not a twin')
  return parts.join('.')
}

t.test('the authenticate hook against a real process', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const issued = await service.token()
  t.equal(await getBooks(service, [issued]), ACCEPTED, 'a token of its own is accepted')

  t.test('exp further ahead than a token of ours can be', async (t) => {
    // Assembled from JSON text so that exp can be 1e400, which JSON.parse makes Infinity
    const withExp = (exp: string) => signInput(`${encodeJson(HS256_HEADER)}.${b64url(`{"exp":${exp}}`)}`)
    const cases: Array<[string, string, string]> = [
      ['exp 1e308', withExp('1e308'), REFUSED],
      ['exp 1e400 (Infinity)', withExp('1e400'), REFUSED],
      ['exp in 2100', withExp(String(Date.UTC(2100, 0, 1) / 1000)), REFUSED],
      ['exp 15 min + tolerance + 2 s ahead', withExp(String(nowSeconds() + TOKEN_LIFETIME_S + TOLERANCE_S + 2)), REFUSED],
      ['exp 15 min + tolerance - 1 s ahead', withExp(String(nowSeconds() + TOKEN_LIFETIME_S + TOLERANCE_S - 1)), ACCEPTED],
      ['exp 15 min ahead', withExp(String(nowSeconds() + TOKEN_LIFETIME_S)), ACCEPTED],
      ['exp 10 s ahead', withExp(String(nowSeconds() + 10)), ACCEPTED]
    ]
    for (const [name, token, expected] of cases) t.equal(await getBooks(service, [token]), expected, name)
  })

  t.test('non-canonical base64url: a last character that decodes to the same bytes', async (t) => {
    const exp = nowSeconds() + 60
    const algs: Array<[string, Hash]> = [['HS256', 'sha256'], ['HS384', 'sha384'], ['HS512', 'sha512']]
    for (const [alg, hash] of algs) {
      const token = mint({ header: { alg, typ: 'JWT' }, payload: { exp }, hash })
      t.equal(await getBooks(service, [token]), ACCEPTED, `${alg}: the canonical token`)
      const signature = token.split('.')[2]!
      // 43 characters for HS256 (2 unused bits), 64 for HS384 (none), 86 for HS512 (4)
      if (signature.length % 4 === 0) {
        t.equal(signature.length, 64, `${alg}: the signature has no unused bits, so no twin`)
        continue
      }
      t.equal(await getBooks(service, [twin(token, 2)]), REFUSED, `${alg}: its signature's twin (${signature.length} chars)`)
    }
    // A segment of a multiple of 3 bytes has no unused bits and so no twin. Every header the
    // service accepts is one ({"alg":"HS256","typ":"JWT"}, 27 bytes): a header with
    // unused bits holds more than ours and is refused as such. This payload is of 26 bytes
    const header = encodeJson(HS256_HEADER)
    const payload = encodeJson({ exp, x: 'a' })
    t.strictSame([header.length % 4, payload.length % 4], [0, 3], 'the payload segment has unused bits')
    const token = signInput(`${header}.${payload}`)
    t.equal(await getBooks(service, [token]), ACCEPTED, 'a token with this payload is accepted')
    // Re-signed: only the spelling of the segment differs, the signature is right for it
    const resign = (tampered: string) => signInput(tampered.slice(0, tampered.lastIndexOf('.')))
    t.equal(await getBooks(service, [resign(twin(token, 1))]), REFUSED, 'the payload segment\'s twin, correctly signed')
  })

  t.test('two Authorization fields', async (t) => {
    const other = mint({ payload: { exp: nowSeconds() + 60 }, secret: 'another-secret-that-is-also-32-bytes-long!' })
    t.equal(await getBooks(service, [issued, issued]), REFUSED, 'the same valid token twice')
    t.equal(await getBooks(service, [issued, other]), REFUSED, 'a valid token first')
    t.equal(await getBooks(service, [other, issued]), REFUSED, 'a valid token second')
    t.equal(await getBooks(service, [issued, '']), REFUSED, 'a valid token and an empty field')
    t.equal(await getBooks(service, ['', issued]), REFUSED, 'an empty field and a valid token')
    t.equal(await getBooks(service, []), '401 Authorization token required', 'none')
    t.equal(await getBooks(service, [issued]), ACCEPTED, 'one')
  })
})

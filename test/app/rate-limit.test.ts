import t from 'tap'
import { build, getToken, PASSWORD, USERNAME } from '../helper.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'

const tokenRequest = (remoteAddress: string, password = PASSWORD) => ({
  method: 'POST' as const, url: '/token', remoteAddress, payload: { username: USERNAME, password }
})

t.test('POST /token is limited per client address; book routes are not', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t, undefined, { TOKEN_RATE_LIMIT: '5' })
  const token = await getToken(app)
  for (let attempt = 1; attempt <= 5; attempt++) {
    const response = await app.inject(tokenRequest('192.0.2.1', attempt % 2 ? 'wrong' : PASSWORD))
    t.equal(response.statusCode, attempt % 2 ? 401 : 200, `attempt ${attempt} is answered`)
  }
  const limited = await app.inject(tokenRequest('192.0.2.1'))
  t.equal(limited.statusCode, 429)
  t.strictSame(limited.json(), { status: 429, message: 'Too many requests', data: null })
  const retryAfter = Number(limited.headers['retry-after'])
  t.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 60, `Retry-After: ${limited.headers['retry-after']}`)
  t.equal(limited.headers['cache-control'], 'no-store')

  const other = await app.inject(tokenRequest('192.0.2.2'))
  t.equal(other.statusCode, 200, 'another address has its own budget')

  for (let i = 0; i < 20; i++) {
    const books = await app.inject({ method: 'GET', url: '/books', remoteAddress: '192.0.2.1', headers: { authorization: token } })
    t.equal(books.statusCode, 200, `book request ${i + 1} from the limited address`)
  }
})

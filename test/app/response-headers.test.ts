/** The headers every response carries, and those of token responses. */
import t from 'tap'
import { build, getToken, PASSWORD, USERNAME } from '../helper.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'

const tokenRequest = (remoteAddress: string, password = PASSWORD) => ({
  method: 'POST' as const, url: '/token', remoteAddress, payload: { username: USERNAME, password }
})

t.test('security headers', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  const token = await getToken(app)
  const responses = {
    'token 200': await app.inject(tokenRequest('127.0.0.1')),
    'token 401': await app.inject(tokenRequest('127.0.0.1', 'wrong')),
    'token 400': await app.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/json' }, payload: '[' }),
    'books 200': await app.inject({ method: 'GET', url: '/books', headers: { authorization: token } }),
    'books 401': await app.inject({ method: 'GET', url: '/books' }),
    'book 404': await app.inject({ method: 'GET', url: '/book/7', headers: { authorization: token } }),
    'route 404': await app.inject({ method: 'GET', url: '/nowhere' }),
    'method 405': await app.inject({ method: 'PATCH', url: '/books' }),
    'bad URL 400': await app.inject({ method: 'GET', url: '/book/%zz' }),
    'body 413': await app.inject({ method: 'POST', url: '/book', headers: { authorization: token }, payload: { title: 'x'.repeat(70_000) } })
  }
  for (const [name, response] of Object.entries(responses)) {
    t.equal(response.headers['x-content-type-options'], 'nosniff', `${name}: nosniff`)
    t.notOk('x-powered-by' in response.headers, `${name}: no X-Powered-By`)
    t.match(response.headers['x-request-id'], /^[0-9a-f-]{36}$/, `${name}: request id`)
    if (name.startsWith('token')) t.equal(response.headers['cache-control'], 'no-store', `${name}: no-store`)
  }
})

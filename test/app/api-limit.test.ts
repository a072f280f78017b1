/**
 * API_RATE_LIMIT: the requests of each client address to the book routes and the feed, counted
 * together per minute; past it 429 in the envelope with Retry-After, before authentication,
 * before the body is read and before any query; the RateLimit-Policy and RateLimit fields on
 * every answer of those routes, and of POST /token with its two limits; health, readiness and
 * metrics never limited; nothing changes without it. The limit counted in Redis, shared by
 * several instances: api-limit-redis.test.ts.
 */
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance, InjectOptions } from 'fastify'
import pg from 'pg'
import t from 'tap'
import { API_POLICY } from '../../plugins/app/api-limit.js'
import { TokenPolicy } from '../../routes/token.js'
import { build, getToken, USERNAME } from '../helper.js'
import { createDatabase, NEEDS_SERVER, serviceSessionsOnLock, STORE_INDEPENDENT, waitForSessionsOnLock } from '../helpers/database.js'
import { withTimeout } from '../helpers/wait.js'

const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }
const TOO_MANY = { status: 429, message: 'Too many requests', data: null }

/** The statuses 429 is documented for in the OpenAPI document, by operation. */
async function documented429 (app: FastifyInstance): Promise<string[]> {
  const { paths } = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
  return Object.values(paths as Record<string, Record<string, { operationId: string, responses: Record<string, unknown> }>>)
    .flatMap((operations) => Object.values(operations))
    .filter((operation) => '429' in operation.responses).map((operation) => operation.operationId).sort()
}

/** The `t` of a `RateLimit` item, and the whole item without it (it counts down with the clock). */
function parseLimit (field: unknown): Array<{ item: string, t: number }> {
  return String(field).split(', ').map((item) => {
    const match = /^(.*);t=(\d+)$/.exec(item)
    return match === null ? { item, t: NaN } : { item: match[1]!, t: Number(match[2]) }
  })
}

function limitedRequest (app: FastifyInstance, token: string, remoteAddress: string) {
  return (options: InjectOptions) => app.inject({ ...options, remoteAddress, headers: { authorization: token, ...options.headers } })
}

t.test('without API_RATE_LIMIT the book routes carry no RateLimit fields and are not limited', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const request = limitedRequest(app, token, '192.0.2.10')
  for (let i = 0; i < 5; i++) {
    const response = await request({ method: 'GET', url: '/book/1' })
    t.equal(response.statusCode, 404)
    t.notOk('ratelimit' in response.headers || 'ratelimit-policy' in response.headers || 'retry-after' in response.headers, 'no limit field')
  }
  t.strictSame(await documented429(app), ['createToken'], 'the OpenAPI document lists 429 for POST /token alone')
})

t.test('API_RATE_LIMIT counts every book route and the feed together, per address; past it 429 with Retry-After', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { API_RATE_LIMIT: '8' })
  const token = await getToken(app)
  const request = limitedRequest(app, token, '192.0.2.20')

  const created = await request({ method: 'POST', url: '/book', payload: BOOK })
  t.equal(created.statusCode, 201)
  const { id } = created.json().data
  const answers = [
    created,
    await request({ method: 'GET', url: '/books' }),
    await request({ method: 'GET', url: `/book/${id}` }),
    await request({ method: 'PUT', url: `/book/${id}`, payload: { year: 1966 } }),
    await request({ method: 'DELETE', url: `/book/${id}` }),
    // The feed's connection counts too; a bad Last-Event-ID answers at once
    await request({ method: 'GET', url: '/books/changes', headers: { 'last-event-id': 'nonsense' } }),
    // Before authentication: a request without a token counts, and carries the fields
    await app.inject({ method: 'GET', url: '/books', remoteAddress: '192.0.2.20' }),
    await request({ method: 'DELETE', url: `/book/${id}` })
  ]
  t.strictSame(answers.map((answer) => answer.statusCode), [201, 200, 200, 200, 200, 400, 401, 404])
  answers.forEach((answer, i) => {
    t.equal(answer.headers['ratelimit-policy'], `"${API_POLICY}";q=8;w=60`, `answer ${i + 1}: the policy`)
    const [limit, ...more] = parseLimit(answer.headers.ratelimit)
    t.equal(more.length, 0)
    t.equal(limit!.item, `"${API_POLICY}";r=${7 - i}`, `answer ${i + 1}: what remains`)
    t.ok(limit!.t > 0 && limit!.t <= 60, `answer ${i + 1}: t=${limit!.t}`)
  })

  for (const options of [
    { method: 'GET', url: '/books' }, { method: 'GET', url: `/book/${id}` }, { method: 'POST', url: '/book', payload: BOOK },
    { method: 'PUT', url: `/book/${id}`, payload: { year: 1 } }, { method: 'DELETE', url: `/book/${id}` }, { method: 'GET', url: '/books/changes' },
    { method: 'POST', url: '/books', payload: 'title,author,year\r\n', headers: { 'content-type': 'text/csv' } }
  ] as const) {
    const refused = await request(options)
    t.equal(refused.statusCode, 429, `${options.method} ${options.url} refused`)
    t.strictSame(refused.json(), TOO_MANY)
    const retryAfter = Number(refused.headers['retry-after'])
    t.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 60, `Retry-After: ${refused.headers['retry-after']}`)
    const [limit] = parseLimit(refused.headers.ratelimit)
    t.strictSame(limit, { item: `"${API_POLICY}";r=0`, t: retryAfter }, 'RateLimit says none remain until Retry-After')
    t.equal(refused.headers['ratelimit-policy'], `"${API_POLICY}";q=8;w=60`)
  }

  t.strictSame(await documented429(app), ['createBook', 'createToken', 'deleteBook', 'followChanges', 'getBook', 'importBooks', 'listBooks', 'updateBook'],
    'the OpenAPI document lists 429 for every limited operation')

  const other = await limitedRequest(app, token, '192.0.2.21')({ method: 'GET', url: '/books' })
  t.equal(other.statusCode, 200, 'another address has its own count')

  for (const url of ['/health/live', '/health/ready', '/metrics', '/openapi.json', '/console/']) {
    const response = await app.inject({ method: 'GET', url, remoteAddress: '192.0.2.20' })
    t.equal(response.statusCode, 200, `${url} is not limited`)
    t.notOk('ratelimit' in response.headers || 'ratelimit-policy' in response.headers, `${url} carries no limit field`)
  }
  const token2 = await app.inject({ method: 'POST', url: '/token', remoteAddress: '192.0.2.20', payload: { username: USERNAME, password: 'wrong' } })
  t.equal(token2.statusCode, 401, 'POST /token has limits of its own')
})

t.test('behind a trusted proxy the address is the one X-Forwarded-For gives', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { API_RATE_LIMIT: '2' }, { trustProxy: true })
  const token = await getToken(app)
  const request = (forwardedFor: string) => app.inject({
    method: 'GET', url: '/book/1', remoteAddress: '127.0.0.1', headers: { authorization: token, 'x-forwarded-for': forwardedFor }
  })
  const statuses = []
  for (const client of ['203.0.113.1', '203.0.113.2', '203.0.113.1', '203.0.113.2', '203.0.113.1', '203.0.113.3']) {
    statuses.push((await request(client)).statusCode)
  }
  t.strictSame(statuses, [404, 404, 404, 404, 429, 404], 'each forwarded address counts for itself, the proxy for none')
})

/** The app listening on a port of its own on 127.0.0.1. */
async function listening (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

t.test('a limited client\'s POST /book is answered 429 before its body is read: a body that never ends still gets it', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { API_RATE_LIMIT: '1' })
  const token = await getToken(app)
  const port = await listening(app)
  t.equal((await app.inject({ method: 'GET', url: '/books', remoteAddress: '127.0.0.1', headers: { authorization: token } })).statusCode, 200)

  const socket = connect({ host: '127.0.0.1', port })
  t.teardown(() => socket.destroy())
  const body = JSON.stringify(BOOK)
  // The head and half the body; the rest never comes
  socket.write(`POST /book HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${token}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\n\r\n${body.slice(0, body.length / 2)}`)
  let received = ''
  const head = await withTimeout(new Promise<string>((resolve) => {
    socket.on('data', (chunk) => {
      received += chunk.toString('latin1')
      if (received.includes('\r\n\r\n')) resolve(received)
    })
  }), 8000, 'the answer to a request whose body is unfinished')
  // A body awaited would have ended in the request timeout's 408, after 10 s
  t.match(head, /^HTTP\/1\.1 429 /, '429 while the body is unfinished')
  t.match(head, /\r\nretry-after: \d+\r\n/i)
  t.equal(socket.destroyed, false, 'the client is still sending its body')
})

t.test('a limited client makes no query: its requests are answered while the books table is locked', { skip: STORE_INDEPENDENT || NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { API_RATE_LIMIT: '2' })
  const token = await getToken(app)
  const limited = limitedRequest(app, token, '192.0.2.30')
  const created = await limited({ method: 'POST', url: '/book', payload: BOOK })
  const { id } = created.json().data
  t.equal((await limited({ method: 'GET', url: `/book/${id}` })).statusCode, 200, 'the limit reached')

  const [locker, watcher] = [new pg.Client({ connectionString: dbUrl }), new pg.Client({ connectionString: dbUrl })]
  await Promise.all([locker.connect(), watcher.connect()])
  t.teardown(() => Promise.all([locker.end(), watcher.end()]))
  await locker.query('BEGIN')
  await locker.query('LOCK TABLE books IN ACCESS EXCLUSIVE MODE')
  // Another client's read waits for the lock: what any query of the service would do
  const waiting = limitedRequest(app, token, '192.0.2.31')({ method: 'GET', url: `/book/${id}` })
  await waitForSessionsOnLock(watcher, dbUrl, 1)

  for (const options of [
    { method: 'GET', url: `/book/${id}` }, { method: 'GET', url: '/books' }, { method: 'GET', url: '/books?limit=5&sort=-year' },
    { method: 'POST', url: '/book', payload: BOOK }, { method: 'PUT', url: `/book/${id}`, payload: { year: 1 } },
    { method: 'PUT', url: `/book/${id}`, payload: '{', headers: { 'content-type': 'application/json' } },
    { method: 'DELETE', url: `/book/${id}` }, { method: 'GET', url: '/books/changes' }
  ] as const) {
    const refused = await withTimeout(limited(options), 4000, `${options.method} ${options.url} answered while the table is locked`)
    t.equal(refused.statusCode, 429, `${options.method} ${options.url}: 429 without waiting for the lock`)
  }
  t.equal(await serviceSessionsOnLock(watcher, dbUrl), 1, 'no other statement waits for the lock')
  await locker.query('ROLLBACK')
  t.equal((await waiting).statusCode, 200)
})

t.test('POST /token carries RateLimit-Policy and RateLimit with its two limits, each named', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t, undefined, { TOKEN_RATE_LIMIT: '4', TOKEN_USERNAME_RATE_LIMIT: '2' })
  const username = `guessed-${Math.random()}`
  const attempt = (payload: unknown = { username, password: 'wrong' }) =>
    app.inject({ method: 'POST', url: '/token', remoteAddress: '192.0.2.40', payload: payload as object })
  const policy = `"${TokenPolicy.Address}";q=4;w=60, "${TokenPolicy.Username}";q=2;w=60`
  const items = async (response: Awaited<ReturnType<typeof attempt>>) => {
    t.equal(response.headers['ratelimit-policy'], policy)
    return parseLimit(response.headers.ratelimit).map(({ item }) => item)
  }
  const address = (r: number) => `"${TokenPolicy.Address}";r=${r}`
  const perUsername = (r: number) => `"${TokenPolicy.Username}";r=${r}`

  const first = await attempt()
  t.equal(first.statusCode, 401)
  t.strictSame(await items(first), [address(3), perUsername(1)])
  t.equal(first.headers['x-ratelimit-limit'], '4', 'the plugin\'s own fields are kept')
  t.equal(first.headers['x-ratelimit-remaining'], '3')

  // A body that is no login: the username is not counted, the address is
  const invalid = await attempt({ username })
  t.equal(invalid.statusCode, 400)
  t.strictSame(await items(invalid), [address(2)])

  t.equal((await attempt()).statusCode, 401)
  const overUsername = await attempt()
  t.equal(overUsername.statusCode, 429, 'past the per-username limit')
  t.strictSame(await items(overUsername), [address(0), perUsername(0)])
  const [, usernameLimit] = parseLimit(overUsername.headers.ratelimit)
  t.equal(Number(overUsername.headers['retry-after']), usernameLimit!.t, 'Retry-After is the username\'s t')

  const overAddress = await attempt()
  t.equal(overAddress.statusCode, 429, 'past the per-address limit')
  t.strictSame(await items(overAddress), [address(0)])
  t.strictSame(overAddress.json(), TOO_MANY)
})

/**
 * SECRET_TOKEN_ACCEPTED (docs/operations.md, Rotating the signing secret): tokens, listing
 * cursors and change ids made with SECRET_TOKEN or with an accepted secret are accepted, and
 * every one is made with SECRET_TOKEN alone. Four instances on one database, one for each step of
 * a rotation from A to B: A alone; A, accepting B; B, accepting A; B alone.
 */
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { changeIds } from '../../src/changes.js'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { createDatabase } from '../helpers/database.js'
import { FeedClient } from '../helpers/feed.js'
import { base64urlTwin, mint, nowSeconds } from '../helpers/tokens.js'

const A = 'the-old-secret-of-this-test-at-least-32-bytes'
const B = 'the-new-secret-of-this-test-at-least-32-bytes'
const WALK = '/books?limit=2&sort=title'

interface Step {
  app: FastifyInstance
  url: string
  token: string
}

/** The app with these secrets on `dbUrl`, listening on a port of its own (the feed), with a token it issued. */
async function step (t: Test, dbUrl: string, secret: string, accepted = ''): Promise<Step> {
  const app = await build(t, dbUrl, { SECRET_TOKEN: secret, SECRET_TOKEN_ACCEPTED: accepted })
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, token: await getToken(app) }
}

const get = async (at: Step, url: string, token = at.token) => {
  const { status, body, headers } = await call(at.app, token, { method: 'GET', url })
  return { status, body, next: /^<([^>]+)>/.exec(String(headers.link ?? ''))?.[1] }
}

/** `signed` (a token, a cursor's path, a change id) with the last character of its signature's twin: the same bytes. */
const twin = (signed: string) => {
  const dot = signed.lastIndexOf('.')
  return signed.slice(0, dot + 1) + base64urlTwin(signed.slice(dot + 1))
}

/** The status of a feed of `at` opened with `lastEventId`, and the feed, closed when the test ends. */
async function openFeed (t: Test, at: Step, lastEventId?: string) {
  const client = new FeedClient(at.url, at.token)
  t.teardown(() => client.close())
  const { status, body } = await client.connect(lastEventId)
  return { status, body, client }
}

t.test('a rotation from A to B: what each step accepts and what it makes', async (t) => {
  const dbUrl = await createDatabase(t)
  const onlyA = await step(t, dbUrl, A)
  const aAcceptingB = await step(t, dbUrl, A, B)
  const bAcceptingA = await step(t, dbUrl, B, `${A},another-secret-no-instance-signs-with-32-bytes`)
  const onlyB = await step(t, dbUrl, B)
  for (const title of ['Alpha', 'Beta', 'Gamma', 'Delta', 'Epsilon']) {
    t.equal((await call(onlyA.app, onlyA.token, { method: 'POST', url: '/book', payload: { title, author: 'x', year: 2000 } })).status, 201)
  }
  const live = { exp: nowSeconds() + 600 }

  t.test('tokens', async (t) => {
    const signedBy = (token: string) => [A, B].find((secret) => mint({ payload: JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()), secret }) === token)
    t.equal(signedBy(aAcceptingB.token), A, 'an instance accepting B still issues with A')
    t.equal(signedBy(bAcceptingA.token), B, 'an instance accepting A issues with B')
    const accepts = async (at: Step, token: string) => (await get(at, '/books?limit=1', token)).status
    t.equal(await accepts(aAcceptingB, onlyA.token), 200, 'A, accepting B: a token of A')
    t.equal(await accepts(aAcceptingB, bAcceptingA.token), 200, 'A, accepting B: a token of B')
    t.equal(await accepts(bAcceptingA, onlyA.token), 200, 'B, accepting A: a token of A')
    t.equal(await accepts(bAcceptingA, onlyB.token), 200, 'B, accepting A: a token of B')
    t.equal(await accepts(onlyA, bAcceptingA.token), 401, 'A alone: a token of B is refused')
    const dropped = await get(onlyB, '/books?limit=1', onlyA.token)
    t.equal(dropped.status, 401, 'B alone: a token of A is refused')
    t.strictSame(dropped.body, errorEnvelope(401, 'Invalid token'), 'as every refused token')
    const expired = mint({ payload: { exp: nowSeconds() - 1 }, secret: A })
    t.equal(await accepts(bAcceptingA, expired), 401, 'an accepted secret: its expired token is refused')
    const longLived = mint({ payload: { exp: nowSeconds() + 3600 }, secret: A })
    t.equal(await accepts(bAcceptingA, longLived), 401, 'an accepted secret: a token further ahead than 15 minutes is refused')
    const noTyp = mint({ header: { alg: 'HS256' }, payload: live, secret: A })
    t.equal(await accepts(bAcceptingA, noTyp), 401, 'an accepted secret: a header other than ours is refused')
    t.equal(await accepts(bAcceptingA, twin(onlyA.token)), 401, 'an accepted secret: its signature spelled otherwise is refused')
  })

  t.test('listing cursors', async (t) => {
    const first = await get(onlyA, WALK)
    t.ok(first.next, 'precondition: a cursor of A')
    const fromA = await get(bAcceptingA, first.next!)
    t.equal(fromA.status, 200, 'B, accepting A: a cursor of A goes on')
    t.strictSame(fromA.body.data.map((book: { title: string }) => book.title), ['Delta', 'Epsilon'], 'from where it stood')
    const fromB = await get(aAcceptingB, fromA.next!)
    t.equal(fromB.status, 200, 'A, accepting B: a cursor of B goes on')
    t.strictSame(fromB.body.data.map((book: { title: string }) => book.title), ['Gamma'])
    t.equal((await get(onlyB, fromA.next!)).status, 200, 'precondition: B alone reads a cursor of B')
    t.equal((await get(onlyA, fromA.next!)).status, 400, 'A alone: a cursor of B is 400')
    const dropped = await get(onlyB, first.next!)
    t.equal(dropped.status, 400, 'B alone: a cursor of A is 400')
    t.strictSame(dropped.body, errorEnvelope(400, 'Invalid input'))
    t.equal((await get(bAcceptingA, first.next!.replace(/sort=title/, 'sort=-title'))).status, 400, 'an accepted secret: a cursor sent with another sort is 400')
    t.equal((await get(bAcceptingA, twin(first.next!))).status, 400, 'an accepted secret: a cursor spelled otherwise is 400')
  })

  t.test('change ids: a feed resumes on every step that accepts its id; past them, 400, and a new feed', async (t) => {
    const feedOfA = await openFeed(t, onlyA)
    t.equal(feedOfA.status, 200)
    await feedOfA.client.waitFor('the starting id', () => feedOfA.client.lastEventId !== undefined)
    const idOfA = feedOfA.client.lastEventId!
    t.not(changeIds(A).decode(idOfA), null, 'precondition: an id of A')
    t.equal((await openFeed(t, bAcceptingA, twin(idOfA))).status, 400, 'B, accepting A: an id of A spelled otherwise is 400')
    const resumed = await openFeed(t, bAcceptingA, idOfA)
    t.equal(resumed.status, 200, 'B, accepting A: an id of A resumes')
    await call(bAcceptingA.app, bAcceptingA.token, { method: 'POST', url: '/book', payload: { title: 'Zeta', author: 'x', year: 2001 } })
    await resumed.client.waitFor('the change', () => resumed.client.changes().length === 1)
    t.equal(resumed.client.changes()[0]!.book.title, 'Zeta', 'the change after it')
    const idOfB = resumed.client.lastEventId!
    t.equal(changeIds(A).decode(idOfB), null, 'an instance whose SECRET_TOKEN is B makes ids with B')
    t.equal((await openFeed(t, aAcceptingB, idOfB)).status, 200, 'A, accepting B: an id of B resumes')
    t.equal((await openFeed(t, onlyA, idOfB)).status, 400, 'A alone: an id of B is 400')
    const dropped = await openFeed(t, onlyB, idOfA)
    t.equal(dropped.status, 400, 'B alone: an id of A is 400 Invalid input')
    t.strictSame(JSON.parse(dropped.body!), errorEnvelope(400, 'Invalid input'))
    // The client starts again: the feed without an id, then the list (docs/api.md, Live changes)
    const again = await openFeed(t, onlyB)
    t.equal(again.status, 200, 'a feed without an id opens')
    await again.client.waitFor('its starting id', () => again.client.lastEventId !== undefined)
    await call(onlyB.app, onlyB.token, { method: 'POST', url: '/book', payload: { title: 'Eta', author: 'x', year: 2002 } })
    await again.client.waitFor('the next change', () => again.client.changes().length === 1)
    t.equal(again.client.changes()[0]!.book.title, 'Eta', 'every change from then on')
    t.equal((await openFeed(t, onlyB, again.client.lastEventId)).status, 200, 'and its ids resume')
  })
})

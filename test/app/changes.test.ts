/**
 * GET /books/changes: every committed create, update and delete once, in each book's order, on
 * every instance; resumed with Last-Event-ID from memory and from the log; `reset` past what the
 * log keeps; a never-issued id refused; the feed ended as its token expires, as its client stops
 * reading, and as the instance closes; keep-alives; the open feeds in the metrics. The app
 * listens on a real port and the feed is read over real sockets (test/helpers/feed.ts). The
 * feed's rules one by one, on a log in memory: test/unit/changes-feed.test.ts.
 */
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { KEEP_ALIVE_MS, POLL_MS } from '../../src/changes-feed.js'
import { MAX_PENDING_BYTES } from '../../src/changes-subscription.js'
import { RECONNECT_MS, changeIds } from '../../src/changes.js'
import { SECRET, build, call, getToken } from '../helper.js'
import { NEEDS_SERVER, createDatabase, pgClient } from '../helpers/database.js'
import { FeedClient, type BookChange } from '../helpers/feed.js'
import { base64urlTwin, mint, nowSeconds } from '../helpers/tokens.js'
import { sleep, waitUntil } from '../helpers/wait.js'

interface Instance {
  app: FastifyInstance
  url: string
  token: string
}

/** The app on `dbUrl`, listening on a port of its own, with a token. */
async function instance (t: Test, dbUrl: string, env: Record<string, string> = {}): Promise<Instance> {
  const app = await build(t, dbUrl, env)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address() as { port: number }
  return { app, url: `http://127.0.0.1:${address.port}`, token: await getToken(app) }
}

/** A feed of `at`, connected, closed when the test ends. */
async function feed (t: Test, at: Instance, lastEventId?: string): Promise<FeedClient> {
  const client = new FeedClient(at.url, at.token)
  t.teardown(() => client.close())
  const answer = await client.connect(lastEventId)
  t.equal(answer.status, 200, 'the feed opens')
  return client
}

const write = (at: Instance, method: string, url: string, payload?: unknown) => call(at.app, at.token, { method: method as 'GET', url, payload: payload as object })

/** What a feed's changes say, without their ids: `kind id title year`. */
const described = (changes: BookChange[]) => changes.map(({ kind, book }) => `${kind} ${book.id}${kind === 'deleted' ? '' : ` ${book.title} ${book.year}`}`)

t.test('every change is one event: the book as stored after it, in order, with ids that increase', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  const client = new FeedClient(service.url, service.token)
  t.teardown(() => client.close())
  const answer = await client.connect()
  t.equal(answer.status, 200)
  t.match(answer.headers['content-type'], /^text\/event-stream/, 'the event stream format')
  t.equal(answer.headers['cache-control'], 'no-store', 'for this client alone, as every book route')
  await client.waitFor('the retry field', () => client.retries.length === 1)
  t.strictSame(client.retries, [RECONNECT_MS], '`retry` once, at the start')

  const created = await write(service, 'POST', '/book', { title: 'Dune', author: 'Frank Herbert', year: 1965 })
  const id = created.body.data.id
  await write(service, 'PUT', `/book/${id}`, { year: 1966 })
  await write(service, 'PUT', `/book/${id}`, { year: 1966 })
  await write(service, 'DELETE', `/book/${id}`)
  // Refused writes change nothing, and are in no feed
  t.equal((await write(service, 'PUT', `/book/${id}`, { year: 1 })).status, 404)
  t.equal((await write(service, 'POST', '/book', { title: 'no year', author: 'x' })).status, 400)
  await client.waitFor('four changes', () => client.changes().length === 4)
  await sleep(500)
  t.strictSame(client.events.map((e) => [e.event, e.data]), [
    ['created', JSON.stringify({ id, title: 'Dune', author: 'Frank Herbert', year: 1965 })],
    ['updated', JSON.stringify({ id, title: 'Dune', author: 'Frank Herbert', year: 1966 })],
    ['updated', JSON.stringify({ id, title: 'Dune', author: 'Frank Herbert', year: 1966 })],
    ['deleted', JSON.stringify({ id })]
  ], 'one event per answered write, with the JSON of the book; an update that changed nothing too; nothing for a refused write')
  const ids = client.events.map((e) => e.id!)
  t.strictSame([...ids].sort(), ids, 'ids increase, as strings too')
  t.equal(new Set(ids).size, 4, 'no two alike')
})

t.test('a Last-Event-ID this service never issued is 400 Invalid input; no token is 401', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  await write(service, 'POST', '/book', { title: 'Emma', author: 'Jane Austen', year: 1815 })
  // Sent by the instance before the feed opens
  await sleep(3 * POLL_MS)
  const client = await feed(t, service)
  await write(service, 'POST', '/book', { title: 'Persuasion', author: 'Jane Austen', year: 1817 })
  await client.waitFor('a change', () => client.changes().length === 1)
  const issued = client.lastEventId!
  const [digits, tag] = issued.split('.') as [string, string]
  // The last character's unused bits: the same 16 bytes, spelled otherwise
  const twin = `${digits}.${base64urlTwin(tag)}`
  const refused = {
    garbage: 'not an id',
    'a number': '1',
    'another position, the same tag': `${String(Number(digits) + 1).padStart(16, '0')}.${tag}`,
    'another spelling of the same tag': twin,
    'signed with another secret': changeIds('another-secret-that-is-at-least-32-bytes').encode(Number(digits)),
    'two ids': `${issued}, ${issued}`
  }
  for (const [what, lastEventId] of Object.entries(refused)) {
    const other = new FeedClient(service.url, service.token)
    const answer = await other.connect(lastEventId)
    t.equal(answer.status, 400, `${what}: 400`)
    t.strictSame(JSON.parse(answer.body!), { status: 400, message: 'Invalid input', data: null }, `${what}: the envelope`)
  }
  const anonymous = new FeedClient(service.url, '')
  const answer = await anonymous.connect(undefined)
  t.equal(answer.status, 401)
  t.strictSame(JSON.parse(answer.body!), { status: 401, message: 'Authorization token required', data: null })
  const again = await feed(t, service, issued)
  await again.waitFor('the retry field', () => again.retries.length === 1)
  t.equal(again.events.length, 0, 'the id issued resumes: nothing after it yet')
})

t.test('a feed resumes after its last event: from memory, and from the log in an instance that never sent it', async (t) => {
  const dbUrl = await createDatabase(t)
  const first = await instance(t, dbUrl)
  const client = await feed(t, first)
  const { body: { data: book } } = await write(first, 'POST', '/book', { title: 'Beloved', author: 'Toni Morrison', year: 1987 })
  await client.waitFor('the create', () => client.changes().length === 1)
  const afterCreate = client.lastEventId!
  client.close()
  // Missed while disconnected
  await write(first, 'PUT', `/book/${book.id}`, { title: 'Jazz', year: 1992 })
  await write(first, 'POST', '/book', { title: 'Sula', author: 'Toni Morrison', year: 1973 })
  await sleep(400)
  t.equal((await client.connect()).status, 200, 'reconnected with its last id')
  await client.waitFor('what it missed', () => client.changes().length === 3)
  await write(first, 'DELETE', `/book/${book.id}`)
  await client.waitFor('the live delete', () => client.changes().length === 4)
  t.strictSame(described(client.changes()), [
    `created ${book.id} Beloved 1987`, `updated ${book.id} Jazz 1992`, `created ${book.id + 1} Sula 1973`, `deleted ${book.id}`
  ], 'each change once, in order: the missed ones, then the live one')

  // A feed that drops before its first change resumes from where it started
  const quiet = new FeedClient(first.url, first.token)
  t.teardown(() => quiet.close())
  t.equal((await quiet.connect()).status, 200)
  await quiet.waitFor('the id it starts at', () => quiet.lastEventId !== undefined)
  t.equal(quiet.events.length, 0, 'an id, and no event')
  quiet.close()
  await write(first, 'POST', '/book', { title: 'Paradise', author: 'Toni Morrison', year: 1997 })
  await sleep(400)
  t.equal((await quiet.connect()).status, 200)
  await quiet.waitFor('the create made while it was away', () => quiet.changes().length === 1)
  t.match(quiet.changes()[0]!.book, { title: 'Paradise' })

  // A new instance holds nothing in memory: it reads the log
  const second = await instance(t, dbUrl)
  const late = await feed(t, second, afterCreate)
  await late.waitFor('the changes after the create', () => late.changes().length === 4)
  await sleep(400)
  t.strictSame(late.changes().slice(0, 3).map((c) => c.id), client.changes().slice(1, 4).map((c) => c.id), 'the same changes, with the same ids, from another instance')
})

t.test('an id older than what the log keeps: `reset` first, then the feed goes on live', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  const client = await feed(t, service)
  for (const year of [2001, 2002, 2003]) await write(service, 'POST', '/book', { title: `Book ${year}`, author: 'A', year })
  await client.waitFor('three creates', () => client.changes().length === 3)
  const oldest = client.changes()[0]!.id
  const newest = client.lastEventId!
  client.close()
  // What the prune of a day later does: everything but the last change. An instance keeps the
  // last changes it sent in memory, which the log always holds too (10,000 against 1,000,000);
  // here the log holds less: a new instance, with nothing in memory, reads it
  t.equal(await service.app.changeLog.pruneChanges(0, 1, 1000), 2, 'all but the last change pruned')
  const fresh = await instance(t, dbUrl)
  const behind = await feed(t, fresh, oldest)
  await behind.waitFor('reset', () => behind.events.length === 1)
  t.strictSame(behind.events[0], { event: 'reset', data: '{}', id: newest }, '`reset`, with the id the feed goes on after')
  await write(service, 'POST', '/book', { title: 'Book 2004', author: 'A', year: 2004 })
  await behind.waitFor('the live create', () => behind.changes().length === 1)
  t.match(behind.changes()[0]!.book, { title: 'Book 2004' })
  // An id beyond the log's last change (a database restored from an older backup): reset too
  const restored = await feed(t, await instance(t, dbUrl), changeIds(SECRET).encode(1_000_000))
  await restored.waitFor('reset', () => restored.events.length === 1)
  t.match(restored.events[0], { event: 'reset', data: '{}' }, 'an id beyond the log: `reset`')
  // The change right before the first kept still resumes: nothing after it is gone
  const fine = await feed(t, await instance(t, dbUrl), newest)
  await fine.waitFor('the live create', () => fine.changes().length === 1)
  t.equal(fine.events[0]!.event, 'created', 'no reset for an id whose next change is kept')
})

t.test('out-of-order commits: every change on every instance once, in each book\'s order', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const instances = [await instance(t, dbUrl), await instance(t, dbUrl), await instance(t, dbUrl)]
  const db = await pgClient(t, dbUrl)
  const holder = await pgClient(t, dbUrl)
  // The commit of a book titled "held" waits for a lock the test holds: its change drew its seq
  // before later ones, and commits after them
  await db.query(`CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$`)
  await db.query(`CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON book_changes DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.book LIKE '%"title":"held"%') EXECUTE FUNCTION hold_commit()`)
  const feeds = await Promise.all(instances.map((at) => feed(t, at)))

  await holder.query('BEGIN')
  await holder.query('SELECT pg_advisory_xact_lock(4242)')
  const held = write(instances[0]!, 'POST', '/book', { title: 'held', author: 'H', year: 1 })
  await sleep(200)
  // Meanwhile, books created, updated and deleted through all three, each book's steps in turn
  const acknowledged = new Map<number, string[]>()
  await Promise.all(Array.from({ length: 12 }, async (_, n) => {
    const via = (step: number) => instances[(n + step) % 3]!
    const { status, body } = await write(via(1), 'POST', '/book', { title: `t${n}`, author: 'A', year: 0 })
    t.equal(status, 201)
    const id = body.data.id as number
    const steps = [`created ${id} t${n} 0`]
    for (let year = 1; year <= 3; year++) {
      t.equal((await write(via(year + 1), 'PUT', `/book/${id}`, { year })).status, 200)
      steps.push(`updated ${id} t${n} ${year}`)
    }
    if (n % 2 === 0) {
      t.equal((await write(via(0), 'DELETE', `/book/${id}`)).status, 200)
      steps.push(`deleted ${id}`)
    }
    acknowledged.set(id, steps)
  }))
  const later = [...acknowledged.values()].flat().length
  for (const client of feeds) await client.waitFor('the later changes', () => client.changes().length === later)
  t.notOk(feeds.some((client) => client.changes().some((c) => c.book.title === 'held')), 'the held change is in no feed before it commits')
  await holder.query('COMMIT')
  const { status, body } = await held
  t.equal(status, 201, 'the held create is answered once it commits')
  acknowledged.set(body.data.id, [`created ${body.data.id} held 1`])
  const all = later + 1
  for (const client of feeds) await client.waitFor('the held change too', () => client.changes().length >= all)
  await sleep(600)

  const [reference, ...others] = feeds.map((client) => client.changes())
  t.equal(reference!.length, all, 'every change once')
  t.equal(new Set(reference!.map((c) => c.id)).size, all, 'no id twice')
  t.ok(reference!.at(-1)!.book.title === 'held', 'the change that committed last comes last, though it drew its seq first')
  for (const [id, steps] of acknowledged) {
    t.strictSame(described(reference!.filter((c) => c.book.id === id)), steps, `book ${id}: its changes in the order they were made`)
  }
  for (const changes of others) t.strictSame(changes, reference, 'every instance sends the same changes, with the same ids, in the same order')
})

t.test('a feed ends with `token-expired` as its token expires', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  const shortLived = mint({ payload: { exp: nowSeconds() + 2 } })
  const client = new FeedClient(service.url, shortLived)
  t.teardown(() => client.close())
  t.equal((await client.connect()).status, 200)
  const opened = Date.now()
  await client.waitFor('token-expired', () => client.ends === 1, 5000)
  t.strictSame(client.events, [{ event: 'token-expired', data: '{}' }], '`token-expired`, without an id, then the end')
  t.ok(Date.now() - opened <= 3000, 'at the token\'s expiry')
  t.equal((await client.connect()).status, 401, 'the expired token opens no feed')
})

t.test('a keep-alive comment on an idle feed, within KEEP_ALIVE_MS of its start', async (t) => {
  // Their cadence, one every KEEP_ALIVE_MS on every feed: test/unit/changes-feed.test.ts
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  const opened = Date.now()
  const client = await feed(t, service)
  await client.waitFor('a keep-alive', () => client.comments.length >= 1, 3 * KEEP_ALIVE_MS)
  t.match(client.comments[0]!.text, 'keep-alive')
  const after = client.comments[0]!.at - opened
  t.ok(after <= KEEP_ALIVE_MS + 1000 && KEEP_ALIVE_MS <= 15_000, `the first after ${after} ms, within 15 s`)
})

t.test('a client that stops reading gets `reset` and its feed ends; others go on', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 60_000 })
  const slow = await feed(t, service)
  const reader = await feed(t, service)
  slow.pause()
  // Far more than the socket buffers and the bound hold: 16,000 changes of 1 KB titles, written
  // as the service writes them (the log is the feed's only source)
  const changes = 16_000
  await db.query(`WITH created AS (
      INSERT INTO books (title, author, year) SELECT repeat('x', 1000) || n, 'A', n FROM generate_series(1, $1::int) AS n RETURNING id, title, author, year
    ) INSERT INTO book_changes (kind, book) SELECT 'created', row_to_json(created)::text FROM created`, [changes])
  await reader.waitFor('every change', () => reader.changes().length === changes, 30_000)
  await sleep(500)
  slow.resume()
  await slow.waitFor('the end of its feed', () => slow.ends === 1, 20_000)
  const received = slow.changes().length
  t.ok(received < changes, `cut off: ${received} of ${changes} changes received`)
  const last = slow.events.at(-1)!
  t.match(last, { event: 'reset', data: '{}' }, 'the last event is `reset`')
  const sent = reader.changes().map((change) => change.id)
  t.ok(sent.indexOf(last.id!) >= received - 1, 'with the id of a change sent since, which the feed goes on after')
  t.ok(MAX_PENDING_BYTES <= 1024 * 1024, 'a bound of at most 1 MiB per feed')
})

t.test('a closing instance ends its feeds; the client resumes on another, missing nothing', async (t) => {
  const dbUrl = await createDatabase(t)
  const leaving = await instance(t, dbUrl)
  const staying = await instance(t, dbUrl)
  const client = await feed(t, leaving)
  await write(staying, 'POST', '/book', { title: 'Ulysses', author: 'James Joyce', year: 1922 })
  await client.waitFor('the create', () => client.changes().length === 1)
  const closing = leaving.app.close()
  await client.waitFor('the end of the feed', () => client.ends === 1, 5000)
  await closing
  await write(staying, 'POST', '/book', { title: 'Dubliners', author: 'James Joyce', year: 1914 })
  client.token = staying.token
  const resumed = new FeedClient(staying.url, staying.token)
  t.teardown(() => resumed.close())
  t.equal((await resumed.connect(client.lastEventId)).status, 200)
  await resumed.waitFor('the create made meanwhile', () => resumed.changes().length === 1)
  t.match(resumed.changes()[0]!.book, { title: 'Dubliners' })
})

t.test('the open feeds are counted in changes_feed_subscribers', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl)
  const subscribers = async () => /^changes_feed_subscribers (\d+)$/m.exec((await service.app.inject({ method: 'GET', url: '/metrics' })).body)?.[1]
  t.equal(await subscribers(), '0', 'none open')
  const clients = [await feed(t, service), await feed(t, service)]
  await waitUntil(async () => await subscribers() === '2', 5000, 'two open')
  clients[0]!.close()
  await waitUntil(async () => await subscribers() === '1', 5000, 'one, once a client left')
  t.equal(await subscribers(), '1')
})

t.test('feeds count against the connection bounds', async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await instance(t, dbUrl, { MAX_CONNECTIONS: '10', MAX_CONNECTIONS_PER_ADDRESS: '2' })
  await feed(t, service)
  await feed(t, service)
  const third = new FeedClient(service.url, service.token)
  t.teardown(() => third.close())
  const answer = await third.connect()
  t.equal(answer.status, 429, 'a third feed from the address is over MAX_CONNECTIONS_PER_ADDRESS')
})

t.test('with no feed open anywhere, the changes are placed as the log is pruned, so that what it keeps counts them', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const writer = await instance(t, dbUrl)
  const db = await pgClient(t, dbUrl)
  for (const year of [1, 2, 3]) await write(writer, 'POST', '/book', { title: `Unfollowed ${year}`, author: 'A', year })
  const unplaced = 'SELECT count(*)::int AS n FROM book_changes WHERE position IS NULL'
  t.equal((await db.query<{ n: number }>(unplaced)).rows[0]!.n, 3, 'no reader placed them: no feed is open')
  // An instance's start runs a round of the prune
  await instance(t, dbUrl)
  t.equal((await db.query<{ n: number }>(unplaced)).rows[0]!.n, 0, 'the prune placed them')
})

/**
 * One budget of the pool's connections for long reads (plugins/app/read-budget.ts), shared by the
 * pages of the listings and the pages of the feeds that catch up from the change log: together
 * they never hold more than `listingConnections` of the pool. With a budget each, stalled
 * listings and catching-up feeds could hold every connection, and the other requests none.
 */
import t from 'tap'
import { build, call, getToken } from '../helper.js'
import { listingConnections } from '../../plugins/app/read-budget.js'
import { NEEDS_SERVER, createDatabase, pgClient, serviceSessionsOnLock, waitForSessionsOnLock } from '../helpers/database.js'
import { FeedClient } from '../helpers/feed.js'
import { sleep } from '../helpers/wait.js'

/** Long enough for a catch-up that is not held back to reach its client; well within the statement bound. */
const HELD_MS = 1000

t.test('listings that hold the whole budget keep a feed\'s catch-up from the log waiting, then it goes on', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  const token = await getToken(app)
  const budget = listingConnections(app.pg.pool.options.max)
  t.ok(budget < app.pg.pool.options.max, `a budget of ${budget} of the pool's ${app.pg.pool.options.max} connections`)

  // Changes placed before any feed of this instance opens: its reader starts after them, with
  // nothing in memory, so a feed that resumes from the first reads the rest from the log
  for (const year of [2001, 2002, 2003]) {
    t.equal((await call(app, token, { method: 'POST', url: '/book', payload: { title: `Book ${year}`, author: 'A', year } })).status, 201)
  }
  t.equal(await app.changeLog.placeChanges(1000), 3)

  // Listings that stall in PostgreSQL, one per connection of the budget, each from a client
  // address of its own (one address holds at most half of the budget: listing-budget.test.ts)
  const admin = await pgClient(t, dbUrl)
  const holder = await pgClient(t, dbUrl)
  await holder.query('BEGIN')
  await holder.query('LOCK TABLE books IN ACCESS EXCLUSIVE MODE')
  const listings = Promise.all(Array.from({ length: budget }, (_, i) =>
    call(app, token, { method: 'GET', url: `/books?limit=${i + 1}`, remoteAddress: `192.0.2.${i + 1}` })))
  await waitForSessionsOnLock(admin, dbUrl, budget)

  const feed = new FeedClient(`http://127.0.0.1:${port}`, token)
  t.teardown(() => feed.close())
  t.equal((await feed.connect(app.changesFeed.ids.encode(1))).status, 200, 'the feed opens, resuming after the first change')
  await sleep(HELD_MS)
  t.equal(feed.changes().length, 0, 'no change sent while the listings hold the budget: the catch-up waits for its turn')
  t.equal(await serviceSessionsOnLock(admin, dbUrl), budget, 'the listings still hold it')

  await holder.query('COMMIT')
  t.strictSame((await listings).map(({ status }) => status), Array.from({ length: budget }, () => 200), 'every listing answers')
  await feed.waitFor('the two changes after the first', () => feed.changes().length === 2)
  t.strictSame(feed.changes().map(({ book }) => book.title), ['Book 2002', 'Book 2003'], 'the catch-up, once the listings gave the budget back')
})

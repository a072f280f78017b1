/**
 * A deploy under load (docs/deployment.md): three instances behind the example HAProxy
 * (docs/deploy/haproxy.cfg), through PgBouncer, started by tools/cluster.ts as `npm run cluster`
 * starts them. Keep-alive clients read, create and update through HAProxy while every instance is
 * restarted in turn (SIGTERM, its exit, a new process on its port, back in rotation), three times
 * over. Nothing is lost: no 5xx, no reset, no timeout, every answer the one expected, and every
 * create acknowledged with 201 is stored exactly once, with nothing else stored. A feed of changes
 * (GET /books/changes) follows through HAProxy: each restart ends it, and it resumes on another
 * instance with Last-Event-ID, as an EventSource does; it receives every acknowledged create and
 * update exactly once.
 */
import t from 'tap'
import { startCluster } from '../../../tools/cluster.js'
import { testEnv } from '../../helper.js'
import { createDatabase, NEEDS_DIRECT_SERVER, pgClient } from '../../helpers/database.js'
import { FeedClient } from '../../helpers/feed.js'
import { EXPECTED_STATUS, startMixedLoad, summary } from '../../helpers/mixed-load.js'
import { needsPrograms } from '../../helpers/programs.js'

t.setTimeout(240_000)

const ROUNDS = 3
const CLIENTS = 8
const BOOKS = 20
/**
 * Each client's pause after an answer: about 4,000 requests over the nine restarts, a load that
 * leaves the machine to the other files and still crosses every restart many times.
 */
const PAUSE_MS = 100

t.test('restarting each of three instances in turn, three times over, under load, loses no request', { skip: NEEDS_DIRECT_SERVER || needsPrograms('haproxy', 'pgbouncer') }, async (t) => {
  const dbUrl = await createDatabase(t)
  // Shorter than the examples' 3 s, for nine restarts in CI, and still above HAProxy's 1.25 s
  const cluster = await startCluster({ dbUrl, env: { ...testEnv(dbUrl), LOG_LEVEL: 'warn', SHUTDOWN_DELAY_MS: '2000' } })
  t.teardown(() => cluster.stop())

  const token = await fetch(`${cluster.url}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: testEnv(dbUrl).AUTH_USERNAME, password: testEnv(dbUrl).AUTH_PASSWORD })
  }).then(async (response) => ((await response.json()) as { data: { token: string } }).data.token)
  const db = await pgClient(t, dbUrl)
  const { rows } = await db.query<{ id: number }>(`INSERT INTO books (title, author, year)
    SELECT 'Seed ' || i, 'Seeder', 1900 + i FROM generate_series(1, $1::int) AS i RETURNING id::int`, [BOOKS])

  const feed = new FeedClient(cluster.url, token)
  t.teardown(() => feed.stop())
  await feed.follow()
  await feed.waitFor('the seed books\' creates', () => feed.changes().length === 0 && feed.retries.length > 0)
  const load = startMixedLoad({ url: cluster.url, token, clients: CLIENTS, ids: rows.map(({ id }) => id), prefix: 'rolling', pauseMs: PAUSE_MS })
  const windows: Array<{ from: number, to: number }> = []
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      for (const instance of cluster.instances) {
        const from = performance.now()
        const restart = await cluster.restart(instance.index)
        windows.push({ from, to: performance.now() })
        t.strictSame(restart.exit, { code: 0, signal: null }, `round ${round}, ${instance.name}: exit 0`)
        // What makes the restart lossless: HAProxy has taken the instance out before the
        // instance stops accepting, which happens SHUTDOWN_DELAY_MS after the signal
        t.ok(restart.markedDownAfter !== null && restart.markedDownAfter < cluster.shutdownDelayMs,
          `round ${round}, ${instance.name}: out of rotation ${restart.markedDownAfter} ms after SIGTERM, ` +
          `before the ${cluster.shutdownDelayMs} ms delay was over (exit after ${restart.exitedAfter} ms, back after ${restart.backAfter} ms)`)
      }
    }
    // The last instance restarted takes requests again
    await new Promise((resolve) => setTimeout(resolve, 1000))
  } finally {
    await load.stop()
  }

  const { outcomes } = load
  t.comment(`${outcomes.length} requests: ${summary(outcomes)}`)
  const unexpected = outcomes.filter((outcome) => outcome.status !== EXPECTED_STATUS[outcome.kind])
  t.strictSame(unexpected.slice(0, 5), [], 'every request answered as expected: no 5xx, no reset, no timeout')
  for (const [i, { from, to }] of windows.entries()) {
    const during = outcomes.filter((outcome) => outcome.sentAt > from && outcome.endedAt < to).length
    if (during === 0) t.fail(`no request was answered during restart ${i + 1}`)
  }
  t.pass(`requests were answered during each of the ${windows.length} restarts`)

  const acknowledged = outcomes.filter((outcome) => outcome.kind === 'create' && outcome.status === 201).map((outcome) => outcome.title!)
  const stored = await db.query<{ title: string, copies: number }>(
    "SELECT title, count(*)::int AS copies FROM books WHERE title LIKE 'rolling-%' GROUP BY title")
  const copies = new Map(stored.rows.map(({ title, copies }) => [title, copies]))
  t.ok(acknowledged.length > 0, `${acknowledged.length} creates acknowledged`)
  t.strictSame(acknowledged.filter((title) => copies.get(title) !== 1), [], 'every acknowledged create stored exactly once')
  t.equal(copies.size, acknowledged.length, 'no other create stored')

  // Every acknowledged write in the feed once: the creates by their titles, the updates by count
  // (each changes a seed book, and none failed)
  const updates = outcomes.filter((outcome) => outcome.kind === 'update' && outcome.status === 200).length
  const fed = (kind: string) => feed.changes().filter((change) => change.kind === kind)
  await feed.waitFor('every acknowledged write', () => fed('created').length >= acknowledged.length && fed('updated').length >= updates, 10_000)
  await new Promise((resolve) => setTimeout(resolve, 1000))
  feed.stop()
  t.ok(feed.ends >= ROUNDS, `the feed was ended by the restarts and resumed ${feed.reconnections} times`)
  t.equal(new Set(feed.changes().map((change) => change.id)).size, feed.changes().length, 'no change twice')
  t.strictSame(fed('created').map((change) => change.book.title).sort(), [...acknowledged].sort(), 'every acknowledged create in the feed, once, and no other')
  t.equal(fed('updated').length, updates, `every acknowledged update in the feed once (${updates})`)
  t.equal(feed.events.filter((event) => event.event === 'reset').length, 0, 'never a reset')
})

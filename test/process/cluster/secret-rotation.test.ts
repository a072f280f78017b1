/**
 * Rotating the signing secret (docs/operations.md, Rotating the signing secret): two instances
 * behind the example HAProxy, through PgBouncer (tools/cluster.ts), go through the three rolling
 * restarts of a rotation from OLD to NEW while a client logs in, walks pages and creates books,
 * and a feed of changes follows, both through HAProxy. Each keeps using what the service gave it
 * (a token for TOKEN_KEPT_MS, as a real client keeps one for up to its 15 minutes; the cursor of
 * the page before; the feed's last id) and never gets a 400 or a 401. What was made with OLD is
 * accepted until the third restart, and refused after it: the token 401, the cursor 400, the
 * feed id 400, after which a feed without an id starts again.
 */
import { Agent } from 'node:http'
import t from 'tap'
import { startCluster } from '../../../tools/cluster.js'
import { PASSWORD, USERNAME, testEnv } from '../../helper.js'
import { createDatabase, NEEDS_DIRECT_SERVER, pgClient } from '../../helpers/database.js'
import { FeedClient } from '../../helpers/feed.js'
import { sendRequest, type Exchange } from '../../helpers/keep-alive-request.js'
import { needsPrograms } from '../../helpers/programs.js'
import { sleep, waitUntil } from '../../helpers/wait.js'

t.setTimeout(180_000)

const OLD = 'the-old-secret-of-the-rotation-test-32-bytes-at-least'
const NEW = 'the-new-secret-of-the-rotation-test-32-bytes-at-least'
/** The three rolling restarts: NEW accepted; NEW signs, OLD accepted; NEW alone. */
const STEPS = [
  { SECRET_TOKEN: OLD, SECRET_TOKEN_ACCEPTED: NEW },
  { SECRET_TOKEN: NEW, SECRET_TOKEN_ACCEPTED: OLD },
  { SECRET_TOKEN: NEW, SECRET_TOKEN_ACCEPTED: '' }
]
const BOOKS = 24
const PAGE = '/books?limit=4&sort=title'
/** How long the client keeps a token before it logs in again: its "in use", short for the test. */
const TOKEN_KEPT_MS = 1000
/** The client's pause after each answer. */
const PAUSE_MS = 40

interface Answer extends Exchange {
  what: 'login' | 'page' | 'create'
  title?: string
}

/** A client that logs in, walks the pages sorted by title, following `next`, and creates a book every third page. */
function startClient (url: string) {
  const target = new URL(url)
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  const answers: Answer[] = []
  const state = { stopping: false, token: '', loggedInAt: 0, pages: 0, cursor: '' }
  const send = async (what: Answer['what'], options: Parameters<typeof sendRequest>[2], title?: string) => {
    const exchange = await sendRequest(target, agent, options)
    answers.push({ what, ...exchange, ...(title === undefined ? {} : { title }) })
    return exchange
  }
  const login = async () => {
    const answer = await send('login', { method: 'POST', path: '/token', body: { username: USERNAME, password: PASSWORD } })
    if (answer.status === 200) state.token = JSON.parse(answer.body!).data.token
    state.loggedInAt = performance.now()
  }
  const running = (async () => {
    let next: string | null = null
    for (let n = 0; !state.stopping; n++) {
      if (performance.now() - state.loggedInAt > TOKEN_KEPT_MS) await login()
      const page = await send('page', { method: 'GET', path: next ?? PAGE, token: state.token })
      next = /^<([^>]+)>; rel="next"$/.exec(String(page.headers?.link ?? ''))?.[1] ?? null
      if (next !== null) state.cursor = next
      state.pages++
      if (n % 3 === 2) {
        const title = `rotation-${n}`
        await send('create', { method: 'POST', path: '/book', token: state.token, body: { title, author: 'Rotation', year: 2000 } }, title)
      }
      await sleep(PAUSE_MS)
    }
    agent.destroy()
  })()
  return { answers, state, stop: async () => { state.stopping = true; await running } }
}

t.test('a rotation in three rolling restarts: no client that keeps using what it was given gets a 400 or a 401', { skip: NEEDS_DIRECT_SERVER || needsPrograms('haproxy', 'pgbouncer') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const db = await pgClient(t, dbUrl)
  // 2 s, as test/process/cluster/rolling-restart.test.ts: above HAProxy's 1.25 s to take an instance out
  const cluster = await startCluster({
    dbUrl, instances: 2, env: { ...testEnv(dbUrl), SECRET_TOKEN: OLD, LOG_LEVEL: 'warn', SHUTDOWN_DELAY_MS: '2000' }
  })
  t.teardown(() => cluster.stop())
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'Seed ' || i, 'Seeder', 1900 + i FROM generate_series(1, $1::int) AS i`, [BOOKS])

  const client = startClient(cluster.url)
  t.teardown(() => client.stop())
  await waitUntil(() => client.state.cursor !== '', 10_000, 'a first walk under way')
  // What OLD made, kept aside to be sent again after each restart
  const made = { token: client.state.token, cursor: client.state.cursor }
  const feed = new FeedClient(cluster.url, made.token)
  t.teardown(() => feed.stop())
  await feed.follow(100)
  await feed.waitFor('its starting id', () => feed.lastEventId !== undefined)
  const oldFeedId = feed.lastEventId!
  // The feed's token is renewed as the client's is: a token is what a client logs in again for
  const renewing = setInterval(() => { feed.token = client.state.token }, 100)
  t.teardown(() => clearInterval(renewing))

  /** What the instances answer to what OLD made: the token, the cursor, the feed id. */
  const madeWithOld = async () => {
    const agent = new Agent({ keepAlive: false })
    const target = new URL(cluster.url)
    const answers: number[] = []
    // Twice each: HAProxy's round robin may send them to either instance
    for (let i = 0; i < 2; i++) {
      answers.push((await sendRequest(target, agent, { method: 'GET', path: '/books?limit=1', token: made.token })).status!)
      answers.push((await sendRequest(target, agent, { method: 'GET', path: made.cursor, token: client.state.token })).status!)
      const probe = new FeedClient(cluster.url, client.state.token)
      answers.push((await probe.connect(oldFeedId)).status)
      probe.close()
    }
    return answers
  }

  for (const [i, step] of STEPS.entries()) {
    if (i === 2) {
      // Before OLD is dropped: nothing OLD made is in use any more. The client has logged in,
      // walked a page and received a feed event since every instance signs with NEW
      const since = performance.now()
      const { pages } = client.state
      const events = feed.events.length
      await waitUntil(() => client.state.loggedInAt > since && client.state.pages > pages + 1 && feed.events.length > events, 10_000, 'OLD out of use')
    }
    for (const instance of cluster.instances) {
      const restart = await cluster.restart(instance.index, step)
      t.strictSame(restart.exit, { code: 0, signal: null }, `step ${i + 1}, ${instance.name}: restarted (exit after ${restart.exitedAfter} ms, back after ${restart.backAfter} ms)`)
    }
    // Some requests and a feed event across every step
    const { pages } = client.state
    const events = feed.events.length
    await waitUntil(() => client.state.pages > pages + 2 && feed.events.length > events, 10_000, `the client and the feed after step ${i + 1}`)
    const answers = await madeWithOld()
    if (i < 2) t.strictSame(answers, [200, 200, 200, 200, 200, 200], `after step ${i + 1}: OLD's token, cursor and feed id are accepted`)
    else t.strictSame(answers, [401, 400, 400, 401, 400, 400], 'after step 3: OLD\'s token is 401, its cursor and its feed id 400')
  }
  await client.stop()
  const { answers } = client
  const created = answers.filter((answer) => answer.what === 'create' && answer.status === 201).map((answer) => answer.title!)
  const fed = () => feed.changes().filter((change) => change.kind === 'created').map((change) => change.book.title!)
  await feed.waitFor('every acknowledged create', () => created.every((title) => fed().includes(title)))
  feed.stop()

  const count = (what: Answer['what']) => answers.filter((answer) => answer.what === what).length
  t.comment(`${answers.length} requests: ${count('login')} logins, ${count('page')} pages, ${count('create')} creates; the feed connected ${feed.statuses.length} times`)
  const expected = { login: 200, page: 200, create: 201 }
  t.strictSame(answers.filter((answer) => answer.status !== expected[answer.what]).slice(0, 5), [], 'every request answered as expected: never a 400 or a 401, nor anything else')
  t.ok(feed.statuses.length > STEPS.length, `the feed was ended by the restarts and resumed ${feed.statuses.length - 1} times`)
  t.strictSame(feed.statuses.filter((status) => status !== 200), [], 'the feed resumed each time: never a 400 or a 401')
  t.equal(feed.events.filter((event) => event.event === 'reset').length, 0, 'never a reset')
  t.ok(created.length > 0, `${created.length} creates acknowledged`)
  t.strictSame([...fed()].sort(), [...created].sort(), 'the feed received every acknowledged create once, and nothing else')

  const restarted = new FeedClient(cluster.url, client.state.token)
  t.teardown(() => restarted.close())
  t.equal((await restarted.connect(undefined)).status, 200, 'after the 400, a feed without an id starts again')
})

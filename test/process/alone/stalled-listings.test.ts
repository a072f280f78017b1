/**
 * Listings whose clients stop reading, against the real process: 1,000 of them over 200,000
 * books hold at most two pages each (the process stays under 400 MB), take no pooled connection
 * while they wait (point reads keep a p99 under 100 ms), and leave nothing behind when they go.
 * In test/process/alone/, which `npm run test:process` runs with no other test file beside it:
 * the p99 bound is about the service's latency, which other files' CPU on this machine would
 * blur. The send timeout and clients that leave: test/process/listing-clients.test.ts.
 */
import { Agent } from 'node:http'
import type { Socket } from 'node:net'
import t from 'tap'
import { testEnv } from '../../helper.js'
import { createDatabase, NEEDS_SERVER, pgClient } from '../../helpers/database.js'
import { type Exchange, sendRequest } from '../../helpers/keep-alive-request.js'
import { residentMiB, startService } from '../../helpers/service.js'
import { quantile } from '../../helpers/prober.js'
import { stalledListing } from '../../helpers/stalled-listing.js'
import { sleep, waitUntil } from '../../helpers/wait.js'

t.setTimeout(300_000)

const BOOKS = 200_000
const LISTINGS = 1000
/** The bounds of the issue: resident memory while they stall, and the point reads' p99. */
const RSS_BOUND_MIB = 400
const P99_BOUND_MS = 100
/**
 * "Back to idle": what the listings held is garbage once they are gone, and V8 gives it back to
 * the system when it next collects its old generation, which its memory reducer does once the
 * process allocates little (measured here: 10 to 50 s after the listings and the point reads
 * stopped, RSS then below the idle figure). Nothing forces a collection; the test waits for it.
 */
const IDLE_MARGIN_MIB = 50
const SETTLE_MS = 90_000

t.test(`${LISTINGS} listings that stop reading hold little memory and no connection`, { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  // All the listings come from this one client address: the bound per address would answer
  // most of them 429 (test/process/alone/connection-flood.test.ts) instead of letting them stall
  const service = await startService(t, { ...testEnv(dbUrl), MAX_CONNECTIONS_PER_ADDRESS: String(2 * LISTINGS) })
  const pid = service.serverPid
  const token = await service.token()
  const db = await pgClient(t, dbUrl)
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'Title ' || g, 'Author ' || g, g % 3000 FROM generate_series(1, $1::int) g`, [BOOKS])
  await db.query('VACUUM (ANALYZE) books')
  const activeQueries = async () => (await db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'bookkeeping' AND state <> 'idle'")).rows[0]!.n

  // Warm-up: a whole listing and some point reads, so the idle figure includes what the first
  // requests allocate for good (compiled code, pooled connections)
  const whole = await service.request('GET', '/books', { token, ms: 60_000 })
  t.equal((whole.body as { data: unknown[] }).data.length, BOOKS, 'a whole listing reads every book')
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const url = new URL(service.url)
  const pointRead = () => sendRequest(url, agent, { method: 'GET', path: `/book/${1 + Math.floor(Math.random() * BOOKS)}`, token })
  for (let i = 0; i < 200; i++) await pointRead()
  await sleep(2000)
  const idle = residentMiB(pid)
  t.comment(`idle RSS ${idle.toFixed(1)} MiB`)

  // Point reads every few ms and RSS samples, all along, and on while the memory settles
  const reads: Exchange[] = []
  const samples: number[] = []
  const sampling = { on: true }
  const reading = (async () => {
    while (sampling.on) {
      reads.push(await pointRead())
      await sleep(5)
    }
  })()
  const sampler = setInterval(() => samples.push(residentMiB(pid)), 50)
  t.teardown(() => clearInterval(sampler))

  const started = performance.now()
  const listings: Array<{ socket: Socket, head: string }> = []
  t.teardown(() => listings.forEach(({ socket }) => socket.destroy()))
  // In groups, so the listen backlog never overflows into SYN retries
  for (let i = 0; i < LISTINGS; i += 100) {
    listings.push(...await Promise.all(Array.from({ length: Math.min(100, LISTINGS - i) }, () => stalledListing(service, token))))
  }
  t.ok(listings.every(({ head }) => head.startsWith('HTTP/1.1 200 ')), `all ${LISTINGS} listings answered 200`)
  // Stalled: no query runs for a while (each page is read while the previous one is written,
  // so nothing reads any more once every client's buffers are full)
  await waitUntil(async () => await activeQueries() === 0 && (await sleep(1000), await activeQueries() === 0),
    120_000, 'no query running for the stalled listings', 200)
  const stalledAt = performance.now()
  const stalledAfter = stalledAt - started
  // While they stall
  await sleep(3000)
  const stalled = residentMiB(pid)
  clearInterval(sampler)
  const stallEnded = performance.now()

  const peak = Math.max(...samples)
  const whileThere = reads.filter(({ sentAt }) => sentAt < stallEnded)
  const latencies = whileThere.filter(({ status }) => status === 200).map(({ sentAt, endedAt }) => endedAt - sentAt).sort((a, b) => a - b)
  const failed = whileThere.filter(({ status }) => status !== 200)
  const p99 = quantile(latencies, 0.99)
  // Apart: while the listings fill the kernel's buffers, and once they stall
  const phase = (from: number, to: number) => {
    const sorted = reads.filter((r) => r.sentAt >= from && r.sentAt < to && r.status === 200).map((r) => r.endedAt - r.sentAt).sort((a, b) => a - b)
    return `${sorted.length} reads, p50 ${quantile(sorted, 0.5).toFixed(1)} ms, p99 ${quantile(sorted, 0.99).toFixed(1)} ms`
  }
  t.comment(`filling: ${phase(started, stalledAt)}; stalled: ${phase(stalledAt, stallEnded)}`)
  t.comment(`${LISTINGS} listings stalled after ${(stalledAfter / 1000).toFixed(1)} s; RSS peak ${peak.toFixed(1)} MiB, ` +
    `${stalled.toFixed(1)} MiB while stalled (idle ${idle.toFixed(1)} MiB)`)
  t.comment(`${whileThere.length} point reads meanwhile: p50 ${quantile(latencies, 0.5).toFixed(1)} ms, ` +
    `p99 ${p99.toFixed(1)} ms, max ${(latencies.at(-1) ?? NaN).toFixed(1)} ms, ${failed.length} failed`)
  t.ok(peak < RSS_BOUND_MIB, `the process stays under ${RSS_BOUND_MIB} MiB (peak ${peak.toFixed(1)})`)
  t.strictSame(failed.slice(0, 3), [], 'no point read failed')
  t.ok(p99 < P99_BOUND_MS, `point reads keep a p99 under ${P99_BOUND_MS} ms (${p99.toFixed(1)})`)

  // Gone: nothing is read for them any more, and the memory returns to its idle level
  for (const { socket } of listings) socket.destroy()
  await sleep(1000)
  const { rows: pageQueries } = await db.query(`SELECT query FROM pg_stat_activity WHERE datname = current_database()
    AND application_name = 'bookkeeping' AND state <> 'idle' AND query LIKE 'SELECT count(*)::int4 AS count%'`)
  t.equal(pageQueries.length, 0, 'a second after the clients left, no page query runs for them')
  // The point reads stop too: while a process keeps allocating, V8 does not reduce its heap
  sampling.on = false
  await reading
  let settled = Infinity
  const settleMs = await waitUntil(() => (settled = residentMiB(pid)) < idle + IDLE_MARGIN_MIB, SETTLE_MS,
    `RSS back within ${IDLE_MARGIN_MIB} MiB of idle (${idle.toFixed(1)} MiB)`, 250).catch(() => NaN)
  t.comment(`after the listings left: RSS ${settled.toFixed(1)} MiB (idle ${idle.toFixed(1)}), ` +
    (Number.isNaN(settleMs) ? `not within ${IDLE_MARGIN_MIB} MiB of idle after ${SETTLE_MS / 1000} s` : `within ${IDLE_MARGIN_MIB} MiB of idle after ${((settleMs + 1000) / 1000).toFixed(1)} s`))
  t.ok(settled < idle + IDLE_MARGIN_MIB, `the memory returns to its idle level (${settled.toFixed(1)} MiB, idle ${idle.toFixed(1)} MiB)`)
  const after = await service.request('GET', '/book/1', { token })
  t.equal(after.status, 200, 'the service goes on')
  t.equal(service.exit, null, 'the service is still running')
})

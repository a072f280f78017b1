/**
 * Listings whose clients stop reading, against the real process: 1,000 of them (half of them CSV
 * exports) over 200,000 books hold at most two pages each (the process stays under 400 MB) and
 * take no pooled connection while they wait (point reads keep a p99 under 100 ms); once they go,
 * nothing is read for them any more. In test/process/alone/, which `npm run test:process` runs
 * with no other test file beside it: the p99 bound is about the service's latency, which other
 * files' CPU on this machine would blur. That their memory goes back once they are gone:
 * test/process/backlogged-listings.test.ts; the send timeout and clients that leave:
 * test/process/listing-clients.test.ts.
 */
import t from 'tap'
import { NEEDS_SERVER } from '../../helpers/database.js'
import type { Exchange } from '../../helpers/keep-alive-request.js'
import { residentMiB } from '../../helpers/service.js'
import { quantile } from '../../helpers/prober.js'
import { LISTINGS, serviceWithBooks, stallListings } from '../../helpers/stalled-listing.js'
import { sleep } from '../../helpers/wait.js'

t.setTimeout(300_000)

/** The bounds on stalled listings: resident memory while they stall, and the point reads' p99 (docs/performance.md, Clients that stop reading). */
const RSS_BOUND_MIB = 400
const P99_BOUND_MS = 100

t.test(`${LISTINGS} listings that stop reading hold little memory and no connection`, { skip: NEEDS_SERVER }, async (t) => {
  const { service, token, db, activeQueries, pointRead, idleMiB: idle } = await serviceWithBooks(t)
  const pid = service.serverPid

  // Point reads every few ms and RSS samples, all along
  const reads: Exchange[] = []
  const samples: number[] = []
  const sampling = { on: true }
  const reading = (async () => {
    while (sampling.on) {
      reads.push(await pointRead())
      await sleep(5)
    }
  })()
  t.teardown(async () => {
    sampling.on = false
    await reading
  })
  const sampler = setInterval(() => samples.push(residentMiB(pid)), 50)
  t.teardown(() => clearInterval(sampler))

  const started = performance.now()
  const listings = await stallListings(t, service, token, activeQueries)
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

  // Gone: nothing is read for them any more
  for (const { socket } of listings) socket.destroy()
  await sleep(1000)
  const { rows: pageQueries } = await db.query(`SELECT query FROM pg_stat_activity WHERE datname = current_database()
    AND application_name = 'bookkeeping' AND state <> 'idle'
    AND (query LIKE 'SELECT count(*)::int4 AS count%' OR query LIKE '%COPY (SELECT%')`)
  t.equal(pageQueries.length, 0, 'a second after the clients left, no page query runs for them')
  const after = await service.request('GET', '/book/1', { token })
  t.equal(after.status, 200, 'the service goes on')
  t.equal(service.exit, null, 'the service is still running')
})

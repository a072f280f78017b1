/**
 * Connections that pipeline listings and read nothing, against the real process: they hold
 * little memory, since each has one request in hand at a time, and nothing is read for them
 * while their clients read nothing; a SIGTERM under that load begins the shutdown at once, and
 * the drain cuts the answers nobody reads after DRAIN_SEND_TIMEOUT_MS, logged. In
 * test/process/alone/ (nothing runs beside it): its bounds are times of the service's timers and
 * its log, which other files' CPU on the same machine would blur.
 */
import t from 'tap'
import { NEEDS_SERVER, serviceStoppedReading } from '../../helpers/database.js'
import { listing, pipeline, serviceWithBooks } from '../../helpers/pipelined-requests.js'
import { residentMiB } from '../../helpers/service.js'
import { sleep, waitUntil } from '../../helpers/wait.js'
import { DRAIN_SEND_TIMEOUT_MS } from '../../../src/connections.js'

t.test('connections that pipeline listings and read nothing hold little memory; SIGTERM closes at once', { skip: NEEDS_SERVER }, async (t) => {
  const connectionCount = 8
  // Long enough that the first listing on each connection fills the kernel's buffers and stalls:
  // about 11 MB, beyond a socket's send buffer and the receive buffer of a peer that has read
  // little, so that the listing cannot end after the client pauses
  const { dbUrl, service, token, db } = await serviceWithBooks(t, 300_000)
  const pid = service.serverPid
  // Warm-up, so that the baseline holds what the first listings allocate for good
  await service.request('GET', '/books', { token, ms: 30_000 })
  const idle = residentMiB(pid)

  // About 1 MB of listings on each connection: without the bound, the service would read each
  // of them from the database and hold it in memory
  const requests = listing(token).repeat(Math.ceil(1_000_000 / listing(token).length))
  const connections = await Promise.all(Array.from({ length: connectionCount }, () => pipeline(t, service, requests)))
  // Each client stops reading at its answer's first bytes. A client that read on while it waited
  // for the others would let the kernel grow its receive buffer (up to tcp_rmem's maximum, 32 MiB
  // on some machines) until whole listings fit in it, and leave no answer in progress to cut.
  for (const connection of connections) connection.once('data', () => connection.pause())
  let peak = idle
  const sampler = setInterval(() => { peak = Math.max(peak, residentMiB(pid)) }, 50)
  t.teardown(() => clearInterval(sampler))
  await waitUntil(() => connections.every((connection) => connection.received().length > 0), 30_000, 'every connection\'s first answer to begin')
  await sleep(3000)
  // The first listing of each connection may still be filling its buffers on a busy machine
  const stopped = await waitUntil(() => serviceStoppedReading(db, dbUrl), 20_000, 'no query to run while the clients read nothing')
  clearInterval(sampler)
  t.comment(`RSS ${idle.toFixed(1)} MiB idle, peak ${peak.toFixed(1)} MiB with ${connectionCount} connections pipelining listings`)
  t.ok(peak - idle < 80, `the process grew by ${(peak - idle).toFixed(1)} MiB (under 80)`)
  t.pass(`and reads nothing for them while their clients read nothing (seen ${stopped} ms after the 3 s)`)

  const signalled = performance.now()
  service.child.kill('SIGTERM')
  await service.waitFor(() => service.stdout.includes('shutdown begins'), 2000, 'the shutdown to begin')
  t.ok(performance.now() - signalled < 1000, `the shutdown begins within a second (${(performance.now() - signalled).toFixed(0)} ms)`)
  const exit = await service.waitForExit(DRAIN_SEND_TIMEOUT_MS + 6000)
  t.equal(exit.code, 0, 'and the process exits 0, within its grace')
  // Timed by the service's own log, from the shutdown's start to the last answer cut off, each
  // logged as its socket is destroyed: a busy machine delays the signal's delivery and the exit
  // after it far more than the service's timers. Node looks twice before it cuts (1 to 2 s,
  // src/connections.ts); the bound leaves a busy machine's timers 3 s more, and still
  // tells the drain's cut from what cut these answers without it: the send timeout (at least
  // 10 s) or the grace's forced exit (9 s, with exit code 1)
  const lines = service.logLines()
  const began = lines.find(({ msg }) => msg.startsWith('shutdown begins'))?.time ?? NaN
  const cuts = lines.filter(({ msg, sendTimeoutMs }) => msg.startsWith('response cut off') && sendTimeoutMs === DRAIN_SEND_TIMEOUT_MS)
  // Most often all eight; on a starved machine a first listing may have been wholly in the
  // kernel's buffers, or not begun, when the shutdown came
  t.ok(cuts.length >= 1 && cuts.length <= connectionCount, `the answers in progress (${cuts.length} of ${connectionCount} connections) are cut off by the drain's timeout`)
  const cutAfter = Math.max(...cuts.map(({ time }) => time)) - began
  const bound = 2 * DRAIN_SEND_TIMEOUT_MS + 3000
  t.ok(cutAfter < bound, `the answers nobody reads are cut ${cutAfter} ms after the shutdown began (within ${bound / 1000} s)`)
  t.match(service.stdout, `"connections":${cuts.length},"drainSendTimeoutMs":${DRAIN_SEND_TIMEOUT_MS},"msg":"connections cut off while draining`, 'the cut is logged, with their number')
})

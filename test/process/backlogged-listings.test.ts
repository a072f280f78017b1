/**
 * What 1,000 listings whose clients stopped reading held, the process gives back once they are
 * gone: its resident memory falls back towards its idle level. Beside other test files, unlike their
 * bounds while they stall (test/process/alone/stalled-listings.test.ts): V8 gives the memory
 * back later on a busy machine, but a wait blurs nothing, and alone the wait would leave the
 * machine mostly idle. Named to start early in the tier, being long (docs/performance.md,
 * Clients that stop reading).
 */
import t from 'tap'
import { NEEDS_SERVER } from '../helpers/database.js'
import { residentMiB } from '../helpers/service.js'
import { LISTINGS, serviceWithBooks, stallListings } from '../helpers/stalled-listing.js'
import { waitUntil } from '../helpers/wait.js'

t.setTimeout(300_000)

/**
 * "Back to idle": what the listings held is garbage once they are gone, and V8 gives it back to
 * the system when it next collects its old generation, which its memory reducer does once the
 * process allocates little, which can be a minute or more after the listings stopped on a busy
 * machine (docs/performance.md, Clients that stop reading). Nothing forces a collection; the
 * test waits for it, with room of twice that for a loaded machine. How much the listings hold
 * in the process depends on how much the kernel's socket buffers took of their answers, which
 * varies with the machine's load: the test asks for at least HELD_MIB, and for at least half of
 * what they held to be given back, however much that was.
 */
const HELD_MIB = 20
const SETTLE_MS = 150_000

t.test(`the memory ${LISTINGS} stalled listings held goes back once they are gone`, { skip: NEEDS_SERVER }, async (t) => {
  const { service, token, activeQueries, idleMiB: idle } = await serviceWithBooks(t)
  const pid = service.serverPid
  const listings = await stallListings(t, service, token, activeQueries)
  const stalled = residentMiB(pid)
  t.ok(stalled > idle + HELD_MIB, `precondition: they hold memory (${stalled.toFixed(1)} MiB, idle ${idle.toFixed(1)} MiB)`)
  const margin = (stalled - idle) / 2

  for (const { socket } of listings) socket.destroy()
  let settled = Infinity
  const settleMs = await waitUntil(() => (settled = residentMiB(pid)) < idle + margin, SETTLE_MS,
    `RSS back within ${margin.toFixed(1)} MiB of idle (${idle.toFixed(1)} MiB)`, 250).catch(() => NaN)
  t.comment(`after the listings left: RSS ${settled.toFixed(1)} MiB (idle ${idle.toFixed(1)}), ` +
    (Number.isNaN(settleMs) ? `not within ${margin.toFixed(1)} MiB of idle after ${SETTLE_MS / 1000} s` : `within ${margin.toFixed(1)} MiB of idle after ${(settleMs / 1000).toFixed(1)} s`))
  t.ok(settled < idle + margin, `at least half of what they held is given back (${settled.toFixed(1)} MiB, idle ${idle.toFixed(1)} MiB)`)
  const after = await service.request('GET', '/book/1', { token })
  t.equal(after.status, 200, 'the service goes on')
})

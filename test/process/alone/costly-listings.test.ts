/**
 * One client address sending listings that no index bounds from 20 connections, against the
 * real process over real sockets (docs/operations.md, The cost of a listing): each of its
 * listings runs within LISTING_BUDGET_MS and the address holds at most half of the listings'
 * connections, so another address's listings and point reads keep their latency throughout. In
 * test/process/alone/ (nothing runs beside it): the bounds are the service's latency for one
 * client while another loads it, which other files' CPU on the same machine would blur. What a
 * listing over its budget answers: test/app/listing-budget.test.ts.
 */
import { Agent } from 'node:http'
import t from 'tap'
import { testEnv } from '../../helper.js'
import { COSTLY_LISTINGS, seedCostlyBooks } from '../../helpers/costly-listings.js'
import { NEEDS_SERVER, createDatabaseWithBooks, pgClient } from '../../helpers/database.js'
import { sendRequest } from '../../helpers/keep-alive-request.js'
import { quantile, startProber } from '../../helpers/prober.js'
import { startService } from '../../helpers/service.js'
import { sleep } from '../../helpers/wait.js'

/** Enough books that each probe costs a backend hundreds of milliseconds, as a million did seconds. */
const BOOKS = 100_000
/**
 * The listing budget, far under what a probe costs on a fast machine, so that the attacker's
 * listings are cut on any machine, as the default budget cuts them on a million books.
 */
const LISTING_BUDGET_MS = '100'
const CONNECTIONS = 20
/** About 600 probes of each kind, so that their p99 is not merely the third slowest of 300. */
const ATTACK_MS = 20_000

t.test('20 connections from one address sending costly listings: another address\'s listings keep a p99 under 100 ms, its point reads under 50 ms',
  { skip: NEEDS_SERVER && 'PGlite is one session: every statement waits behind the one it runs, and it cannot cancel one' }, async (t) => {
    const dbUrl = await createDatabaseWithBooks(t, 0)
    const db = await pgClient(t, dbUrl, { queryTimeoutMs: 120_000 })
    await seedCostlyBooks(db, BOOKS)
    const service = await startService(t, { ...testEnv(dbUrl), LISTING_BUDGET_MS })
    await db.query('VACUUM (ANALYZE) books')
    const token = await service.token()
    const url = new URL(service.url)

    // The attacker: 20 keep-alive connections from 127.0.0.2, each sending the probe's kinds in turn
    const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS, localAddress: '127.0.0.2' })
    t.teardown(() => agent.destroy())
    const statuses = new Map<string, number>()
    const attack = { on: true }
    const attacker = Array.from({ length: CONNECTIONS }, async (_, connection) => {
      for (let i = connection; attack.on; i++) {
        const { status, error } = await sendRequest(url, agent, { method: 'GET', path: COSTLY_LISTINGS[i % COSTLY_LISTINGS.length]!, token })
        const outcome = String(status ?? error)
        statuses.set(outcome, (statuses.get(outcome) ?? 0) + 1)
      }
    })
    // Until each of the attacker's connections holds a listing or waits for one
    await sleep(1000)

    // Another client, from 127.0.0.3, lists and reads meanwhile
    const headers = { authorization: token }
    const listings = startProber(`${service.url}/books?limit=10&sort=-year`, { headers, localAddress: '127.0.0.3', pauseMs: 20 })
    const reads = startProber(`${service.url}/book/${1 + Math.floor(BOOKS / 2)}`, { headers, localAddress: '127.0.0.3', pauseMs: 20 })
    await sleep(ATTACK_MS)
    const listed = await listings.stop()
    const read = await reads.stop()
    attack.on = false
    await Promise.all(attacker)

    const outcomes = Object.fromEntries(statuses)
    t.comment(`the attacker's answers: ${JSON.stringify(outcomes)}`)
    t.ok(Object.keys(outcomes).every((status) => status === '200' || status === '422'), 'the attacker gets 200 or 422 Listing too costly, never a 5xx')
    t.ok((outcomes['422'] ?? 0) > 0, 'its listings over the budget are refused')
    for (const [name, probes, bound] of [['GET /books?limit=10&sort=-year', listed, 100], ['GET /book/<id>', read, 50]] as const) {
      const p99 = quantile(probes.latencies, 0.99)
      t.comment(`${name} from 127.0.0.3: ${probes.latencies.length} requests, median ${quantile(probes.latencies, 0.5).toFixed(1)} ms, ` +
        `p99 ${p99.toFixed(1)} ms, worst ${quantile(probes.latencies, 1).toFixed(1)} ms`)
      t.ok(probes.latencies.length >= 50, `${name}: the other address kept asking`)
      t.strictSame(probes.unexpected, [], `${name}: answered 200 every time`)
      t.ok(p99 < bound, `${name}: p99 ${p99.toFixed(1)} ms, under ${bound} ms`)
    }
    const errors = service.stdout.split('\n').filter((line) => /"level":(50|60)/.test(line))
    t.strictSame(errors, [], 'nothing logged as an error')
  })

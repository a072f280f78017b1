/**
 * The primary killed under load in the high-availability topology (tools/topology/ha.ts: Patroni,
 * etcd, synchronous replication, HAProxy by GET /primary): clients create books with
 * Idempotency-Keys and send every failed or unanswered create again with its key. While the
 * standby takes over, the service answers 503 within its 5 s bound (never 500), serves again
 * without a restart within seconds of the new primary accepting writes, and afterwards every
 * acknowledged create is stored exactly once. How long it was unavailable is reported. A feed of
 * changes follows throughout, and a second one opens after the failover with the id the first had
 * received when the primary was killed: each receives every acknowledged create exactly once.
 */
import fs from 'node:fs'
import pg from 'pg'
import t from 'tap'
import { checkTimings, HAPROXY_POSTGRES_CONFIG } from '../../tools/topology/haproxy.js'
import { startHaTopology } from '../../tools/topology/ha.js'
import { testEnv } from '../helper.js'
import { NEEDS_DIRECT_SERVER, pgClient } from '../helpers/database.js'
import { FeedClient } from '../helpers/feed.js'
import { checkRecovery, checkStoredExactlyOnce, startIdempotentCreates } from '../helpers/idempotent-creates.js'
import { startService } from '../helpers/service.js'
import { sleep, waitUntil } from '../helpers/wait.js'
import { needsPrograms, PG_SERVER } from '../helpers/programs.js'

const CLIENTS = 8
const PREFIX = 'failover'
/** Load before the kill, and after the service serves again. */
const BEFORE_MS = 2000
const AFTER_MS = 2000
/** Patroni's ttl (10 s, docs/deploy/patroni.yml) and room for a busy machine. */
const NEW_LEADER_WITHIN_MS = 30_000

/** Resolves with performance.now() once the server at `url` accepts writes (out of recovery). */
function writable (url: string, ms: number): Promise<number> {
  return waitUntil(async () => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 })
    client.on('error', () => {})
    try {
      await client.connect()
      const { rows } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery')
      return !rows[0]!.recovery
    } catch {
      return false
    } finally {
      await client.end().catch(() => {})
    }
  }, ms, `${url} to accept writes`, 50).then(() => performance.now())
}

t.test('the primary killed under load: 503s within the bound, served again within seconds of the promotion, every acknowledged create stored once', { skip: NEEDS_DIRECT_SERVER || needsPrograms('patroni', 'etcd', 'haproxy', PG_SERVER) }, async (t) => {
  const ha = await startHaTopology()
  t.teardown(() => ha.stop())
  const admin = await pgClient(t, ha.url('postgres'))
  await admin.query('CREATE DATABASE bookkeeping')
  const service = await startService(t, testEnv(ha.url('bookkeeping')))
  const token = await service.token()

  const feed = new FeedClient(service.url, token)
  t.teardown(() => feed.stop())
  await feed.follow()
  await feed.waitFor('the start of the feed', () => feed.retries.length > 0)
  let idAtKill: string | undefined
  const load = startIdempotentCreates({ url: service.url, token, clients: CLIENTS, prefix: PREFIX })
  const primary = (await ha.leader())!
  const standby = ha.nodes.find((node) => node !== primary)!
  let killedAt = 0
  let leaderAfter = 0
  let writableAt = 0
  let inRotationAfter = 0
  try {
    await sleep(BEFORE_MS)
    // Only the synchronous standby may be promoted, and only it has every acknowledged commit
    await ha.waitForSyncStandby(standby, 1000)
    const promoted = writable(ha.nodeUrl(standby, 'bookkeeping'), NEW_LEADER_WITHIN_MS)
    const inRotation = ha.haproxy.waitFor(ha.serverName(standby), 'UP', NEW_LEADER_WITHIN_MS)
    killedAt = performance.now()
    idAtKill = feed.lastEventId
    await ha.kill(primary)
    const leader = await ha.waitForLeader({ not: primary, ms: NEW_LEADER_WITHIN_MS })
    t.equal(leader.node, standby, `${standby.name}, the synchronous standby, took over`)
    leaderAfter = leader.ms
    writableAt = await promoted
    inRotationAfter = await inRotation
    await waitUntil(() => load.attempts.some((attempt) => attempt.status === 201 && attempt.sentAt > writableAt), 20_000,
      'a create sent after the promotion to be acknowledged')
    await sleep(AFTER_MS)
  } finally {
    await load.stop()
  }

  const { recovered, failed, slowest } = checkRecovery(t, load,
    { disruption: 'the kill', disruptedAt: killedAt, back: 'the new primary accepted writes', backAt: writableAt })
  t.comment(`after SIGKILL of the primary: ${standby.name} the leader after ${leaderAfter} ms, accepting writes after ` +
    `${Math.round(writableAt - killedAt)} ms, in HAProxy's rotation after ${inRotationAfter} ms (its checks: within ` +
    `${checkTimings(fs.readFileSync(HAPROXY_POSTGRES_CONFIG, 'utf8')).markedUpWithin} ms of the promotion); ` +
    `the service unavailable for ${Math.round(recovered - killedAt)} ms, serving again ${Math.round(recovered - writableAt)} ms ` +
    `after the promotion; the first failure answered ${Math.round(Math.min(...failed.map((attempt) => attempt.endedAt)) - killedAt)} ms after the kill; ` +
    `slowest answer ${slowest} ms`)
  t.equal(service.exit, null, 'the service kept running: no restart')

  await checkStoredExactlyOnce(t, await pgClient(t, ha.nodeUrl(standby, 'bookkeeping')), load, PREFIX)

  // The feeds: the one that followed throughout, and one resumed after the failover from the id
  // the first had received when the primary was killed
  const resumed = new FeedClient(service.url, token)
  t.teardown(() => resumed.stop())
  t.equal((await resumed.connect(idAtKill)).status, 200, 'a feed resumes after the failover with the id received before it')
  const created = (client: FeedClient) => client.changes().filter((change) => change.kind === 'created').map((change) => change.book.title!)
  const acknowledged = load.acknowledged.map(({ title }) => title).sort()
  await feed.waitFor('every acknowledged create', () => created(feed).length >= acknowledged.length, 10_000)
  const afterKill = feed.changes().filter((change) => idAtKill === undefined || change.id > idAtKill).length
  await resumed.waitFor('the creates since the kill', () => resumed.changes().length >= afterKill, 10_000)
  await sleep(1000)
  t.strictSame(created(feed).sort(), acknowledged, `the feed that followed: every acknowledged create once (${acknowledged.length}), no other`)
  t.equal(feed.events.filter((event) => event.event === 'reset').length, 0, 'and no reset')
  t.strictSame(resumed.changes().map((change) => change.id), feed.changes().slice(-afterKill).map((change) => change.id),
    `the resumed feed: the ${afterKill} changes after the id, once each, as the first feed received them`)
})

/**
 * `pg_ctl restart -m fast` of the server under the load of the failover test: clients create
 * books with Idempotency-Keys and send every failed or unanswered create again with its key.
 * The server ends every session and refuses connections while it stops and starts again; the
 * service answers 503 within its 5 s bound (never 500), serves again without a restart within
 * seconds of the server's being back, and every acknowledged create is stored exactly once.
 *
 * On a plain server of the test's own (tools/topology/postgres.ts), not on a Patroni node: Patroni
 * starts a PostgreSQL it finds stopped, so a pg_ctl restart behind its back races Patroni's own
 * start (and Patroni restarts a node itself: `patronictl restart`, which stops and starts it
 * the same way).
 */
import t from 'tap'
import { startPostgres } from '../../tools/topology/postgres.js'
import { testEnv } from '../helper.js'
import { NEEDS_DIRECT_SERVER, pgClient } from '../helpers/database.js'
import { checkRecovery, checkStoredExactlyOnce, startIdempotentCreates } from '../helpers/idempotent-creates.js'
import { startService } from '../helpers/service.js'
import { sleep, waitUntil } from '../helpers/wait.js'
import { needsPrograms, PG_SERVER } from '../helpers/programs.js'

const CLIENTS = 8
const PREFIX = 'restart'
/** Load before the restart, and after the service serves again. */
const BEFORE_MS = 2000
const AFTER_MS = 2000

t.test('pg_ctl restart -m fast under load: 503s within the bound, served again within seconds, every acknowledged create stored once', { skip: NEEDS_DIRECT_SERVER || needsPrograms(PG_SERVER) }, async (t) => {
  const server = await startPostgres()
  t.teardown(() => server.stop())
  const admin = await pgClient(t, server.url('postgres'))
  await admin.query('CREATE DATABASE bookkeeping')
  const service = await startService(t, testEnv(server.url('bookkeeping')))
  const token = await service.token()

  const load = startIdempotentCreates({ url: service.url, token, clients: CLIENTS, prefix: PREFIX })
  let restartedAt = 0
  let backAt = 0
  try {
    await sleep(BEFORE_MS)
    restartedAt = performance.now()
    // pg_ctl returns once the new server accepts connections (-w)
    await server.restart('fast')
    backAt = performance.now()
    await waitUntil(() => load.attempts.some((attempt) => attempt.status === 201 && attempt.sentAt > backAt), 20_000,
      'a create sent after the restart to be acknowledged')
    await sleep(AFTER_MS)
  } finally {
    await load.stop()
  }

  const { recovered, failed, slowest } = checkRecovery(t, load,
    { disruption: 'the restart', disruptedAt: restartedAt, back: 'the server was back', backAt })
  t.comment(`pg_ctl restart -m fast took ${Math.round(backAt - restartedAt)} ms; the service unavailable for ` +
    `${Math.round(recovered - restartedAt)} ms from the restart's start, serving again ${Math.round(recovered - backAt)} ms ` +
    `after pg_ctl returned; ${failed.length} failed attempts; slowest answer ${slowest} ms`)
  t.equal(service.exit, null, 'the service kept running: no restart')

  await checkStoredExactlyOnce(t, await pgClient(t, server.url('bookkeeping')), load, PREFIX)
})

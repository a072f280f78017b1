/**
 * The service as a real process behind a real PgBouncer in transaction pooling, started with the
 * repository's configuration (docs/deploy/pgbouncer.ini) and nothing but `DB_URL` pointing at
 * it: restarts of the service and of PgBouncer, instances migrating together, and the
 * per-statement time bound, which has to hold on the server through the pooler.
 */
import t, { type Test } from 'tap'
import { STATEMENT_TIMEOUT_MS } from '../../src/db/time-bounds.js'
import { startPgbouncer } from '../../tools/topology/pgbouncer.js'
import { testEnv } from '../helper.js'
import { ADMIN_URL, createDatabase, NEEDS_DIRECT_SERVER, pgClient, serviceSessionsOnLock, waitForSessionsOnLock } from '../helpers/database.js'
import { BOUND_SLACK, UNAVAILABLE } from '../helpers/health.js'
import { type Service, startService } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'
import { needsPrograms } from '../helpers/programs.js'

async function stop (t: Test, service: Service) {
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null }, 'the service stopped cleanly')
}

/** The database of this test behind a PgBouncer of its own. */
async function behindPgbouncer (t: Test) {
  const dbUrl = await createDatabase(t)
  const pgbouncer = await startPgbouncer(ADMIN_URL)
  t.teardown(() => pgbouncer.stop())
  return { dbUrl, pgbouncer, url: pgbouncer.url(dbUrl) }
}

t.test('across restarts of the service and of PgBouncer, with only DB_URL set', { skip: NEEDS_DIRECT_SERVER || needsPrograms('pgbouncer') }, async (t) => {
  const { pgbouncer, url } = await behindPgbouncer(t)
  const env = testEnv(url)

  let service = await startService(t, env)
  let token = await service.token()
  const created = await service.request('POST', '/book', { token, body: { title: 'Pooled', author: 'P. G. Bouncer', year: 2007 } })
  t.equal(created.status, 201, 'created through PgBouncer')
  const id = (created.body as { data: { id: number } }).data.id
  const everyRoute = async (label: string) => {
    const answers = await Promise.all([
      service.request('GET', `/book/${id}`, { token }),
      service.request('PUT', `/book/${id}`, { token, body: { year: 2008 } }),
      service.request('GET', '/books', { token }),
      service.request('GET', '/book/999999', { token }),
      service.request('PUT', '/book/999999', { token, body: { year: 1 } }),
      service.request('GET', '/health/ready')
    ])
    t.strictSame(answers.map(({ status }) => status), [200, 200, 200, 404, 404, 200], label)
  }
  await everyRoute('every statement answers')

  // The server connections PgBouncer keeps outlive the service's process: what a session
  // remembered (a prepared statement's name) would collide with the next process's
  await stop(t, service)
  service = await startService(t, env)
  token = await service.token()
  await everyRoute('every statement answers after a restart of the service')

  // PgBouncer goes away under the pool's connections and comes back on the same port: at most
  // 503s meanwhile, never a 500, and served again without a restart of the service
  await pgbouncer.restart()
  const statuses: number[] = []
  const served = await waitUntil(async () => {
    const { status } = await service.request('GET', `/book/${id}`, { token })
    statuses.push(status)
    return status === 200
  }, 5000, 'served again after PgBouncer restarted', 50)
  t.ok(statuses.every((status) => status === 200 || status === 503), `only 200 or 503 meanwhile: ${statuses.join(' ')}`)
  t.pass(`served again ${served} ms after PgBouncer restarted`)
  await everyRoute('every statement answers after a restart of PgBouncer')
  t.equal(service.exit, null, 'the service did not need a restart')
  await stop(t, service)
})

t.test('instances starting together migrate once, and no lock outlives its transaction', { skip: NEEDS_DIRECT_SERVER || needsPrograms('pgbouncer') }, async (t) => {
  const { dbUrl, url } = await behindPgbouncer(t)
  const services = await Promise.all([1, 2, 3].map(() => startService(t, testEnv(url))))
  const admin = await pgClient(t, dbUrl)
  const { rows: versions } = await admin.query<{ version: number, n: number }>(
    'SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version')
  t.ok(versions.length > 0 && versions.every(({ n }) => n === 1), 'each migration applied once')
  const applied = services.map((service) => (service.stdout.match(/"applied migration"/g) ?? []).length)
  t.equal(applied.reduce((a, b) => a + b, 0), versions.length, `migrations applied by the instances: ${applied.join(', ')}`)
  // A session-level lock would stay with the server connection PgBouncer hands on. This
  // database's only: services of other test files migrate theirs meanwhile
  const { rows: [locks] } = await admin.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
  t.equal(locks!.n, 0, 'no advisory lock held once they all listen')
  await Promise.all(services.map((service) => stop(t, service)))
})

t.test('a statement stuck on a lock is cut off by the server within its bound', { skip: NEEDS_DIRECT_SERVER || needsPrograms('pgbouncer') }, async (t) => {
  const { dbUrl, url } = await behindPgbouncer(t)
  const service = await startService(t, testEnv(url))
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: { title: 'Locked', author: 'L', year: 1 } })
  const id = (created.body as { data: { id: number } }).data.id

  const locker = await pgClient(t, dbUrl)
  const watcher = await pgClient(t, dbUrl)
  await locker.query('BEGIN')
  await locker.query('SELECT 1 FROM books WHERE id = $1 FOR UPDATE', [id])
  const started = performance.now()
  const update = service.request('PUT', `/book/${id}`, { token, body: { year: 2 } })
  await waitForSessionsOnLock(watcher, dbUrl, 1)
  // Only the server's statement_timeout ends the wait in PostgreSQL: the client giving up
  // would leave the statement waiting there, holding its server connection
  const ended = await waitUntil(async () => await serviceSessionsOnLock(watcher, dbUrl) === 0, STATEMENT_TIMEOUT_MS + 2000, 'the server to cancel the waiting statement', 20)
  const cancelledAfter = Math.round(performance.now() - started)
  const response = await update
  const answeredAfter = Math.round(performance.now() - started)
  t.ok(cancelledAfter >= STATEMENT_TIMEOUT_MS - 500 && cancelledAfter <= STATEMENT_TIMEOUT_MS + BOUND_SLACK,
    `the server cancelled the statement ${cancelledAfter} ms after the request (${ended} ms of polling)`)
  t.strictSame({ status: response.status, body: response.body }, { status: 503, body: UNAVAILABLE }, '503, not a hang')
  t.ok(answeredAfter <= STATEMENT_TIMEOUT_MS + BOUND_SLACK, `answered after ${answeredAfter} ms`)
  await locker.query('ROLLBACK')

  const after = await service.request('PUT', `/book/${id}`, { token, body: { year: 3 } })
  t.equal(after.status, 200, 'served again once the lock is gone')
  await stop(t, service)
})

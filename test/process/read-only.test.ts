/**
 * A connection that reaches a server that cannot take writes is treated like a lost one: the
 * request gets 503, the connection is discarded, and the pool does not hand it out again. Two
 * such servers: a hot standby (reached after the address the service connects to came to lead
 * to it; the service could not start on one, its migrations write), and a primary switched to
 * read-only (`default_transaction_read_only`, SQLSTATE 25006). Servers of the test's own
 * (tools/topology/postgres.ts).
 */
import pg from 'pg'
import t, { type Test } from 'tap'
import { startPostgres } from '../../tools/topology/postgres.js'
import { testEnv } from '../helper.js'
import { NEEDS_DIRECT_SERVER, pgClient } from '../helpers/database.js'
import type { Service } from '../helpers/service.js'
import { startService } from '../helpers/service.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { waitUntil } from '../helpers/wait.js'
import { needsPrograms, PG_SERVER } from '../helpers/programs.js'

const ROUNDS = 5
/** Far less than the pool's idle timeout (10 s): a connection the pool kept would still be there. */
const GONE_WITHIN_MS = 2000
const BOOK = { title: 'Standby', author: 'Reader', year: 2001 }

/** The pids of the service's sessions on the database `database` of the server of `client`. */
async function servicePids (client: pg.Client, database: string): Promise<number[]> {
  const { rows } = await client.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'bookkeeping' AND datname = $1", [database])
  return rows.map(({ pid }) => pid)
}

/** Each request answered 503 `Service unavailable` (never 200 with a stale read, never 500). */
async function expectUnavailable (t: Test, service: Service, token: string, requests: Array<[string, string, unknown?]>) {
  for (const [method, path, body] of requests) {
    const response = await service.request(method, path, { token, body })
    t.strictSame({ status: response.status, body: response.body }, {
      status: 503, body: { status: 503, message: 'Service unavailable', data: null }
    }, `${method} ${path}: 503`)
  }
}

t.test('the service led to a hot standby: GET and POST 503, no connection kept; led back to the primary, it serves without a restart', { skip: NEEDS_DIRECT_SERVER || needsPrograms(PG_SERVER) }, async (t) => {
  const primary = await startPostgres()
  t.teardown(() => primary.stop())
  const standby = await startPostgres({ standbyOf: primary })
  t.teardown(() => standby.stop())
  const admin = await pgClient(t, primary.url('postgres'))
  await admin.query('CREATE DATABASE bookkeeping')
  // Started through a proxy to the primary: it migrates at start-up, which a standby refuses
  const proxy = await TcpProxy.start(t, primary.port)
  const service = await startService(t, testEnv(`postgres://postgres@127.0.0.1:${proxy.port}/bookkeeping`))
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: BOOK })
  t.equal(created.status, 201, 'a book created on the primary')
  const id = (created.body as { data: { id: number } }).data.id

  // The standby has the book: a read there would answer 200, stale or not
  const { lsn } = (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!
  const onStandby = await pgClient(t, standby.url('bookkeeping'))
  await waitUntil(async () => (await onStandby.query<{ replayed: boolean }>(
    'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS replayed', [lsn])).rows[0]!.replayed, 10_000, 'the standby to replay the book')

  await proxy.retarget(standby.port)
  for (let round = 0; round < ROUNDS; round++) {
    // Reads last: a connection a failed write discarded would hide one a read left in the pool
    await expectUnavailable(t, service, token, [['POST', '/book', BOOK], ['GET', '/books'], ['GET', `/book/${id}`]])
  }
  t.ok(proxy.accepted > ROUNDS, `the service tried new connections (${proxy.accepted} accepted by the proxy)`)
  await waitUntil(async () => (await servicePids(onStandby, 'bookkeeping')).length === 0, GONE_WITHIN_MS,
    'no session of the service left on the standby')
  t.pass('no connection to the standby kept by the pool')

  await proxy.retarget(primary.port)
  t.equal((await service.request('GET', `/book/${id}`, { token })).status, 200, 'led back to the primary: GET 200')
  t.equal((await service.request('POST', '/book', { token, body: BOOK })).status, 201, 'POST 201')
  t.equal(service.exit, null, 'the service kept running: no restart')
})

t.test('a primary switched to read-only: POST 503 and its connection discarded; switched back, served without a restart', { skip: NEEDS_DIRECT_SERVER || needsPrograms(PG_SERVER) }, async (t) => {
  const primary = await startPostgres()
  t.teardown(() => primary.stop())
  const admin = await pgClient(t, primary.url('postgres'))
  await admin.query('CREATE DATABASE bookkeeping')
  // One connection: the one that met the read-only server is the one the pool would hand out next
  const service = await startService(t, { ...testEnv(primary.url('bookkeeping')), DB_POOL_MAX: '1' })
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: BOOK })
  t.equal(created.status, 201, 'a book created')
  const id = (created.body as { data: { id: number } }).data.id

  const readOnly = async (on: boolean) => {
    await admin.query(on ? 'ALTER SYSTEM SET default_transaction_read_only = on' : 'ALTER SYSTEM RESET default_transaction_read_only')
    await admin.query('SELECT pg_reload_conf()')
    // The postmaster signals every session once it has read the file again: a new session tells
    await waitUntil(async () => {
      const fresh = new pg.Client({ connectionString: primary.url('postgres'), connectionTimeoutMillis: 1000 })
      try {
        await fresh.connect()
        const { rows } = await fresh.query<{ value: string }>("SELECT current_setting('default_transaction_read_only') AS value")
        return rows[0]!.value === (on ? 'on' : 'off')
      } finally {
        await fresh.end()
      }
    }, 5000, `default_transaction_read_only ${on ? 'on' : 'off'}`)
  }

  await readOnly(true)
  for (let round = 0; round < ROUNDS; round++) {
    const [before] = await servicePids(admin, 'bookkeeping')
    t.ok(before !== undefined, 'the pool holds a connection')
    await expectUnavailable(t, service, token, [['POST', '/book', BOOK]])
    await waitUntil(async () => !(await servicePids(admin, 'bookkeeping')).includes(before!), GONE_WITHIN_MS,
      `session ${before} ended`)
    // Reads do not write: a read-only primary serves them, on a new connection
    t.equal((await service.request('GET', `/book/${id}`, { token })).status, 200, 'GET 200 on a new connection')
  }
  t.pass('each connection that met the read-only server was discarded')

  await readOnly(false)
  t.equal((await service.request('POST', '/book', { token, body: BOOK })).status, 201, 'switched back: POST 201')
  t.equal(service.exit, null, 'the service kept running: no restart')
})

/**
 * No file descriptor left for a new database connection (EMFILE), against the real process: the
 * request that needed one is answered 503 `Service unavailable` like any other unavailability
 * (never 500), and once descriptors are free again the service serves as before. The limit is
 * lowered on the running process (`prlimit`) to the descriptors it holds, after its pooled
 * connections were ended, so that the next query must open one.
 */
import { execFileSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { Agent } from 'node:http'
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, NEEDS_SERVER, pgClient } from '../helpers/database.js'
import { sendRequest } from '../helpers/keep-alive-request.js'
import { startService } from '../helpers/service.js'
import { sleep, waitUntil } from '../helpers/wait.js'

/**
 * The lowest descriptor number `pid` does not use: the one its next open would get. The limit
 * bounds the numbers, not how many are open, so a limit of exactly this leaves none to open.
 */
function lowestFreeDescriptor (pid: number): number {
  const used = new Set(readdirSync(`/proc/${pid}/fd`).map(Number))
  let free = 0
  while (used.has(free)) free++
  return free
}
/** The soft limit only: lowering the hard one could not be undone without privileges. */
const setDescriptorLimit = (pid: number, limit: number) =>
  execFileSync('prlimit', ['--pid', String(pid), `--nofile=${limit}:`])

t.test('a database connection that finds no descriptor is 503, and the service recovers', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const pid = service.serverPid
  const token = await service.token()
  const db = await pgClient(t, dbUrl)
  const originalLimit = Number(execFileSync('prlimit', ['--pid', String(pid), '--nofile', '--output=SOFT', '--noheadings']).toString().trim())

  // A connection of the client's, opened while there are descriptors, and used again below
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const getBook = () => sendRequest(new URL(service.url), agent, { method: 'GET', path: '/book/1', token })
  t.equal((await getBook()).status, 404, 'served (no book 1 here)')

  // The pool's connections end; the next query must open a new one
  await db.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'bookkeeping'")
  await waitUntil(async () => (await db.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'bookkeeping'")).rowCount === 0,
    5000, 'the pooled connections to end')
  // Time for the pool to see its connections gone and close their descriptors
  await sleep(300)
  setDescriptorLimit(pid, lowestFreeDescriptor(pid))
  t.teardown(() => { try { setDescriptorLimit(pid, originalLimit) } catch {} })

  const short = await getBook()
  t.equal(short.status, 503, 'no descriptor for the database: 503')
  t.strictSame(JSON.parse(short.body ?? 'null'), { status: 503, message: 'Service unavailable', data: null }, 'the envelope, with the generic message')
  // The log line travels through the child's stdout pipe, which may deliver it after the answer
  await service.waitFor(() => /"message":"connect EMFILE /.test(service.stdout), 5000, 'the log line of the 503')
  t.pass('the cause is logged: connect EMFILE')

  setDescriptorLimit(pid, originalLimit)
  t.equal((await getBook()).status, 404, 'descriptors free again: served as before')
  t.equal(service.exit, null, 'the process never stopped')
})

/**
 * The embedded store as users start it: `DB_URL=pglite:...` with `npm start`'s own command
 * (`npm run dev`, which uses it by default: test/process/dev.test.ts). Real processes; needs no
 * PostgreSQL server.
 */
import { existsSync, mkdirSync, readFileSync, watch, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PASSWORD, SECRET, USERNAME } from '../helper.js'
import { OWN_STORE } from '../helpers/database.js'
import {
  expectStartupFailure, residentMiB, type Service, spawnService, temporaryDirectory
} from '../helpers/service.js'
import { sleep, waitUntil } from '../helpers/wait.js'

// Creating a PGlite cluster takes several seconds, and more on a loaded machine; these tests
// start several, each in a directory of its own, three at a time beside other test files
t.setTimeout(480_000)
t.jobs = 3

const BOOK = { title: 'Kindred', author: 'Octavia E. Butler', year: 1979 }
/** The most the whole service may hold resident, idle, on `pglite:<directory>` (MiB). */
const IDLE_RESIDENT_BOUND = 200
/** Idle: this long after its first answer, with nothing asked of it since. */
const IDLE_MS = 3000
const CREDENTIALS = { SECRET_TOKEN: SECRET, AUTH_USERNAME: USERNAME, AUTH_PASSWORD: PASSWORD }

async function started (t: Test, env: Record<string, string>): Promise<Service> {
  const service = await spawnService(t, env)
  await service.listening(150_000)
  return service
}

async function stop (t: Test, service: Service) {
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null }, 'SIGTERM: exit 0')
}

t.test('pglite:<directory> keeps the books across a restart, holds under 200 MiB idle, works after the pool replaced its connection, and serves one process at a time', { skip: OWN_STORE }, async (t) => {
  // One cluster for all of it: creating one costs seconds of CPU
  const dir = join(temporaryDirectory(t), 'db')
  const lock = `${dir}.lock`
  const env = { ...CREDENTIALS, DB_URL: `pglite:${dir}` }
  /** Ready, then idle after its first answer: under the bound, which a process that created
   * the cluster itself and kept what initdb took would exceed (src/db/embedded-create.ts). */
  async function idle (start: string): Promise<Service> {
    const service = await started(t, env)
    t.equal((await service.request('GET', '/health/ready')).status, 200, `${start}: ready`)
    // The duration under test: the service idle after its first answer
    await sleep(IDLE_MS)
    const resident = residentMiB(service.serverPid)
    t.ok(resident < IDLE_RESIDENT_BOUND, `${start}: ${resident.toFixed(1)} MiB resident, idle (bound ${IDLE_RESIDENT_BOUND})`)
    return service
  }

  const first = await idle('the first start, which created the cluster')
  const token = await first.token()
  const created = await first.request('POST', '/book', { token, body: BOOK })
  t.strictSame(created.body, { status: 201, message: 'Book created successfully', data: { id: 1, ...BOOK } })
  t.equal(readFileSync(lock, 'utf8'), `${first.serverPid}\n`, 'the lock names the process')
  await stop(t, first)
  t.notOk(existsSync(lock), 'a clean stop removes the lock')

  const second = await idle('a restart')
  const again = await second.token()
  const listed = await second.request('GET', '/books', { token: again })
  t.strictSame(listed.body, { status: 200, message: 'Books retrieved successfully', data: [{ id: 1, ...BOOK }] }, 'the book survived')
  // pg's pool closes a connection idle for 10 s. The next one shares PGlite's one session,
  // where the statements the first one prepared are still there: preparing them again must work
  await sleep(11_000)
  const read = await second.request('GET', '/book/1', { token: again })
  t.equal(read.status, 200, `a read after the pool replaced its connection: ${read.text}`)
  const updated = await second.request('PUT', '/book/1', { token: again, body: { year: 1980 } })
  t.equal(updated.status, 200, `and a write: ${updated.text}`)

  // Two PostgreSQLs writing one directory would corrupt it: PGlite itself never checks
  const escaped = dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  await expectStartupFailure(t, env,
    new RegExp(`^bookkeeping: start-up failed: cannot start the embedded database in ${escaped}: it is in use by process ${second.serverPid}; stop that process, or set DB_URL to another directory`),
    { secrets: [SECRET, PASSWORD] })
  t.equal((await second.request('GET', '/books', { token: again })).status, 200, 'the one running still serves')

  second.child.kill('SIGKILL')
  await second.waitForExit()
  t.ok(existsSync(lock), 'precondition: a killed process leaves its lock behind')
  const third = await started(t, env)
  const after = await third.request('GET', '/books', { token: await third.token() })
  t.strictSame(after.body, { status: 200, message: 'Books retrieved successfully', data: [{ id: 1, ...BOOK, year: 1980 }] },
    'the next start took the stale lock over, and the book is there')
  await stop(t, third)
  t.notOk(existsSync(lock), 'a clean stop removes the lock')
})

t.test('pglite:memory works and keeps nothing', { skip: OWN_STORE }, async (t) => {
  const env = { ...CREDENTIALS, DB_URL: 'pglite:memory' }
  const first = await started(t, env)
  const token = await first.token()
  t.equal((await first.request('POST', '/book', { token, body: BOOK })).status, 201)
  // Requests of every kind at once: each kind's statement, and every delete, would take a
  // pooled connection of its own, and on PGlite's one session those collide on their names
  const together = await Promise.all([
    first.request('GET', '/books', { token }),
    first.request('GET', '/book/1', { token }),
    first.request('PUT', '/book/1', { token, body: { year: 1980 } }),
    first.request('POST', '/book', { token, body: BOOK }),
    ...[7, 8, 9, 10].map((id) => first.request('DELETE', `/book/${id}`, { token }))
  ])
  t.strictSame(together.map(({ status }) => status), [200, 200, 200, 201, 404, 404, 404, 404],
    'concurrent requests on the one connection the pool has on PGlite')
  await stop(t, first)
  const second = await started(t, env)
  const listed = await second.request('GET', '/books', { token: await second.token() })
  t.strictSame(listed.body, { status: 200, message: 'Books retrieved successfully', data: [] })
  await stop(t, second)
})

t.test('a pglite: directory that cannot be created stops the start-up with one line', { skip: OWN_STORE }, async (t) => {
  const blocker = join(temporaryDirectory(t), 'a-file')
  writeFileSync(blocker, '')
  const service = await spawnService(t, { ...CREDENTIALS, DB_URL: `pglite:${join(blocker, 'db')}` })
  t.strictSame(await service.waitForExit(60_000), { code: 1, signal: null }, 'exit 1')
  t.match(service.stderr.trim(), /^bookkeeping: start-up failed: cannot start the embedded database in \S+a-file\/db: .+$/, service.stderr)
  t.notMatch(service.stdout, /Server listening/, 'nothing listened')
})

t.test('a new cluster is whole or not there: a creation cut short is done again, a directory of other files refused', { skip: OWN_STORE }, async (t) => {
  const dir = join(temporaryDirectory(t), 'db')
  const env = { ...CREDENTIALS, DB_URL: `pglite:${dir}` }
  const cut = await spawnService(t, env)
  // Killed while initdb writes the cluster (its first file is PG_VERSION); beside the other test
  // files on a loaded machine that first file can take tens of seconds to come
  await waitUntil(() => existsSync(join(`${dir}.partial`, 'PG_VERSION')), 90_000, 'the cluster being created')
  process.kill(-cut.child.pid!, 'SIGKILL')
  await cut.waitForExit()
  t.notOk(existsSync(join(dir, 'PG_VERSION')), 'precondition: nothing half-made where the cluster goes')
  const next = await started(t, env)
  t.equal((await next.request('POST', '/book', { token: await next.token(), body: BOOK })).status, 201, 'the next start created it whole')
  t.notOk(existsSync(`${dir}.partial`), 'and left nothing beside it')
  await stop(t, next)

  const parent = temporaryDirectory(t)
  const other = join(parent, 'photos')
  mkdirSync(other)
  writeFileSync(join(other, 'holiday.jpg'), '')
  // Every name that appears beside it meanwhile (inotify)
  const appeared = new Set<string>()
  const watcher = watch(parent, (event, name) => { if (name !== null) appeared.add(name) })
  await expectStartupFailure(t, { ...CREDENTIALS, DB_URL: `pglite:${other}` },
    /^bookkeeping: start-up failed: cannot start the embedded database in \S+\/photos: it holds files but no database; set DB_URL to a new or empty directory$/)
  watcher.close()
  t.ok(appeared.has('photos.lock'), 'precondition: what appeared beside it was seen (its lock)')
  t.notOk(appeared.has('photos.partial'), 'refused before any cluster was created for it')
})

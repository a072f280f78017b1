/**
 * The embedded store as users start it: `DB_URL=pglite:...` with `npm start`'s own command, and
 * `npm run dev` with nothing configured. Real processes; needs no PostgreSQL server.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PASSWORD, SECRET, USERNAME } from '../helper.js'
import { DEV_COMMAND, type Service, spawnService } from '../helpers/service.js'
import { sleep } from '../helpers/wait.js'

// Creating a PGlite cluster takes seconds; these tests start several
t.setTimeout(120_000)

const BOOK = { title: 'Kindred', author: 'Octavia E. Butler', year: 1979 }
const CREDENTIALS = { SECRET_TOKEN: SECRET, AUTH_USERNAME: USERNAME, AUTH_PASSWORD: PASSWORD }

function temporaryDirectory (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'bookkeeping-embedded-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function started (t: Test, env: Record<string, string>, command?: string): Promise<Service> {
  const service = await spawnService(t, env, command)
  await service.listening(60_000)
  return service
}

async function stop (t: Test, service: Service) {
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null }, 'SIGTERM: exit 0')
}

t.test('pglite:<directory> keeps the books across a restart, and after the pool replaced its connection', async (t) => {
  const env = { ...CREDENTIALS, DB_URL: `pglite:${join(temporaryDirectory(t), 'db')}` }
  const first = await started(t, env)
  const token = await first.token()
  const created = await first.request('POST', '/book', { token, body: BOOK })
  t.strictSame(created.body, { status: 201, message: 'Book created successfully', data: { id: 1, ...BOOK } })
  await stop(t, first)

  const second = await started(t, env)
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
  await stop(t, second)
})

t.test('pglite:memory works and keeps nothing', async (t) => {
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

t.test('npm run dev: development values for what is unset, printed as such, kept across restarts', async (t) => {
  const dataDir = temporaryDirectory(t)
  // No DB_URL, no secret, no credentials: only where to keep the data
  const env = { DEV_DATA_DIR: dataDir }
  const first = await started(t, env, DEV_COMMAND)
  t.match(first.stderr, /DEVELOPMENT SETUP, NOT FOR PRODUCTION/, 'the banner says what these values are')
  t.match(first.stderr, `DB_URL=pglite:${join(dataDir, 'pglite')}`)
  const password = /AUTH_PASSWORD=(\S+)/.exec(first.stderr)?.[1]
  t.ok(password, 'the generated password is printed')
  t.match(first.stderr, /AUTH_USERNAME=dev\b/)
  const stored = JSON.parse(readFileSync(join(dataDir, 'dev-credentials.json'), 'utf8'))
  t.equal(stored.AUTH_PASSWORD, password, 'and kept in dev-credentials.json')
  t.notOk(first.stderr.includes(stored.SECRET_TOKEN), 'the secret itself is not printed')
  t.ok(stored.SECRET_TOKEN.length >= 32, 'the generated secret is long enough for HS256')

  const issued = await first.request('POST', '/token', { body: { username: 'dev', password } })
  t.equal(issued.status, 200, 'the printed credentials get a token')
  const token = (issued.body as { data: { token: string } }).data.token
  t.equal((await first.request('POST', '/book', { token, body: BOOK })).status, 201)
  await stop(t, first)

  const second = await started(t, env, DEV_COMMAND)
  t.match(second.stderr, `AUTH_PASSWORD=${password}`, 'the same password after a restart')
  const listed = await second.request('GET', '/books', { token })
  t.strictSame(listed.body, { status: 200, message: 'Books retrieved successfully', data: [{ id: 1, ...BOOK }] },
    'the token from before the restart still works, and the book is there')
  await stop(t, second)
})

t.test('npm run dev leaves alone what is set', async (t) => {
  const dataDir = temporaryDirectory(t)
  const service = await started(t, { DEV_DATA_DIR: dataDir, ...CREDENTIALS, DB_URL: 'pglite:memory' }, DEV_COMMAND)
  t.notMatch(service.stderr, /DEVELOPMENT SETUP/, 'nothing chosen, nothing printed')
  t.equal((await service.request('POST', '/token', { body: { username: USERNAME, password: PASSWORD } })).status, 200)
  await stop(t, service)
})

t.test('a pglite: directory that cannot be created stops the start-up with one line', async (t) => {
  const blocker = join(temporaryDirectory(t), 'a-file')
  writeFileSync(blocker, '')
  const service = await spawnService(t, { ...CREDENTIALS, DB_URL: `pglite:${join(blocker, 'db')}` })
  t.strictSame(await service.waitForExit(60_000), { code: 1, signal: null }, 'exit 1')
  t.match(service.stderr.trim(), /^bookkeeping: start-up failed: cannot start the embedded database in \S+a-file\/db: .+$/, service.stderr)
  t.notMatch(service.stdout, /Server listening/, 'nothing listened')
})

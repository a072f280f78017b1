/**
 * `npm run dev` as a developer runs it: development values for what is unset, printed as such,
 * kept across restarts; Ctrl-C through the whole script (npm, its build, the server) stops it
 * once, and the embedded database it uses by default closes cleanly. Real processes; the
 * embedded database needs no PostgreSQL server.
 */
import { execFileSync } from 'node:child_process'
import { cpSync, readFileSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PASSWORD, SECRET, USERNAME } from '../helper.js'
import { createDatabase, OWN_STORE, STORE_INDEPENDENT } from '../helpers/database.js'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { clusterState, DB_SHUTDOWNED, DEV_COMMAND, type Service, spawnService, temporaryDirectory } from '../helpers/service.js'

// A build, a PGlite cluster created and started again: minutes beside other test files
t.setTimeout(240_000)

const BOOK = { title: 'Kindred', author: 'Octavia E. Butler', year: 1979 }
const CREDENTIALS = { SECRET_TOKEN: SECRET, AUTH_USERNAME: USERNAME, AUTH_PASSWORD: PASSWORD }

async function started (t: Test, env: Record<string, string>, command = DEV_COMMAND): Promise<Service> {
  const service = await spawnService(t, env, command)
  // The build (the first case) and creating a PGlite cluster take seconds each, and beside other
  // test files on a loaded machine well over a minute together
  await service.listening(150_000)
  return service
}

async function stop (t: Test, service: Service) {
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null }, 'SIGTERM: exit 0')
}

/**
 * A copy of the tree to run the whole `npm run dev` in, build included: a build here would
 * rewrite dist/ under the feet of the other test files. The builds come along (tools/dist is in
 * tools), so the copy's build is the incremental one of a tree built before, as a developer's
 * second `npm run dev` is. The dependencies are this tree's own, hard links in a tree of
 * directories of the copy's own (`cp -al`, quick): through a symbolic link, TypeScript would
 * find them at their real paths, which its incremental records name relative to the tree, and
 * check and emit everything again, a full build's CPU. A symbolic link where the temporary
 * directory is on another file system, which hard links cannot span.
 */
function treeCopy (t: Test): string {
  const copy = temporaryDirectory(t)
  for (const entry of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'plugins', 'routes', 'console', 'tools', 'dist']) {
    cpSync(join(PROJECT_ROOT, entry), join(copy, entry), { recursive: true })
  }
  try {
    execFileSync('cp', ['-al', join(PROJECT_ROOT, 'node_modules'), join(copy, 'node_modules')], { stdio: 'pipe' })
  } catch (err) {
    if (!/cross-device link/i.test(String((err as { stderr?: Buffer }).stderr))) throw err
    symlinkSync(join(PROJECT_ROOT, 'node_modules'), join(copy, 'node_modules'))
  }
  return copy
}

function logged (service: Service, message: string): number {
  return service.stdout.split('\n').filter((line) => line.startsWith('{'))
    .filter((line) => (JSON.parse(line) as { msg: string }).msg.startsWith(message)).length
}

t.test('npm run dev: development values for what is unset, printed as such, kept across a Ctrl-C and a restart', { skip: OWN_STORE }, async (t) => {
  const dataDir = temporaryDirectory(t)
  // No DB_URL, no secret, no credentials: only where to keep the data
  const env = { DEV_DATA_DIR: dataDir }
  // The whole script, as a terminal runs it
  const first = await started(t, env, `cd ${treeCopy(t)} && exec npm run dev --silent`)
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
  for (const id of [1, 2]) {
    t.match((await first.request('POST', '/book', { token, body: BOOK })).body, { data: { id } }, `book ${id} created`)
  }

  // Ctrl-C: SIGINT to the whole process group, npm included, which forwards it once more
  process.kill(-first.child.pid!, 'SIGINT')
  t.strictSame(await first.waitForExit(), { code: 0, signal: null }, 'Ctrl-C: npm run dev exits 0')
  t.ok(first.processGroupGone, 'no process of it is left')
  t.equal(logged(first, 'server closing'), 1, 'the server closed once')
  t.notMatch(first.stderr, /second SIGINT/, 'the forwarded SIGINT was not taken for a second Ctrl-C')
  t.equal(clusterState(join(dataDir, 'pglite')), DB_SHUTDOWNED, 'the embedded database was shut down cleanly: no recovery on the next start')

  const second = await started(t, env)
  t.match(second.stderr, `AUTH_PASSWORD=${password}`, 'the same password after a restart')
  const listed = await second.request('GET', '/books', { token })
  t.strictSame(listed.body, { status: 200, message: 'Books retrieved successfully', data: [{ id: 1, ...BOOK }, { id: 2, ...BOOK }] },
    'the token from before the restart still works, and the books are there')
  t.match((await second.request('POST', '/book', { token, body: BOOK })).body, { data: { id: 3 } },
    'the next id follows the last (a crash recovery would have skipped the 32 ids PostgreSQL logs ahead)')
  await stop(t, second)
})

t.test('npm run dev leaves alone what is set', { skip: STORE_INDEPENDENT }, async (t) => {
  const dataDir = temporaryDirectory(t)
  // The tests' database: an embedded one would cost seconds of CPU to create, for nothing tested here
  const service = await started(t, { DEV_DATA_DIR: dataDir, ...CREDENTIALS, DB_URL: await createDatabase(t) })
  t.notMatch(service.stderr, /DEVELOPMENT SETUP/, 'nothing chosen, nothing printed')
  t.equal((await service.request('POST', '/token', { body: { username: USERNAME, password: PASSWORD } })).status, 200)
  await stop(t, service)
})

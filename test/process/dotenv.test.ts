/**
 * A `.env` file in the working directory is read like the environment, for every variable:
 * `PORT`, `HOST` and `LOG_LEVEL` too, which `fastify start` itself consumes
 * (src/cli-options.ts); a variable set in the environment wins over the file. And `npm run dev`
 * listens where `HOST` says, on 127.0.0.1 only when nothing does. Real processes started as
 * `npm start` and `npm run dev` start them, in a directory of their own holding the `.env`.
 */
import { cpSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { testEnv } from '../helper.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { closedPort, DEV_COMMAND, probe, spawnService, temporaryDirectory } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'

// Each case in a working directory of its own, on a port of its own
t.jobs = 3

/**
 * A directory to start the service in, a package (fastify-cli reads the app's module type from
 * the nearest package.json) with `dist` as the build's own (the start script's relative paths)
 * and a `.env` holding `variables`. `copy`: the builds copied rather than linked, for `npm run
 * dev`, which reads `.env` where its own files are.
 */
function workingDirectory (t: Test, variables: Record<string, string>, { copy = false } = {}): string {
  const dir = temporaryDirectory(t)
  if (copy) {
    cpSync(join(PROJECT_ROOT, 'dist'), join(dir, 'dist'), { recursive: true })
    cpSync(join(PROJECT_ROOT, 'tools', 'dist'), join(dir, 'tools', 'dist'), { recursive: true })
    cpSync(join(PROJECT_ROOT, 'package.json'), join(dir, 'package.json'))
    symlinkSync(join(PROJECT_ROOT, 'node_modules'), join(dir, 'node_modules'))
  } else {
    symlinkSync(join(PROJECT_ROOT, 'dist'), join(dir, 'dist'))
    symlinkSync(join(PROJECT_ROOT, 'package.json'), join(dir, 'package.json'))
  }
  writeFileSync(join(dir, '.env'), Object.entries(variables).map(([name, value]) => `${name}=${value}\n`).join(''))
  return dir
}

/** Whether GET /health/live answers 200 at `url`. */
async function answers (url: string): Promise<boolean> {
  try {
    return (await fetch(`${url}/health/live`)).status === 200
  } catch {
    return false
  }
}

t.test('npm start reads PORT, HOST and LOG_LEVEL from .env', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const port = await closedPort()
  // 127.0.0.2 is this machine's loopback too, but not the default address
  const dir = workingDirectory(t, { ...testEnv(dbUrl), PORT: String(port), HOST: '127.0.0.2', LOG_LEVEL: 'warn' })
  // Nothing of the three in the environment: only the file says them
  const service = await spawnService(t, { PORT: undefined, HOST: undefined }, undefined, dir)
  await waitUntil(() => answers(`http://127.0.0.2:${port}`), 30_000, `the service on 127.0.0.2:${port}`)
  t.pass(`PORT: it listens on ${port}, the file's port; HOST: on 127.0.0.2, the file's address`)
  t.equal(await probe(port), 'refused', 'HOST: not on 127.0.0.1 (nor on every interface, the default)')

  const client = await pgClient(t, dbUrl)
  const { rows } = await client.query('SELECT count(*)::int4 AS applied FROM schema_migrations')
  t.ok(rows[0].applied > 0, 'precondition: it applied migrations, which it logs at info')
  const levels = service.stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line).level as number)
  t.notOk(levels.some((level) => level < 40), `LOG_LEVEL: nothing below warn logged (levels: ${levels.join(', ') || 'none'})`)
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null })
})

t.test('the environment wins over .env', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const dir = workingDirectory(t, { ...testEnv(dbUrl), PORT: String(await closedPort()), HOST: '127.0.0.2', LOG_LEVEL: 'warn' })
  const service = await spawnService(t, { PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' }, undefined, dir)
  await service.listening(30_000)
  t.equal(service.host, '127.0.0.1', 'HOST from the environment')
  t.not(service.port, 0, 'PORT from the environment: one the system picked')
  t.match(service.stdout, /"level":30,/, 'LOG_LEVEL from the environment: info is logged')
  service.child.kill('SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null })
})

t.test('npm run dev listens where HOST says, from the environment or .env', { skip: STORE_INDEPENDENT }, async (t) => {
  // On the tests' database: where it listens does not depend on the store, and an embedded
  // one would cost each case seconds of CPU to create
  t.test('from the environment', async (t) => {
    const service = await spawnService(t, { DEV_DATA_DIR: temporaryDirectory(t), DB_URL: await createDatabase(t), HOST: '127.0.0.2' }, DEV_COMMAND)
    await service.listening(60_000)
    t.equal(service.host, '127.0.0.2')
    t.notMatch(service.stderr, /HOST=/, 'HOST is not among the development values')
    await service.waitFor(() => service.stderr.includes('BASE='), 5000, 'the walk-through lines')
    t.match(service.stderr, `BASE=http://127.0.0.2:${service.port}`, 'the walk-through line says where')
  })
  t.test('from .env', async (t) => {
    const dir = workingDirectory(t, { HOST: '127.0.0.2', DB_URL: await createDatabase(t) }, { copy: true })
    const service = await spawnService(t, { DEV_DATA_DIR: join(dir, 'data'), HOST: undefined }, DEV_COMMAND, dir)
    await service.listening(60_000)
    t.equal(service.host, '127.0.0.2')
  })
})

/**
 * `npm run cluster` (tools/cluster.ts), run as npm runs its script (after its build, which
 * `npm test` has done): it refuses the embedded database with one line; it says where it is,
 * serves through HAProxy, restarts its instances one after another on SIGUSR2, and a Ctrl-C
 * (SIGINT to its process group, then once more as npm forwards it) stops every process it
 * started, each with one signal, and exits 0.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { testEnv } from '../../helper.js'
import { createDatabase, STORE } from '../../helpers/database.js'
import { PROJECT_ROOT } from '../../../src/project-root.js'
import { probe, Service, withoutTapHook } from '../../helpers/service.js'
import { withTimeout } from '../../helpers/wait.js'
import { needsPrograms } from '../../helpers/programs.js'

const CLUSTER_COMMAND: string = JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')).scripts.cluster

const NEEDS_POSTGRES = STORE !== 'postgres' && 'starts PgBouncer in front of the PostgreSQL server itself'

/**
 * The cluster's command, leading a process group of its own as a command in a terminal does.
 * What it started lives in process groups of their own: should the test fail half way, the
 * cluster is asked to stop them, and killed only if it does not.
 */
function spawnCluster (t: Test, env: Record<string, string>): Service {
  const child = spawn('/bin/sh', ['-c', withoutTapHook(CLUSTER_COMMAND)], {
    cwd: PROJECT_ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  })
  const cluster = new Service(child)
  t.teardown(async () => {
    if (!t.passing()) t.comment(cluster.output)
    if (cluster.exit !== null) return
    child.kill('SIGTERM')
    await withTimeout(cluster.exited, 30_000, 'the cluster to stop').catch(() => process.kill(-child.pid!, 'SIGKILL'))
  })
  return cluster
}

t.test('refuses the embedded database with one line, starting nothing', async (t) => {
  const cluster = spawnCluster(t, { ...testEnv('pglite:memory'), DB_URL: 'pglite:memory' })
  t.strictSame(await cluster.waitForExit(), { code: 1, signal: null }, 'exit 1')
  t.match(cluster.stderr, /^bookkeeping cluster: DB_URL is the embedded PGlite, [^\n]*postgres:\/\/[^\n]*\n$/, 'one line that says why and what to set')
  t.equal(cluster.stdout, '', 'nothing else')
})

t.test('serves through HAProxy, restarts on SIGUSR2, and stops everything once on Ctrl-C', { skip: NEEDS_POSTGRES || needsPrograms('haproxy', 'pgbouncer') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const cluster = spawnCluster(t, { ...testEnv(dbUrl), SHUTDOWN_DELAY_MS: '1500' })
  await cluster.waitFor(() => cluster.stderr.includes('Ctrl-C stops all of it'), 60_000, 'the cluster to say where it is')
  const url = /listening on (http:\/\/127\.0\.0\.1:\d+) /.exec(cluster.stderr)![1]!
  const ports = [
    Number(new URL(url).port),
    ...[...cluster.stderr.matchAll(/ {2}app\d: http:\/\/127\.0\.0\.1:(\d+)/g)].map((match) => Number(match[1])),
    Number(/PgBouncer: 127\.0\.0\.1:(\d+)/.exec(cluster.stderr)![1])
  ]
  t.equal(ports.length, 5, 'HAProxy, three instances and PgBouncer')

  const { AUTH_USERNAME: username, AUTH_PASSWORD: password } = testEnv(dbUrl)
  const call = async (method: string, route: string, body?: object, token?: string) => {
    const response = await fetch(`${url}${route}`, {
      method,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(token === undefined ? {} : { authorization: token }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000)
    })
    return { status: response.status, body: await response.json() as { data: { token: string, id: number } } }
  }
  const token = (await call('POST', '/token', { username, password })).body.data.token
  const created = await call('POST', '/book', { title: 'Clustered', author: 'H. A. Proxy', year: 2001 }, token)
  t.equal(created.status, 201, 'a create through HAProxy')
  t.equal((await call('GET', `/book/${created.body.data.id}`, undefined, token)).status, 200, 'and a read')

  cluster.child.kill('SIGUSR2')
  await cluster.waitFor(() => /app3 out of rotation .* back after \d+ ms/.test(cluster.stderr), 90_000, 'the rolling restart')
  t.equal([...cluster.stderr.matchAll(/exited \{"code":0,"signal":null\}/g)].length, 3, 'each instance restarted, exit 0')
  t.equal((await call('GET', `/book/${created.body.data.id}`, undefined, token)).status, 200, 'served after the restarts')

  // Ctrl-C: the terminal signals the process group; npm forwards the same signal once more
  process.kill(-cluster.child.pid!, 'SIGINT')
  cluster.child.kill('SIGINT')
  t.strictSame(await cluster.waitForExit(30_000), { code: 0, signal: null }, 'exit 0')
  for (const port of ports) t.equal(await probe(port), 'refused', `nothing listens on ${port} any more`)
  // Each instance logs the signal that began its shutdown: six processes (three, then their
  // replacements), one SIGTERM each, from the cluster
  const shutdowns = cluster.stdout.split('\n').filter((line) => line.includes('"msg":"shutdown begins'))
  t.equal(shutdowns.length, 6, 'six shutdowns, one per process')
  t.ok(shutdowns.every((line) => line.includes('"signal":"SIGTERM"')), 'each from the one SIGTERM the cluster sent')
})

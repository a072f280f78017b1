/**
 * The deployment examples of docs/deploy/ hold together: HAProxy accepts its files for one to
 * three instances (or PostgreSQL nodes) and has exactly those servers, Patroni accepts its file, and every stop sequence leaves HAProxy time to
 * take an instance out (SHUTDOWN_DELAY_MS above its checks' 1.25 s) and the instance time to
 * finish (the stop timeout above the delay plus fastify start's grace). What systemd itself can
 * check of the unit is checked by `systemd-analyze verify`.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLUSTER_SHUTDOWN_DELAY_MS } from '../../tools/cluster.js'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { findProgram } from '../../tools/system-programs.js'
import {
  HAPROXY_CONFIG, HAPROXY_POSTGRES_CONFIG, MAX_INSTANCES, MAX_POSTGRES_NODES, checkTimings, postgresServerName, serverName,
  startHaproxy, startPostgresHaproxy
} from '../../tools/topology/haproxy.js'
import { PATRONI_CONFIG } from '../../tools/topology/patroni.js'
import { closedPort } from '../helpers/service.js'
import { needsPrograms } from '../helpers/programs.js'

const DEPLOY = path.join(PROJECT_ROOT, 'docs', 'deploy')
const read = (file: string) => fs.readFileSync(path.join(DEPLOY, file), 'utf8')

/** fastify start's grace for the requests in flight once the server closes (`-g` of npm start). */
const START_SCRIPT: string = JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')).scripts.start
const GRACE_MS = Number(/ -g (\d+) /.exec(START_SCRIPT)?.[1])

const timings = checkTimings()

t.test('HAProxy has one server per INSTANCE_n given, one to three', { skip: needsPrograms('haproxy') }, async (t) => {
  const haproxy = findProgram('haproxy')
  // `-c` binds nothing, but wants a port that could be bound
  const bind = `127.0.0.1:${await closedPort()}`
  const check = (env: Record<string, string>) => spawnSync(haproxy, ['-c', '-f', HAPROXY_CONFIG], {
    env: { PATH: process.env.PATH, BOOKKEEPING_BIND: bind, ...env }, encoding: 'utf8'
  })
  t.not(check({}).status, 0, 'without INSTANCE_1 the file is refused, not run without servers')
  for (let count = 1; count <= MAX_INSTANCES; count++) {
    // Instances where nothing listens: the servers are there, and down
    const instances = await Promise.all(Array.from({ length: count }, async () => `127.0.0.1:${await closedPort()}`))
    const env = Object.fromEntries(instances.map((address, i) => [`INSTANCE_${i + 1}`, address]))
    const result = check(env)
    t.equal(result.status, 0, `haproxy -c accepts it with ${count} instance(s): ${result.stdout}${result.stderr}`)
    const running = await startHaproxy({ instances })
    try {
      t.strictSame(Object.keys(await running.states()), instances.map((_, i) => serverName(i)), `servers with ${count} instance(s)`)
    } finally {
      await running.stop()
    }
  }
})

t.test('HAProxy takes out an instance that fails its checks within about 2 s', async (t) => {
  t.ok(timings.markedDownWithin <= 2000, `within ${timings.markedDownWithin} ms (inter ${timings.inter}, fastinter ${timings.fastinter}, fall ${timings.fall})`)
  t.ok(timings.markedUpWithin <= 2000, `back within ${timings.markedUpWithin} ms of being ready`)
  t.ok(CLUSTER_SHUTDOWN_DELAY_MS > timings.markedDownWithin, `npm run cluster's delay (${CLUSTER_SHUTDOWN_DELAY_MS} ms) outlasts it`)
})

t.test('the systemd unit: HAProxy takes the instance out within its delay, and it stops within TimeoutStopSec', async (t) => {
  const unit = read('bookkeeping.service')
  const delay = Number(/^Environment=SHUTDOWN_DELAY_MS=(\d+)$/m.exec(unit)?.[1])
  const stopTimeout = Number(/^TimeoutStopSec=(\d+)$/m.exec(unit)?.[1]) * 1000
  t.ok(delay > timings.markedDownWithin, `SHUTDOWN_DELAY_MS=${delay} outlasts HAProxy's ${timings.markedDownWithin} ms`)
  t.ok(stopTimeout >= delay + GRACE_MS, `TimeoutStopSec (${stopTimeout} ms) covers the delay and the ${GRACE_MS} ms grace`)
  t.match(unit, /^KillSignal=SIGTERM$/m, 'stopped with SIGTERM')
  t.match(unit, /^ExecStart=\/usr\/bin\/npm start --ignore-scripts$/m, 'npm start, without its build')
  t.match(START_SCRIPT, /^exec /, 'whose script execs the server, so the signal reaches node')

  const verify = spawnSync('systemd-analyze', ['--version'])
  if (verify.error !== undefined) {
    t.comment('systemd-analyze is not installed: the unit is not verified by systemd')
    return
  }
  // The unit's own file name, in a directory of its own: systemd-analyze reads it from there
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bookkeeping-unit-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.writeFileSync(path.join(dir, 'bookkeeping.service'), unit)
  const result = spawnSync('systemd-analyze', ['verify', path.join(dir, 'bookkeeping.service')], { encoding: 'utf8' })
  // It reports a setting it ignores on stderr but still exits 0
  t.strictSame({ status: result.status, output: `${result.stdout}${result.stderr}`.trim() }, { status: 0, output: '' }, 'systemd-analyze verify finds nothing')
})

t.test('the Kubernetes example: probes, delay, and a grace period that covers the delay and the drain', async (t) => {
  const manifest = read('kubernetes.yaml')
  const delay = Number(/name: SHUTDOWN_DELAY_MS\s+value: "(\d+)"/.exec(manifest)?.[1])
  const grace = Number(/terminationGracePeriodSeconds: (\d+)/.exec(manifest)?.[1]) * 1000
  t.ok(delay > 0, `SHUTDOWN_DELAY_MS=${delay}`)
  t.ok(grace >= delay + GRACE_MS, `terminationGracePeriodSeconds (${grace} ms) covers the delay and the ${GRACE_MS} ms grace`)
  t.match(manifest, /readinessProbe:\s+httpGet:\s+path: \/health\/ready/, 'readiness on /health/ready')
  t.match(manifest, /livenessProbe:\s+httpGet:\s+path: \/health\/live/, 'liveness on /health/live')
  t.notMatch(manifest, /^\s*preStop:/m, 'no preStop hook')
})

t.test('HAProxy for PostgreSQL has one server per PG_NODE_n given, checked on Patroni\'s GET /primary', { skip: needsPrograms('haproxy') }, async (t) => {
  const haproxy = findProgram('haproxy')
  const bind = `127.0.0.1:${await closedPort()}`
  const check = (env: Record<string, string>) => spawnSync(haproxy, ['-c', '-f', HAPROXY_POSTGRES_CONFIG], {
    env: { PATH: process.env.PATH, POSTGRES_BIND: bind, ...env }, encoding: 'utf8'
  })
  t.not(check({}).status, 0, 'without PG_NODE_1 the file is refused, not run without servers')
  for (let count = 1; count <= MAX_POSTGRES_NODES; count++) {
    // Nodes where nothing listens: the servers are there, and down
    const nodes = await Promise.all(Array.from({ length: count }, async () =>
      ({ address: `127.0.0.1:${await closedPort()}`, apiPort: await closedPort() })))
    const result = check(Object.fromEntries(nodes.flatMap(({ address, apiPort }, i) =>
      [[`PG_NODE_${i + 1}`, address], [`PG_NODE_${i + 1}_CHECK_PORT`, String(apiPort)]])))
    t.equal(result.status, 0, `haproxy -c accepts it with ${count} node(s): ${result.stdout}${result.stderr}`)
    const running = await startPostgresHaproxy({ nodes })
    try {
      t.strictSame(Object.keys(await running.states()), nodes.map((_, i) => postgresServerName(i)), `servers with ${count} node(s)`)
    } finally {
      await running.stop()
    }
  }
  const config = read('haproxy-postgres.cfg')
  t.match(config, /^\s*option httpchk GET \/primary$/m, 'only the primary answers the check with 200')
  t.match(config, /on-marked-down shutdown-sessions/, 'connections to a node taken out are cut')
  const { markedDownWithin, markedUpWithin } = checkTimings(config)
  t.ok(markedDownWithin <= 2000 && markedUpWithin <= 2000, `a node out within ${markedDownWithin} ms, in within ${markedUpWithin} ms`)
})

t.test('Patroni accepts its file (with the variables the scripts set), with timings it allows', { skip: needsPrograms('patroni') }, async (t) => {
  const patroni = findProgram('patroni')
  const config = read('patroni.yml')
  const setting = (key: string) => Number(new RegExp(`^\\s+${key}: (\\d+)$`, 'm').exec(config)?.[1])
  const [ttl, loopWait, retryTimeout] = [setting('ttl'), setting('loop_wait'), setting('retry_timeout')]
  t.ok(loopWait + 2 * retryTimeout <= ttl, `loop_wait + 2 x retry_timeout (${loopWait} + 2 x ${retryTimeout}) <= ttl (${ttl})`)
  t.match(config, /^\s+synchronous_mode: true$/m, 'a commit is acknowledged once the standby has it')
  // The example's ports may be taken on this machine (5432 is): the scripts' own come from the environment
  const result = spawnSync(patroni, ['--validate-config', PATRONI_CONFIG], {
    env: {
      PATH: process.env.PATH,
      PATRONI_POSTGRESQL_LISTEN: `127.0.0.1:${await closedPort()}`,
      PATRONI_RESTAPI_LISTEN: `127.0.0.1:${await closedPort()}`
    },
    encoding: 'utf8'
  })
  t.strictSame({ status: result.status, output: `${result.stdout}${result.stderr}`.trim() }, { status: 0, output: '' }, 'patroni --validate-config finds nothing')
})

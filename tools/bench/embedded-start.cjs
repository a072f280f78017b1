'use strict'
/**
 * The embedded store's start: how long the service takes, from the spawn of its process to the
 * first 200 of `GET /health/ready`, and how much memory it holds once idle, on a new
 * `pglite:<directory>`, on a restart of that directory and on `pglite:memory`. The reference,
 * measured in the same run on the same machine: a plain `node` process doing what PGlite's own
 * documentation shows, `PGlite.create(<directory>)` with its default settings, in its main
 * thread, timed from its spawn to the resolved promise and measured idle the same way. A
 * script, not a test: it prints figures and exits 0 when it ran, 1 only when it could not run.
 *
 *   npm run bench:embedded
 *   ROUNDS=5 IDLE_MS=5000 npm run bench:embedded
 *
 * Environment: ROUNDS (default 3; each round measures every case once, in turn, and the table
 * shows medians), IDLE_MS (how long after the first answer the resident size is read, default
 * 3000). `npm run bench:embedded` builds first; the service is started exactly as `npm start`
 * starts it. Resident memory is VmRSS of the whole process (every thread) from /proc.
 */
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const { readFileSync, rmSync } = require('node:fs')
const { join } = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const { ROOT, freePort, median, readMemory, request, runBenchmark, serviceCommand, stopChild } = require('./common.cjs')

const ROUNDS = Number(process.env.ROUNDS ?? 3)
const IDLE_MS = Number(process.env.IDLE_MS ?? 3000)
const START_TIMEOUT_MS = 60_000
const STOP_TIMEOUT_MS = 15_000

/** VmRSS and VmHWM (the kernel's own peak) of `pid`, in MiB. */
function memory (pid) {
  const { rss, hwm } = readMemory(pid)
  return { rss: rss / 2 ** 20, peak: hwm / 2 ** 20 }
}

function exitedEarly (child, output) {
  return new Promise((resolve, reject) => child.once('exit', (code, signal) =>
    reject(new Error(`exited (${code ?? signal}) before it was ready:\n${output()}`))))
}

/** The service on `dbUrl`: spawn to the first 200 of /health/ready, then its idle memory. */
async function measureService (bench, dbUrl) {
  const port = await freePort()
  const { command, args, env } = serviceCommand({
    DB_URL: dbUrl,
    PORT: String(port),
    SECRET_TOKEN: randomBytes(36).toString('base64url'),
    LOG_LEVEL: 'warn'
  })
  const started = performance.now()
  const child = bench.track(spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] }))
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk) => { stderr += chunk })
  const exited = exitedEarly(child, () => stderr)
  exited.catch(() => {})
  const deadline = started + START_TIMEOUT_MS
  for (;;) {
    const status = await Promise.race([
      request(port, 'GET', '/health/ready', { timeoutMs: 2000 }).then(({ status }) => status, () => 0),
      exited
    ])
    if (status === 200) break
    if (performance.now() > deadline) throw new Error(`${dbUrl}: not ready within ${START_TIMEOUT_MS} ms\n${stderr}`)
    await sleep(10)
  }
  const ms = performance.now() - started
  await sleep(IDLE_MS)
  const { rss, peak } = memory(child.pid)
  await stopChild(child, STOP_TIMEOUT_MS)
  if (child.exitCode !== 0) throw new Error(`${dbUrl}: SIGTERM ended the service with ${child.exitCode ?? child.signalCode}\n${stderr}`)
  return { ms, rss, peak }
}

/** The reference: PGlite.create(dataDir) with PGlite's defaults, in a plain node process. */
const REFERENCE = `
  const { PGlite } = require('@electric-sql/pglite')
  PGlite.create(process.argv[1]).then((db) => {
    process.stdout.write('ready\\n')
    // PGlite holds no handle of its own: the timer keeps the process alive until SIGTERM
    const alive = setInterval(() => {}, 60_000)
    process.once('SIGTERM', () => db.close().then(() => clearInterval(alive)))
  })`

async function measureReference (bench, dataDir) {
  const started = performance.now()
  const child = bench.track(spawn(process.execPath, ['-e', REFERENCE, dataDir], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] }))
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk) => { stderr += chunk })
  const exited = exitedEarly(child, () => stderr)
  await Promise.race([new Promise((resolve) => child.stdout.once('data', resolve)), exited])
  const ms = performance.now() - started
  await sleep(IDLE_MS)
  const { rss, peak } = memory(child.pid)
  await stopChild(child, STOP_TIMEOUT_MS)
  return { ms, rss, peak }
}

runBenchmark('embedded-start', async (bench) => {
  const { version } = JSON.parse(readFileSync(join(ROOT, 'node_modules', '@electric-sql', 'pglite', 'package.json'), 'utf8'))
  console.log(`# embedded store start, PGlite ${version}, ${ROUNDS} rounds, resident size read ${IDLE_MS} ms after the first answer`)
  const cases = ['service, new directory', 'service, restart', 'service, pglite:memory', 'reference, new directory', 'reference, restart']
  const results = new Map(cases.map((name) => [name, []]))
  for (let round = 1; round <= ROUNDS; round++) {
    const serviceDir = join(bench.tmpDir, `service-${round}`)
    const referenceDir = join(bench.tmpDir, `reference-${round}`)
    const measured = [
      await measureService(bench, `pglite:${serviceDir}`),
      await measureService(bench, `pglite:${serviceDir}`),
      await measureService(bench, 'pglite:memory'),
      await measureReference(bench, referenceDir),
      await measureReference(bench, referenceDir)
    ]
    rmSync(serviceDir, { recursive: true, force: true })
    rmSync(referenceDir, { recursive: true, force: true })
    measured.forEach((result, i) => results.get(cases[i]).push(result))
    console.log(`round ${round}: ${measured.map(({ ms, rss }, i) => `${cases[i]} ${Math.round(ms)} ms ${rss.toFixed(1)} MiB`).join('; ')}`)
  }

  const summary = new Map([...results].map(([name, runs]) => [name, {
    ms: median(runs.map(({ ms }) => ms)),
    rss: median(runs.map(({ rss }) => rss)),
    peak: median(runs.map(({ peak }) => peak))
  }]))
  const reference = { 'service, new directory': 'reference, new directory', 'service, restart': 'reference, restart', 'service, pglite:memory': 'reference, new directory' }
  console.log('')
  console.log('| case                     | start ms | idle RSS MiB | peak RSS MiB | time / reference | RSS / reference |')
  console.log('|--------------------------|---------:|-------------:|-------------:|-----------------:|----------------:|')
  for (const [name, { ms, rss, peak }] of summary) {
    const against = summary.get(reference[name] ?? name)
    console.log(`| ${name.padEnd(24)} | ${String(Math.round(ms)).padStart(8)} | ${rss.toFixed(1).padStart(12)} | ${peak.toFixed(1).padStart(12)} | ` +
      `${(ms / against.ms).toFixed(2).padStart(16)} | ${(rss / against.rss).toFixed(2).padStart(15)} |`)
  }
  console.log('\nThe reference of pglite:memory is the reference\'s new directory (both create a cluster).')
})

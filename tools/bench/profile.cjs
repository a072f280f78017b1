'use strict'

/**
 * `npm run profile [-- <scenario>]`: the service, started by `npm start`'s own command line under
 * V8's CPU profiler (`node --cpu-prof`), under one scenario of `npm run bench` (the first whose
 * name contains <scenario>; GET /book/<id> by default) for PROFILE_SECONDS (default 10) after a
 * warm-up. Prints the functions that took the most time themselves (self time), then the same
 * time by where the code comes from (the service, each package, Node's own, the garbage
 * collector), as shares of the time the process was busy. The `.cpuprofile` is kept: Chrome's
 * DevTools (Performance, load profile) and speedscope draw it as a flame graph.
 *
 * Environment: TEST_DB_URL (default postgres://postgres@127.0.0.1:5432/postgres),
 * PROFILE_SECONDS, PROFILE_TOP (how many functions, default 30), BENCH_CLIENT=autocannon.
 */

const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')
const { ROOT, admin, cpuSeconds, issueToken, markdownTable, positive, runBenchmark, stopChild } = require('./common.cjs')
const { BOOKS, SCENARIOS, WARMUP_SECONDS, chooseClient, createRunner, describe, startService } = require('./load.cjs')

const SECONDS = positive('PROFILE_SECONDS', 10)
const TOP = positive('PROFILE_TOP', 30)

/**
 * Self time by function and by origin from a `.cpuprofile`: each sample is charged to the
 * function on top of the stack, for the time until the next sample.
 */
function selfTimes (profile) {
  const byNode = new Map(profile.nodes.map((node) => [node.id, node]))
  const micros = new Map()
  profile.samples.forEach((id, i) => micros.set(id, (micros.get(id) ?? 0) + (profile.timeDeltas[i + 1] ?? 0)))
  const functions = new Map()
  const origins = new Map()
  let total = 0
  let idle = 0
  for (const [id, time] of micros) {
    const { functionName, url, lineNumber } = byNode.get(id).callFrame
    total += time
    if (functionName === '(idle)') {
      idle += time
      continue
    }
    const where = url === '' ? '' : `${shortUrl(url)}:${lineNumber + 1}`
    const key = `${functionName || '(anonymous)'} ${where}`.trim()
    functions.set(key, (functions.get(key) ?? 0) + time)
    const origin = originOf(functionName, url)
    origins.set(origin, (origins.get(origin) ?? 0) + time)
  }
  return { total, busy: total - idle, functions, origins }
}

function shortUrl (url) {
  return url.replace(/^file:\/\//, '').replace(`${ROOT}/`, '')
}

/** The service's own code, a package of node_modules, Node's own, or V8's pseudo-frames. */
function originOf (functionName, url) {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native, V8 builtins)'
  if (url.startsWith('node:')) return 'Node.js itself'
  const file = shortUrl(url)
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file)
  if (inPackage !== null) return inPackage[1]
  return file.startsWith('dist/') ? 'the service (dist/)' : file
}

function topRows (times, busy, count) {
  return [...times].sort((a, b) => b[1] - a[1]).slice(0, count)
    .map(([name, time]) => [name, (time / 1000).toFixed(0), `${(time / busy * 100).toFixed(1)}%`])
}

async function main (bench) {
  const client = chooseClient()
  const run = createRunner(client, { tmpDir: bench.tmpDir, track: bench.track })
  const asked = process.argv[2] ?? 'GET /book/<id>'
  const scenario = SCENARIOS.find((s) => s.name.includes(asked))
  if (scenario === undefined) throw new Error(`no scenario's name contains ${JSON.stringify(asked)}; they are: ${SCENARIOS.map((s) => s.name).join('; ')}`)

  const { dbUrl } = await bench.createDatabase()
  const profileDir = path.join(bench.tmpDir, 'profile')
  const logPath = path.join(bench.tmpDir, 'service.log')
  const target = await startService(bench.track, dbUrl, randomBytes(36).toString('base64url'), logPath, { cpuProfileDir: profileDir })
  const { port, child } = target
  await admin((c) => c.query(`INSERT INTO books (title, author, year)
    SELECT 'Title ' || i, 'Author ' || i, 1900 + i FROM generate_series(1, $1::int) AS i`, [BOOKS]), dbUrl)

  const token = await issueToken(port)
  const listing = await scenario.target?.(port, token)
  await run(scenario, target, token, WARMUP_SECONDS, listing)
  const cpuBefore = cpuSeconds(child.pid)
  const result = await run(scenario, target, token, SECONDS, listing)
  const cpu = cpuSeconds(child.pid) - cpuBefore
  await stopChild(child, 30_000)
  fs.rmSync(logPath)

  const [file] = fs.readdirSync(profileDir).filter((name) => name.endsWith('.cpuprofile'))
  if (file === undefined) throw new Error(`the service wrote no profile in ${profileDir}`)
  const profilePath = path.join(profileDir, file)
  const { total, busy, functions, origins } = selfTimes(JSON.parse(fs.readFileSync(profilePath, 'utf8')))

  console.log(`\nbookkeeping profile, ${new Date().toISOString()}; code: ${describe('git', ['describe', '--always', '--dirty'])}`)
  console.log(`${scenario.name}: ${client.name}, ${SECONDS} s after a ${WARMUP_SECONDS} s warm-up; ${result.rps.toFixed(0)} req/s, ` +
    `p99 ${result.p99.toFixed(2)} ms, ${(cpu / result.requests * 1e6).toFixed(1)} µs CPU per request (the profiler adds some)`)
  console.log(`profiled ${(total / 1e6).toFixed(1)} s (the whole life of the process), busy ${(busy / 1e6).toFixed(1)} s; shares are of the busy time\n`)
  console.log(markdownTable(['by origin', 'self ms', 'share'], topRows(origins, busy, origins.size)))
  console.log(`\n${markdownTable([`top ${TOP} functions by self time`, 'self ms', 'share'], topRows(functions, busy, TOP))}`)
  console.log(`\nprofile: ${profilePath} (Chrome DevTools, Performance, or speedscope, for a flame graph)`)
}

runBenchmark('profile', main)

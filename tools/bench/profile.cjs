'use strict'

/**
 * `npm run profile [-- <scenario>]`: the service, started by `npm start`'s own command line under
 * a profiler, under one scenario of `npm run bench` (the first whose name contains <scenario>;
 * GET /book/<id> by default) for PROFILE_SECONDS (default 10) after a warm-up. Prints the
 * functions that took the most time themselves (self time), then the same time by where the code
 * comes from (the service, each package, Node's own, V8, the kernel), as shares of the time the
 * process was busy.
 *
 * Two profilers (PROFILE_WITH):
 * - `v8` (the default): `node --cpu-prof`. Its samples are on a wall clock: time the process
 *   spent descheduled is charged to the function it was in, most often a write that woke another
 *   process (docs/performance.md, How to measure). The `.cpuprofile` is kept: Chrome's
 *   DevTools (Performance, load profile) and speedscope draw it as a flame graph.
 * - `perf`: Linux's `perf record` on the process (`perf` from Debian's linux-perf), with
 *   `node --perf-basic-prof` naming the JavaScript functions. CPU time only, every thread's (the
 *   log's writes on libuv's threads, V8's collector on its own) and the kernel's part in the
 *   process's system calls. Self time charges V8's builtins (property loads, string joins) to
 *   V8, not to the JavaScript that called them; the `perf.data` is kept, with call graphs, for
 *   `perf report --children`, which does.
 *
 * Environment: TEST_DB_URL (default postgres://postgres@127.0.0.1:5432/postgres),
 * PROFILE_WITH, PROFILE_SECONDS, PROFILE_TOP (how many functions, default 30),
 * BENCH_CLIENT=autocannon.
 */

const { spawn, spawnSync } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')
const { ROOT, admin, cpuSeconds, issueToken, markdownTable, positive, runBenchmark, stopChild } = require('./common.cjs')
const { BOOKS, SCENARIOS, WARMUP_SECONDS, chooseClient, createRunner, describe, startService } = require('./load.cjs')

const SECONDS = positive('PROFILE_SECONDS', 10)
const TOP = positive('PROFILE_TOP', 30)
const PROFILER = process.env.PROFILE_WITH ?? 'v8'
if (PROFILER !== 'v8' && PROFILER !== 'perf') throw new Error(`PROFILE_WITH is ${JSON.stringify(PROFILER)}: v8 or perf`)

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

/**
 * Self time by symbol and by origin from `perf report`: each line is a symbol's share of the
 * samples (`12.34%  [.] name` or `[k]` for the kernel's); `perf-basic-prof` names a JavaScript
 * function `JS:*name file:///path:line:column` (`*` optimised, `~` not, `^` baseline).
 */
function perfSelfTimes (perfData, cpuMicros) {
  const report = spawnSync('perf', ['report', '-i', perfData, '--no-children', '--sort', 'sym', '--stdio', '--percent-limit', '0'], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 })
  if (report.status !== 0) throw new Error(`perf report failed: ${report.stderr}`)
  const functions = new Map()
  const origins = new Map()
  for (const line of report.stdout.split('\n')) {
    const match = /^\s*([0-9.]+)%\s+\[([.k])\]\s+(.*)$/.exec(line)
    if (match === null) continue
    const time = Number(match[1]) / 100 * cpuMicros
    const name = match[3].trim().replace(/^JS:[*~^]?/, '').replace(/file:\/\//, '').replace(`${ROOT}/`, '')
    functions.set(name, (functions.get(name) ?? 0) + time)
    const origin = match[2] === 'k' ? 'the kernel (system calls, TCP)' : perfOriginOf(match[3])
    origins.set(origin, (origins.get(origin) ?? 0) + time)
  }
  return { functions, origins }
}

function perfOriginOf (symbol) {
  if (!symbol.startsWith('JS:')) {
    return /^(Builtins_|v8::|Builtin:|BytecodeHandler|Stub:)/.test(symbol) ? 'V8 (builtins, runtime, collector)' : '(native: Node.js, libuv, OpenSSL, libc)'
  }
  const url = /\s(\S+):\d+:\d+$/.exec(symbol)?.[1] ?? ''
  return url === '' ? '(JavaScript, unnamed)' : originOf(symbol, url)
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
  // --perf-basic-prof also has V8 write its log, in the working directory unless told where
  const nodeFlags = PROFILER === 'perf'
    ? ['--perf-basic-prof', '--no-logfile-per-isolate', `--logfile=${path.join(bench.tmpDir, 'v8.log')}`]
    : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`]
  const target = await startService(bench.track, dbUrl, randomBytes(36).toString('base64url'), logPath, { nodeFlags })
  const { port, child } = target
  await admin((c) => c.query(`INSERT INTO books (title, author, year)
    SELECT 'Title ' || i, 'Author ' || i, 1900 + i FROM generate_series(1, $1::int) AS i`, [BOOKS]), dbUrl)

  const token = await issueToken(port)
  const listing = await scenario.target?.(port, token)
  await run(scenario, target, token, WARMUP_SECONDS, listing)
  const perfData = path.join(bench.tmpDir, 'perf.data')
  // Its failure kept, not left unhandled: perf refused at once (perf_event_paranoid) would end
  // the process in the middle of the run, the service and the database left behind
  const recording = PROFILER === 'perf' ? recordWithPerf(bench, child.pid, perfData).then(() => null, (err) => err) : null
  const cpuBefore = cpuSeconds(child.pid)
  const result = await run(scenario, target, token, SECONDS, listing)
  const cpu = cpuSeconds(child.pid) - cpuBefore
  const perfFailure = await recording
  if (perfFailure) throw perfFailure
  await stopChild(child, 30_000)
  fs.rmSync(logPath)

  let profile
  let kept
  if (PROFILER === 'perf') {
    // Its samples cover the measured run: their shares are of the CPU the process spent in it
    profile = { ...perfSelfTimes(perfData, cpu * 1e6), busy: cpu * 1e6 }
    // perf reads a process's JavaScript names from /tmp/perf-<pid>.map: moved beside the data
    const map = path.join(bench.tmpDir, `perf-${child.pid}.map`)
    fs.renameSync(`/tmp/perf-${child.pid}.map`, map)
    kept = `${perfData}, with call graphs: \`perf report -i ${perfData} --children\` charges V8's builtins to the ` +
      `JavaScript that called them (copy ${map} back to /tmp first, for the JavaScript names)`
  } else {
    const [file] = fs.readdirSync(profileDir).filter((name) => name.endsWith('.cpuprofile'))
    if (file === undefined) throw new Error(`the service wrote no profile in ${profileDir}`)
    kept = `${path.join(profileDir, file)} (Chrome DevTools, Performance, or speedscope, for a flame graph)`
    profile = selfTimes(JSON.parse(fs.readFileSync(path.join(profileDir, file), 'utf8')))
  }
  const { total, busy, functions, origins } = profile

  console.log(`\nbookkeeping profile (${PROFILER}), ${new Date().toISOString()}; code: ${describe('git', ['describe', '--always', '--dirty'])}`)
  console.log(`${scenario.name}: ${client.name}, ${SECONDS} s after a ${WARMUP_SECONDS} s warm-up; ${result.rps.toFixed(0)} req/s, ` +
    `p99 ${result.p99.toFixed(2)} ms, ${(cpu / result.requests * 1e6).toFixed(1)} µs CPU per request (the profiler adds some)`)
  console.log(PROFILER === 'perf'
    ? `profiled the ${SECONDS} s run: ${(busy / 1e6).toFixed(1)} s of CPU, every thread's and the kernel's for it; shares are of that CPU\n`
    : `profiled ${(total / 1e6).toFixed(1)} s (the whole life of the process), busy ${(busy / 1e6).toFixed(1)} s on V8's wall clock; shares are of the busy time\n`)
  console.log(markdownTable(['by origin', 'self ms', 'share'], topRows(origins, busy, origins.size)))
  console.log(`\n${markdownTable([`top ${TOP} functions by self time`, 'self ms', 'share'], topRows(functions, busy, TOP))}`)
  console.log(`\nprofile: ${kept}`)
}

/** `perf record` on `pid` for the measured run; resolves when it has written `perfData`. */
function recordWithPerf (bench, pid, perfData) {
  return new Promise((resolve, reject) => {
    const perf = bench.track(spawn('perf', ['record', '-F', '999', '-g', '-p', String(pid), '-o', perfData, '--', 'sleep', String(SECONDS)], { stdio: ['ignore', 'ignore', 'pipe'] }))
    let stderr = ''
    perf.stderr.setEncoding('utf8').on('data', (chunk) => { stderr += chunk })
    perf.once('error', (err) => reject(new Error(`perf could not run (Debian's linux-perf has it): ${err.message}`)))
    perf.once('close', (code) => code === 0 ? resolve() : reject(new Error(`perf record ended with ${code}: ${stderr}`)))
  })
}

runBenchmark('profile', main)

'use strict'
/**
 * What the benchmarks that drive the service with wrk share (tools/bench/run.cjs,
 * tools/bench/topology.cjs): their settings, the scenarios, the load generators, the summary of
 * the rounds, and putting the table back between runs.
 */
const { execFileSync, spawn, spawnSync } = require('node:child_process')
const { randomUUID } = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const { ROOT, USERNAME, PASSWORD, admin, freePort, issueToken, median, positive, serviceCommand } = require('./common.cjs')

const SECONDS = positive('BENCH_SECONDS', 5)
const ROUNDS = positive('ROUNDS', 3)
// While working on one scenario: BENCH_ONLY=POST runs the scenarios whose name contains it
const ONLY = process.env.BENCH_ONLY || undefined
const WARMUP_SECONDS = 1
const CONNECTIONS = positive('BENCH_CONNECTIONS', 32)
const THREADS = 2
const BOOKS = 100

/**
 * The benchmarked requests. `lua` is the body of the wrk script (the token is a Lua global
 * `token`); `autocannon` the same request for the fallback client; `mutates` means the table is
 * put back to its 100 rows after every run.
 */
const BOOK_BODY = JSON.stringify({ title: 'The Benchmark', author: 'A. N. Author', year: 2024 })
const POST_BOOK = {
  lua: `wrk.method = "POST"
wrk.path = "/book"
wrk.headers["Authorization"] = token
wrk.headers["Content-Type"] = "application/json"
wrk.body = ${luaString(BOOK_BODY)}`,
  autocannon: (token) => ({
    method: 'POST', path: '/book', headers: { authorization: token, 'content-type': 'application/json' }, body: BOOK_BODY
  })
}
const SCENARIOS = [
  {
    name: 'GET /book/<id>',
    lua: `wrk.method = "GET"
wrk.headers["Authorization"] = token
request = function ()
  return wrk.format(nil, "/book/" .. math.random(1, ${BOOKS}))
end`,
    autocannon: (token) => ({
      method: 'GET',
      headers: { authorization: token },
      setupRequest: (req) => ({ ...req, path: `/book/${randomId()}` })
    })
  },
  {
    name: `GET /books (${BOOKS} rows)`,
    lua: `wrk.method = "GET"
wrk.path = "/books"
wrk.headers["Authorization"] = token`,
    autocannon: (token) => ({ method: 'GET', path: '/books', headers: { authorization: token } })
  },
  // Walks of the paged listing, on the service alone (the reference serves no pages): a first page by
  // title, the page after it (its cursor read once before the runs), and a filter
  listingScenario('GET /books?limit=20&sort=title', () => '/books?limit=20&sort=title'),
  listingScenario('GET /books?limit=20&sort=title, the next page', nextPage('/books?limit=20&sort=title')),
  listingScenario('GET /books?title=Title%201 (12 rows)', () => '/books?title=Title%201'),
  { name: 'POST /book', mutates: true, ...POST_BOOK },
  {
    // Every request with a key of its own: what a client that retries safely pays
    name: 'POST /book, Idempotency-Key',
    mutates: true,
    lua: `${POST_BOOK.lua}
local prefix = nil
local sent = 0
request = function ()
  -- Keys of each run and thread apart: the start time and the thread's number
  prefix = prefix or (os.time() .. "-" .. thread_number)
  sent = sent + 1
  wrk.headers["Idempotency-Key"] = '"' .. prefix .. "-" .. sent .. '"'
  return wrk.format()
end`,
    autocannon: (token) => {
      const request = POST_BOOK.autocannon(token)
      return { ...request, setupRequest: (req) => ({ ...req, headers: { ...request.headers, 'idempotency-key': `"${randomUUID()}"` } }) }
    }
  },
  {
    name: 'PUT /book/<id>',
    mutates: true,
    lua: `wrk.method = "PUT"
wrk.headers["Authorization"] = token
wrk.headers["Content-Type"] = "application/json"
request = function ()
  return wrk.format(nil, "/book/" .. math.random(1, ${BOOKS}), nil, '{"year":' .. math.random(1000, 2100) .. '}')
end`,
    autocannon: (token) => ({
      method: 'PUT',
      headers: { authorization: token, 'content-type': 'application/json' },
      setupRequest: (req) => ({ ...req, path: `/book/${randomId()}`, body: JSON.stringify({ year: 1000 + Math.floor(Math.random() * 1101) }) })
    })
  },
  {
    name: 'POST /token',
    lua: `wrk.method = "POST"
wrk.path = "/token"
wrk.headers["Content-Type"] = "application/json"
wrk.body = ${luaString(JSON.stringify({ username: USERNAME, password: PASSWORD }))}`,
    autocannon: () => ({
      method: 'POST', path: '/token', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: USERNAME, password: PASSWORD })
    })
  }
]

/**
 * A GET of a listing the service alone serves; `target(port, token)` gives its path once, before
 * the runs of a round.
 */
function listingScenario (name, target) {
  return {
    name,
    serviceOnly: true,
    target,
    lua: `wrk.method = "GET"
wrk.headers["Authorization"] = token
wrk.path = path`,
    autocannon: (token, listing) => ({ method: 'GET', path: listing, headers: { authorization: token } })
  }
}

/** The path of the page after `first`, from its `Link`. */
function nextPage (first) {
  return async (port, token) => {
    const response = await fetch(`http://127.0.0.1:${port}${first}`, { headers: { authorization: token } })
    await response.arrayBuffer()
    const next = /^<([^>]+)>; rel="next"$/.exec(response.headers.get('link') ?? '')
    if (response.status !== 200 || next === null) throw new Error(`${first} answered ${response.status} with no next page`)
    return next[1]
  }
}

function randomId () {
  return 1 + Math.floor(Math.random() * BOOKS)
}

function luaString (text) {
  return JSON.stringify(text) // a JSON string of ASCII text is a valid Lua string literal
}

/**
 * Each wrk thread seeds its own generator; `done` prints the run's numbers as one JSON line
 * (latencies in microseconds; `status` counts responses with a status of 400 or more).
 */
function luaScript (scenario, token, target) {
  return `token = ${luaString(token)}
path = ${luaString(target ?? '/')}
local threads = 0
function setup (thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end
function init (args)
  math.randomseed(os.time() * 1000 + thread_number * 7919)
end
${scenario.lua}
function done (summary, latency, requests)
  local e = summary.errors
  io.write(string.format('BENCH_RESULT {"requests":%.0f,"duration_us":%.0f,"bytes":%.0f,' ..
    '"p50_us":%.0f,"p90_us":%.0f,"p99_us":%.0f,"max_us":%.0f,"mean_us":%.1f,' ..
    '"connect":%.0f,"read":%.0f,"write":%.0f,"status":%.0f,"timeout":%.0f}\\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
`
}

/** Back to rows 1..100: what a run inserted goes, and dead rows are vacuumed away. */
async function resetTable (dbUrl) {
  await admin(async (client) => {
    await client.query('DELETE FROM books WHERE id > $1', [BOOKS])
    await client.query('VACUUM ANALYZE books')
    // The service's alone: the log of changes the writes added, the Idempotency-Keys
    for (const table of ['book_changes', 'idempotency_keys']) {
      if ((await client.query('SELECT to_regclass($1) IS NOT NULL AS present', [table])).rows[0].present) {
        await client.query(`TRUNCATE ${table}`)
      }
    }
  }, dbUrl)
}

// --- servers ----------------------------------------------------------------------------------

const START_TIMEOUT_MS = 20_000

function tail (file) {
  try {
    return `--- last lines of ${file} ---\n${fs.readFileSync(file, 'utf8').split('\n').slice(-30).join('\n')}`
  } catch {
    return ''
  }
}

/** Until `probe(port)` succeeds (POST /token by default); fails when the process exits first. */
async function waitUntilReady (name, child, port, logPath, probe = issueToken) {
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before it answered\n${tail(logPath)}`)
    }
    try {
      await probe(port)
      return
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${name} did not answer within ${START_TIMEOUT_MS} ms: ${err.message}\n${tail(logPath)}`)
    }
    await sleep(100)
  }
}

/**
 * The reference server (tools/bench/reference.cjs) on `dbUrl`, with the service's `secret` (it
 * takes the service's tokens), its output appended to `logPath`.
 */
async function startReference (track, dbUrl, secret, logPath, name = 'reference') {
  const port = await freePort()
  const log = fs.openSync(logPath, 'a')
  const child = track(spawn(process.execPath, [path.join(__dirname, 'reference.cjs')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      DB_URL: dbUrl,
      SECRET_TOKEN: secret,
      AUTH_USERNAME: USERNAME,
      AUTH_PASSWORD: PASSWORD,
      PORT: String(port),
      HOST: '127.0.0.1'
    },
    stdio: ['ignore', log, log]
  }))
  fs.closeSync(log)
  await waitUntilReady('the reference server', child, port, logPath)
  return { name, dbUrl, url: `http://127.0.0.1:${port}`, port, child }
}

/**
 * The service as `npm start` runs it (the caller's npm script built it) on `dbUrl`, its output
 * appended to `logPath`, its token limits out of the way (/token is measured, not the limiters);
 * `root` and `nodeFlags` as common.cjs's serviceCommand takes them.
 */
async function startService (track, dbUrl, secret, logPath, { name = 'service', root = ROOT, nodeFlags, variables = {} } = {}) {
  const port = await freePort()
  const { command, args, env } = serviceCommand({
    DB_URL: dbUrl,
    SECRET_TOKEN: secret,
    PORT: String(port),
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'info',
    TOKEN_RATE_LIMIT: '1000000000',
    TOKEN_USERNAME_RATE_LIMIT: '1000000000',
    ...variables
  }, { root, nodeFlags })
  const log = fs.openSync(logPath, 'a')
  const child = track(spawn(command, args, { cwd: root, env, stdio: ['ignore', log, log] }))
  fs.closeSync(log)
  await waitUntilReady(`the ${name}`, child, port, logPath)
  return { name, dbUrl, url: `http://127.0.0.1:${port}`, port, child }
}

// --- load generators --------------------------------------------------------------------------

/** 'wrk' when wrk is there or could be installed, else 'autocannon'. */
function chooseClient () {
  if (process.env.BENCH_CLIENT === 'autocannon') return { name: 'autocannon', version: require('autocannon/package.json').version }
  const found = () => {
    const result = spawnSync('wrk', ['-v'], { encoding: 'utf8' })
    if (result.error) return null
    return { name: 'wrk', version: `${result.stdout}${result.stderr}`.split('\n')[0].replace(/ Copyright.*$/, '').replace(/^wrk /, '').trim() }
  }
  let wrk = found()
  if (wrk === null) {
    console.log('bench: wrk not found, trying apt-get install -y wrk')
    const install = () => spawnSync('apt-get', ['install', '-y', 'wrk'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } })
    if (install().status !== 0) {
      spawnSync('apt-get', ['update'], { stdio: 'inherit' })
      install()
    }
    wrk = found()
  }
  if (wrk === null) {
    console.log('bench: wrk could not be installed, falling back to autocannon')
    return { name: 'autocannon', version: require('autocannon/package.json').version }
  }
  return wrk
}

function runWrk (scenario, target, token, seconds, { tmpDir, track }, listing) {
  const script = path.join(tmpDir, 'scenario.lua')
  fs.writeFileSync(script, luaScript(scenario, token, listing))
  return new Promise((resolve, reject) => {
    const child = track(spawn('wrk', [
      '-t', String(THREADS), '-c', String(CONNECTIONS), '-d', `${seconds}s`, '--timeout', '5s', '-s', script, target.url
    ], { stdio: ['ignore', 'pipe', 'pipe'] }))
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (chunk) => { out += chunk })
    child.stderr.setEncoding('utf8').on('data', (chunk) => { out += chunk })
    child.once('error', reject)
    child.once('close', (code, signal) => {
      const line = out.split('\n').find((text) => text.startsWith('BENCH_RESULT '))
      if (code !== 0 || line === undefined) {
        reject(new Error(`wrk ended with ${code ?? signal} and no result:\n${out}`))
        return
      }
      const r = JSON.parse(line.slice('BENCH_RESULT '.length))
      resolve({
        requests: r.requests,
        rps: r.requests / (r.duration_us / 1e6),
        p50: r.p50_us / 1000,
        p90: r.p90_us / 1000,
        p99: r.p99_us / 1000,
        max: r.max_us / 1000,
        non2xx: r.status,
        errors: r.connect + r.read + r.write + r.timeout,
        errorDetail: { connect: r.connect, read: r.read, write: r.write, timeout: r.timeout }
      })
    })
  })
}

async function runAutocannon (scenario, target, token, seconds, listing) {
  const autocannon = require('autocannon')
  const r = await autocannon({
    url: target.url,
    connections: CONNECTIONS,
    duration: seconds,
    timeout: 5,
    requests: [scenario.autocannon(token, listing)]
  })
  return {
    requests: r.requests.total,
    rps: r.requests.total / r.duration,
    p50: r.latency.p50,
    p90: r.latency.p90,
    p99: r.latency.p99,
    max: r.latency.max,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    errorDetail: { errors: r.errors, timeouts: r.timeouts }
  }
}

/**
 * `run(scenario, target, token, seconds)` with the client `chooseClient` found: wrk writes its
 * script to `tmpDir`; `track` records each wrk process so that a stopped benchmark stops it too.
 */
function createRunner (client, { tmpDir, track }) {
  return client.name === 'wrk'
    ? (scenario, target, token, seconds, listing) => runWrk(scenario, target, token, seconds, { tmpDir, track }, listing)
    : runAutocannon
}

function summarise (runs) {
  return {
    rps: median(runs.map((run) => run.rps)),
    p50: median(runs.map((run) => run.p50)),
    p99: median(runs.map((run) => run.p99)),
    // CPU µs per request, where the runs measured it (tools/bench/run.cjs)
    cpuUs: median(runs.map((run) => run.cpuUs)),
    pgCpuUs: median(runs.map((run) => run.pgCpuUs)),
    non2xx: runs.reduce((sum, run) => sum + run.non2xx, 0),
    errors: runs.reduce((sum, run) => sum + run.errors, 0),
    runs
  }
}

function describe (command, args) {
  try {
    return execFileSync(command, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {
    return 'unknown'
  }
}

module.exports = {
  startReference,
  waitUntilReady,
  startService,
  SECONDS,
  ROUNDS,
  ONLY,
  WARMUP_SECONDS,
  CONNECTIONS,
  THREADS,
  BOOKS,
  BOOK_BODY,
  SCENARIOS,
  positive,
  resetTable,
  chooseClient,
  createRunner,
  median,
  summarise,
  describe
}

'use strict'

/**
 * `npm run bench`: the service (started exactly as `npm start` does) against the hand-written
 * reference server (test/bench/reference.js), on one fresh database, same machine, same client.
 *
 * Environment: BENCH_SECONDS (per measured run, default 5), ROUNDS (default 3), TEST_DB_URL
 * (default postgres://postgres@127.0.0.1:5432/postgres), BENCH_CLIENT=autocannon to skip wrk,
 * BENCH_ONLY (run only the scenarios whose name contains it).
 *
 * Prints one table and writes the raw numbers as JSON under os.tmpdir(); nothing in the
 * repository changes. Exits 0 when it ran, whatever the numbers: this is not a test.
 */

const { execFileSync, spawn, spawnSync } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const {
  ROOT, USERNAME, PASSWORD, admin, databaseUrl, freePort, serviceCommand, stopChild, request, issueToken
} = require('./common.js')

const SECONDS = positive('BENCH_SECONDS', 5)
const ROUNDS = positive('ROUNDS', 3)
// While working on one scenario: BENCH_ONLY=POST runs the scenarios whose name contains it
const ONLY = process.env.BENCH_ONLY || undefined
const WARMUP_SECONDS = 1
const CONNECTIONS = 32
const THREADS = 2
const BOOKS = 100
const START_TIMEOUT_MS = 20_000

const SECRET = randomBytes(36).toString('base64url') // 48 characters

function positive (name, fallback) {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${raw}`)
  return value
}

/**
 * The benchmarked requests. `lua` is the body of the wrk script (the token is a Lua global
 * `token`); `autocannon` the same request for the fallback client; `mutates` means the table is
 * put back to its 100 rows after every run.
 */
const BOOK_BODY = JSON.stringify({ title: 'The Benchmark', author: 'A. N. Author', year: 2024 })
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
  {
    name: 'POST /book',
    mutates: true,
    lua: `wrk.method = "POST"
wrk.path = "/book"
wrk.headers["Authorization"] = token
wrk.headers["Content-Type"] = "application/json"
wrk.body = ${luaString(BOOK_BODY)}`,
    autocannon: (token) => ({
      method: 'POST', path: '/book', headers: { authorization: token, 'content-type': 'application/json' }, body: BOOK_BODY
    })
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
function luaScript (scenario, token) {
  return `token = ${luaString(token)}
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

// --- everything started is recorded here, so that cleanup can undo it -------------------------

const state = {
  children: new Set(),
  dbName: null,
  tmpDir: null,
  cleaning: null
}

function cleanup () {
  state.cleaning ??= (async () => {
    await Promise.all([...state.children].map((child) => stopChild(child, 10_000)))
    if (state.dbName !== null) {
      await admin((client) => client.query(`DROP DATABASE IF EXISTS ${state.dbName} WITH (FORCE)`))
        .catch((err) => console.error(`bench: could not drop database ${state.dbName}: ${err.message}`))
    }
  })()
  return state.cleaning
}

function track (child) {
  state.children.add(child)
  child.once('exit', () => state.children.delete(child))
  return child
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    console.error(`\nbench: ${signal}, stopping the servers and dropping the database`)
    cleanup().finally(() => process.exit(128 + os.constants.signals[signal]))
  })
}

// --- database ---------------------------------------------------------------------------------

/** Back to rows 1..100: what a run inserted goes, and dead rows are vacuumed away. */
async function resetTable (dbUrl) {
  await admin(async (client) => {
    await client.query('DELETE FROM books WHERE id > $1', [BOOKS])
    await client.query('VACUUM ANALYZE books')
  }, dbUrl)
}

// --- processes --------------------------------------------------------------------------------

/** Polls POST /token until it answers 200; fails when the process exits first. */
async function waitUntilReady (name, child, port, logPath) {
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before it answered\n${tail(logPath)}`)
    }
    try {
      await issueToken(port)
      return
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${name} did not answer within ${START_TIMEOUT_MS} ms: ${err.message}\n${tail(logPath)}`)
    }
    await sleep(100)
  }
}

function tail (file) {
  try {
    return `--- last lines of ${file} ---\n${fs.readFileSync(file, 'utf8').split('\n').slice(-30).join('\n')}`
  } catch {
    return ''
  }
}

/** The service as `npm start` runs it (its prestart build is done by `npm run bench`). */
async function startService (dbUrl, logPath) {
  const port = await freePort()
  const { command, args, env } = serviceCommand({
    DB_URL: dbUrl,
    SECRET_TOKEN: SECRET,
    PORT: String(port),
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'info',
    // /token is measured, not the limiter
    TOKEN_RATE_LIMIT: '1000000000'
  })
  const log = fs.openSync(logPath, 'a')
  const child = track(spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', log, log] }))
  fs.closeSync(log)
  await waitUntilReady('the service', child, port, logPath)
  return { name: 'service', url: `http://127.0.0.1:${port}`, port, child }
}

async function startReference (dbUrl, logPath) {
  const port = await freePort()
  const log = fs.openSync(logPath, 'a')
  const child = track(spawn(process.execPath, [path.join(__dirname, 'reference.js')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      DB_URL: dbUrl,
      SECRET_TOKEN: SECRET,
      AUTH_USERNAME: USERNAME,
      AUTH_PASSWORD: PASSWORD,
      PORT: String(port),
      HOST: '127.0.0.1'
    },
    stdio: ['ignore', log, log]
  }))
  fs.closeSync(log)
  await waitUntilReady('the reference server', child, port, logPath)
  return { name: 'reference', url: `http://127.0.0.1:${port}`, port, child }
}

/**
 * Both servers must answer the benchmarked requests alike before their speed means anything.
 * Returns the differences found (printed, not fatal).
 */
async function compareAnswers (service, reference) {
  const token = await issueToken(service.port)
  const checks = [
    ['GET', '/book/7'],
    ['GET', '/books'],
    ['GET', '/book/100000'],
    ['PUT', '/book/7', { year: 1999 }],
    ['PUT', '/book/7', {}],
    ['PUT', '/book/100000', { year: 1 }],
    ['PUT', '/book/7', { year: '1999' }],
    ['POST', '/book', { title: 'x' }],
    ['GET', '/books', undefined, 'not-a-token'],
    ['GET', '/books', undefined, '']
  ]
  const differences = []
  for (const [method, urlPath, body, tokenOverride] of checks) {
    const answers = []
    for (const server of [service, reference]) {
      answers.push(await request(server.port, method, urlPath, { body, token: tokenOverride ?? token }))
    }
    if (answers[0].status !== answers[1].status || answers[0].text !== answers[1].text) {
      differences.push(`${method} ${urlPath}${body === undefined ? '' : ` ${JSON.stringify(body)}`}: ` +
        `service ${answers[0].status} ${answers[0].text.slice(0, 120)} | reference ${answers[1].status} ${answers[1].text.slice(0, 120)}`)
    }
  }
  // Each server's token must pass the other's check
  for (const [issuer, verifier] of [[service, reference], [reference, service]]) {
    const answer = await request(verifier.port, 'GET', '/book/1', { token: await issueToken(issuer.port) })
    if (answer.status !== 200) differences.push(`a ${issuer.name} token is refused by the ${verifier.name}: ${answer.status} ${answer.text}`)
  }
  const created = await Promise.all([service, reference].map((server) => request(server.port, 'POST', '/book', { body: JSON.parse(BOOK_BODY), token })))
  for (const [i, answer] of created.entries()) {
    const { data, ...rest } = answer.json ?? {}
    if (answer.status !== 201 || JSON.stringify(rest) !== '{"status":201,"message":"Book created successfully"}' ||
        JSON.stringify({ ...data, id: 0 }) !== JSON.stringify({ id: 0, ...JSON.parse(BOOK_BODY) })) {
      differences.push(`POST /book on the ${i === 0 ? 'service' : 'reference'}: ${answer.status} ${answer.text}`)
    }
  }
  return differences
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

function runWrk (scenario, target, token, seconds) {
  const script = path.join(state.tmpDir, 'scenario.lua')
  fs.writeFileSync(script, luaScript(scenario, token))
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

async function runAutocannon (scenario, target, token, seconds) {
  const autocannon = require('autocannon')
  const r = await autocannon({
    url: target.url,
    connections: CONNECTIONS,
    duration: seconds,
    timeout: 5,
    requests: [scenario.autocannon(token)]
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

// --- report -----------------------------------------------------------------------------------

function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

function summarise (runs) {
  return {
    rps: median(runs.map((run) => run.rps)),
    p50: median(runs.map((run) => run.p50)),
    p99: median(runs.map((run) => run.p99)),
    non2xx: runs.reduce((sum, run) => sum + run.non2xx, 0),
    errors: runs.reduce((sum, run) => sum + run.errors, 0),
    runs
  }
}

function table (rows) {
  const header = ['scenario', 'service req/s', 'p50 ms', 'p99 ms', 'reference req/s', 'p50 ms', 'p99 ms', 'service/reference']
  const body = rows.map(({ scenario, service, reference }) => [
    scenario,
    service.rps.toFixed(0), service.p50.toFixed(2), service.p99.toFixed(2),
    reference.rps.toFixed(0), reference.p50.toFixed(2), reference.p99.toFixed(2),
    (service.rps / reference.rps).toFixed(2)
  ])
  const widths = header.map((title, i) => Math.max(title.length, ...body.map((row) => row[i].length)))
  const line = (cells) => `| ${cells.map((cell, i) => i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i])).join(' | ')} |`
  return [line(header), `|${widths.map((width, i) => i === 0 ? `-${'-'.repeat(width)}-` : `${'-'.repeat(width + 1)}:`).join('|')}|`, ...body.map(line)].join('\n')
}

function describe (command, args) {
  try {
    return execFileSync(command, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {
    return 'unknown'
  }
}

// --- main -------------------------------------------------------------------------------------

async function main () {
  const began = Date.now()
  state.tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bookkeeping-bench-'))
  const serviceLog = path.join(state.tmpDir, 'service.log')
  const referenceLog = path.join(state.tmpDir, 'reference.log')
  const client = chooseClient()
  const run = client.name === 'wrk' ? runWrk : runAutocannon

  const name = `bookkeeping_bench_${randomBytes(6).toString('hex')}`
  await admin((c) => c.query(`CREATE DATABASE ${name}`))
  state.dbName = name
  const dbUrl = databaseUrl(name)
  const pgVersion = await admin(async (c) => (await c.query('SHOW server_version')).rows[0].server_version)

  // The service creates the table on start; the reference server starts on the seeded table
  const service = await startService(dbUrl, serviceLog)
  await admin(async (c) => {
    await c.query(`INSERT INTO books (title, author, year)
      SELECT 'Title ' || i, 'Author ' || i, 1900 + i FROM generate_series(1, $1::int) AS i`, [BOOKS])
    const { rows } = await c.query('SELECT count(*)::int AS count, max(id)::int AS max FROM books')
    if (rows[0].count !== BOOKS || rows[0].max !== BOOKS) throw new Error(`seeding gave ${JSON.stringify(rows[0])}, expected ids 1..${BOOKS}`)
  }, dbUrl)
  const reference = await startReference(dbUrl, referenceLog)

  const differences = await compareAnswers(service, reference)
  await resetTable(dbUrl)

  const cpus = os.cpus()
  const header = [
    `bookkeeping benchmark, ${new Date().toISOString()}`,
    `machine: ${cpus.length} CPU (${cpus[0]?.model ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}; ` +
      `node ${process.version}; PostgreSQL ${pgVersion}; ${client.name} ${client.version}`,
    `code: ${describe('git', ['describe', '--always', '--dirty'])} (service built from the working tree)`,
    `method: ${client.name === 'wrk' ? `wrk -t${THREADS}` : 'autocannon'} -c${CONNECTIONS}, ${SECONDS} s per run after a ${WARMUP_SECONDS} s warm-up run; ` +
      `${ROUNDS} rounds per scenario alternating service, reference; medians of the rounds`,
    `  client, both servers and PostgreSQL share this machine; both servers on one database (${BOOKS} rows, ids 1..${BOOKS}),`,
    `  GET/PUT /book/<id> pick ids uniformly from 1..${BOOKS}; after each run of a writing scenario the rows it`,
    `  inserted are deleted and the table vacuumed, so every run starts from the same ${BOOKS} rows`,
    `  service: \`npm start\` (fastify-cli)${Number(process.env.BENCH_WORKERS || 1) > 1 ? ` in ${process.env.BENCH_WORKERS} node:cluster workers` : ''}, LOG_LEVEL=${process.env.BENCH_LOG_LEVEL ?? 'info'} to a file, pool max 10, TOKEN_RATE_LIMIT=1e9;`,
    '  reference: test/bench/reference.js (node:http + pg, pg.Pool defaults: max 10, no logging)'
  ]
  console.log(`\n${header.join('\n')}\n`)
  if (differences.length > 0) {
    console.log('!!! the two servers answer differently:')
    for (const difference of differences) console.log(`!!!   ${difference}`)
    console.log('')
  }

  const results = []
  for (const scenario of SCENARIOS.filter((s) => ONLY === undefined || s.name.includes(ONLY))) {
    const runs = { service: [], reference: [] }
    for (let round = 1; round <= ROUNDS; round++) {
      for (const target of [service, reference]) {
        const token = await issueToken(service.port)
        await run(scenario, target, token, WARMUP_SECONDS)
        if (scenario.mutates) await resetTable(dbUrl)
        const result = await run(scenario, target, token, SECONDS)
        if (scenario.mutates) await resetTable(dbUrl)
        runs[target.name].push(result)
        process.stderr.write(`  ${scenario.name}, round ${round}, ${target.name}: ${result.rps.toFixed(0)} req/s, ` +
          `p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms` +
          `${result.non2xx > 0 ? `, ${result.non2xx} NON-2xx` : ''}${result.errors > 0 ? `, socket errors ${JSON.stringify(result.errorDetail)}` : ''}\n`)
        if (result.non2xx > 0) {
          const sample = await sampleAnswer(scenario, target, token)
          process.stderr.write(`  !!! ${result.non2xx} of ${result.requests} responses were not 2xx; one request now answers ${sample}\n`)
        }
      }
    }
    results.push({ scenario: scenario.name, service: summarise(runs.service), reference: summarise(runs.reference) })
  }

  console.log(`\n${table(results)}\n`)
  const anomalies = []
  for (const { scenario, service: s, reference: r } of results) {
    for (const [label, summary] of [['service', s], ['reference', r]]) {
      if (summary.non2xx > 0) anomalies.push(`${scenario}: ${summary.non2xx} non-2xx responses from the ${label}`)
      if (summary.errors > 0) anomalies.push(`${scenario}: ${summary.errors} socket errors/timeouts with the ${label}`)
    }
  }
  for (const anomaly of anomalies) console.log(`!!! ${anomaly}`)
  if (differences.length > 0) console.log(`!!! ${differences.length} answer difference(s) between the servers, listed above`)
  if (anomalies.length === 0 && differences.length === 0) console.log('all responses 2xx, no socket errors; both servers answered the checks alike')

  const resultsPath = path.join(state.tmpDir, 'results.json')
  fs.writeFileSync(resultsPath, JSON.stringify({ header, client, seconds: SECONDS, rounds: ROUNDS, connections: CONNECTIONS, threads: THREADS, differences, anomalies, results }, null, 2))
  fs.rmSync(path.join(state.tmpDir, 'scenario.lua'), { force: true })
  // The request log is large; it is kept only when something needs explaining
  if (anomalies.length === 0) fs.rmSync(serviceLog, { force: true })
  else console.log(`service log: ${serviceLog}`)
  console.log(`raw results: ${resultsPath}`)
  console.log(`total time: ${((Date.now() - began) / 1000).toFixed(0)} s`)
}

/** One request like the scenario's, to show what a non-2xx answer was. */
async function sampleAnswer (scenario, target, token) {
  const spec = scenario.autocannon(token)
  const req = spec.setupRequest ? spec.setupRequest({ ...spec }) : spec
  try {
    const response = await fetch(`${target.url}${req.path}`, { method: req.method, headers: req.headers, body: req.body, signal: AbortSignal.timeout(5000) })
    return `${response.status} ${(await response.text()).slice(0, 200)}`
  } catch (err) {
    return `an error: ${err.message}`
  }
}

main().then(
  () => cleanup(),
  async (err) => {
    // After a signal, failures of the run being torn down are expected and not worth a stack
    if (state.cleaning !== null) return
    console.error(`bench: ${err.stack ?? err}`)
    await cleanup()
    process.exitCode = 1
  }
)

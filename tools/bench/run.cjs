'use strict'

/**
 * `npm run bench`: the service (started exactly as `npm start` does) against the hand-written
 * reference server (tools/bench/reference.cjs), on one fresh database, same machine, same client,
 * with the CPU each spends per request and PostgreSQL's, and against node:http alone
 * (tools/bench/bare-http.cjs), the floor, measured in every round.
 *
 * Environment: BENCH_SECONDS (per measured run, default 5), ROUNDS (default 3), TEST_DB_URL
 * (default postgres://postgres@127.0.0.1:5432/postgres), BENCH_CLIENT=autocannon to skip wrk,
 * BENCH_ONLY (run only the scenarios whose name contains it), BENCH_CITUS_URL (a Citus coordinator,
 * postgres://.../postgres with its workers added: both servers run again on a database of their
 * own spread over that cluster, each scenario on all four in turn, and a second table compares them),
 * BENCH_BASELINE (a git revision of the same schema: its service runs too, and a table compares),
 * BENCH_REDIS_URL (default TEST_REDIS_URL, else redis://127.0.0.1:6379: the Redis of the
 * API_RATE_LIMIT run that counts in Redis; skipped when none answers there).
 *
 * Prints one table and writes the raw numbers as JSON under os.tmpdir(); nothing in the
 * repository changes. Exits 0 when it ran, whatever the numbers: this is not a test.
 */

const { execFileSync, spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const {
  ROOT, admin, cpuSeconds, freePort, runBenchmark, request, issueToken, markdownTable,
  postmasterPid, postgresCpuSeconds
} = require('./common.cjs')
const {
  SECONDS, ROUNDS, ONLY, WARMUP_SECONDS, CONNECTIONS, THREADS, BOOKS, BOOK_BODY, SCENARIOS,
  resetTable, chooseClient, createRunner, summarise, describe, startReference, startService, waitUntilReady
} = require('./load.cjs')

const SECRET = randomBytes(36).toString('base64url') // 48 characters

// --- processes --------------------------------------------------------------------------------

/**
 * BENCH_BASELINE=<git revision>: the service of that revision too, built in a worktree of its own
 * with this checkout's node_modules, and run as one more server in every round on the same
 * database: a change's before and after, measured in one run.
 */
const BASELINE = process.env.BENCH_BASELINE || undefined

function buildBaseline (bench, revision) {
  const dir = path.join(bench.tmpDir, 'baseline')
  const commit = execFileSync('git', ['rev-parse', '--short', revision], { cwd: ROOT, encoding: 'utf8' }).trim()
  execFileSync('git', ['worktree', 'add', '--detach', dir, commit], { cwd: ROOT, stdio: 'ignore' })
  bench.onCleanup(async () => execFileSync('git', ['worktree', 'remove', '--force', dir], { cwd: ROOT, stdio: 'ignore' }))
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'))
  process.stderr.write(`bench: building the baseline, ${commit}\n`)
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] })
  return { dir, commit }
}

/** The floor: node:http alone (tools/bench/bare-http.cjs), ready once it answers. */
async function startBare (track, logPath) {
  const port = await freePort()
  const log = fs.openSync(logPath, 'a')
  const child = track(spawn(process.execPath, [path.join(__dirname, 'bare-http.cjs')], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PORT: String(port) }, stdio: ['ignore', log, log]
  }))
  fs.closeSync(log)
  await waitUntilReady('node:http alone', child, port, logPath, (port) => request(port, 'GET', '/'))
  return { name: 'node:http alone', url: `http://127.0.0.1:${port}`, port, child }
}

/** The floor's one scenario: a GET of its small JSON. */
const BARE_SCENARIO = {
  name: 'GET (node:http alone)',
  lua: 'wrk.method = "GET"\nwrk.path = "/"',
  autocannon: () => ({ method: 'GET', path: '/' })
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

// --- API_RATE_LIMIT ---------------------------------------------------------------------------

/** The scenario the limit is measured on: the fastest path it is added to. */
const LIMITED_SCENARIO = 'GET /book/<id>'
/** A limit no run reaches: every request is counted and answered. */
const HIGH_LIMIT = '1000000000'
const REDIS_URL = process.env.BENCH_REDIS_URL || process.env.TEST_REDIS_URL || 'redis://127.0.0.1:6379'

/** Whether something accepts connections at the host and port of `url`, within a second. */
function answers (url) {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port || 6379), timeout: 1000 })
    const end = (result) => { socket.destroy(); resolve(result) }
    socket.once('connect', () => end(true)).once('error', () => end(false)).once('timeout', () => end(false))
  })
}

/**
 * The service again with API_RATE_LIMIT set high, counting in the process, and, when Redis
 * answers at REDIS_URL, once more counting there: each runs LIMITED_SCENARIO in every round
 * beside the service without it, so that a third table gives what the limit costs.
 */
async function startLimited (track, dbUrl, logPath) {
  const limited = [await startService(track, dbUrl, SECRET, logPath, { name: 'service, API_RATE_LIMIT', variables: { API_RATE_LIMIT: HIGH_LIMIT } })]
  if (await answers(REDIS_URL)) {
    limited.push(await startService(track, dbUrl, SECRET, logPath, {
      name: 'service, API_RATE_LIMIT in Redis', variables: { API_RATE_LIMIT: HIGH_LIMIT, REDIS_URL }
    }))
  } else {
    process.stderr.write(`bench: no Redis answers at ${REDIS_URL}: API_RATE_LIMIT measured in the process only\n`)
  }
  return limited
}

// --- report -----------------------------------------------------------------------------------

/** µs, or '-' when not measured (PostgreSQL on another machine; no reference for a scenario). */
const micros = (value) => value === undefined || Number.isNaN(value) ? '-' : value.toFixed(1)
const fixed = (value, digits) => value === undefined ? '-' : value.toFixed(digits)

/**
 * Per scenario: req/s, p99 and CPU µs per request (the server's process, then PostgreSQL's) of
 * the service and of the reference; the service's req/s over the reference's; the service's CPU
 * per request over what node:http alone cost in the same rounds (`floor`).
 */
function table (rows) {
  return markdownTable(
    ['scenario', 'service req/s', 'p99 ms', 'CPU µs', 'PG µs', 'reference req/s', 'p99 ms', 'CPU µs', 'PG µs', 'req/s ratio', 'CPU / node:http'],
    rows.map(({ scenario, floor, service, reference }) => [
      scenario,
      service.rps.toFixed(0), service.p99.toFixed(2), micros(service.cpuUs), micros(service.pgCpuUs),
      fixed(reference?.rps, 0), fixed(reference?.p99, 2), micros(reference?.cpuUs), micros(reference?.pgCpuUs),
      reference === undefined ? '-' : (service.rps / reference.rps).toFixed(2),
      (service.cpuUs / floor.cpuUs).toFixed(2)
    ]))
}

/** The service now and at BENCH_BASELINE: req/s and CPU per request, and now over then. */
function againstBaseline (rows) {
  return markdownTable(
    ['scenario', 'now req/s', 'CPU µs', 'PG µs', 'baseline req/s', 'CPU µs', 'PG µs', 'req/s now/then', 'CPU now/then', 'PG now/then'],
    rows.map(({ scenario, service, baseline }) => [
      scenario,
      service.rps.toFixed(0), micros(service.cpuUs), micros(service.pgCpuUs),
      baseline.rps.toFixed(0), micros(baseline.cpuUs), micros(baseline.pgCpuUs),
      (service.rps / baseline.rps).toFixed(2), (service.cpuUs / baseline.cpuUs).toFixed(2), (service.pgCpuUs / baseline.pgCpuUs).toFixed(2)
    ]))
}

/** LIMITED_SCENARIO without API_RATE_LIMIT and with it: req/s and CPU per request, and with over without. */
function withLimit ({ scenario, service, limited }) {
  return markdownTable(
    ['scenario', 'server', 'req/s', 'p99 ms', 'CPU µs', 'PG µs', 'req/s with/without', 'CPU with/without'],
    [['without API_RATE_LIMIT', service], ...Object.entries(limited)].map(([name, summary]) => [
      scenario, name, summary.rps.toFixed(0), summary.p99.toFixed(2), micros(summary.cpuUs), micros(summary.pgCpuUs),
      (summary.rps / service.rps).toFixed(2), (summary.cpuUs / service.cpuUs).toFixed(2)
    ]))
}

/** The service on Citus as a share of the service on one PostgreSQL, scenario by scenario. */
function engines ([postgres, citus]) {
  return markdownTable(
    ['scenario', 'service on PostgreSQL req/s', 'service on Citus req/s', 'Citus/PostgreSQL'],
    postgres.map(({ scenario, service }, i) => [
      scenario, service.rps.toFixed(0), citus[i].service.rps.toFixed(0), (citus[i].service.rps / service.rps).toFixed(2)
    ]))
}

// --- Citus (BENCH_CITUS_URL) ------------------------------------------------------------------

const CITUS_URL = process.env.BENCH_CITUS_URL

/** A new database on the Citus cluster, spread over its workers, dropped at the end. */
async function citusDatabase (bench) {
  const { citusWorkers, spreadOverCitus } = await import(path.join(ROOT, 'tools', 'dist', 'tools', 'topology', 'citus.js'))
  const workers = await citusWorkers(CITUS_URL)
  if (workers.length === 0) throw new Error(`BENCH_CITUS_URL names no Citus coordinator with workers: ${CITUS_URL}`)
  const name = `bookkeeping_bench_${randomBytes(6).toString('hex')}`
  await admin((c) => c.query(`CREATE DATABASE ${name}`), CITUS_URL)
  bench.onCleanup(() => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`), CITUS_URL))
  bench.onCleanup(await spreadOverCitus(CITUS_URL, name, workers))
  const url = new URL(CITUS_URL)
  url.pathname = `/${name}`
  return url.toString()
}

async function citusVersion () {
  return admin(async (c) => (await c.query("SELECT extversion FROM pg_extension WHERE extname = 'citus'")).rows[0].extversion, CITUS_URL)
}

// --- main -------------------------------------------------------------------------------------

async function main (bench) {
  const began = Date.now()
  const { tmpDir } = bench
  const serviceLog = path.join(tmpDir, 'service.log')
  const referenceLog = path.join(tmpDir, 'reference.log')
  const client = chooseClient()
  const run = createRunner(client, { tmpDir, track: bench.track })
  const { dbUrl, pgVersion } = await bench.createDatabase()

  // The service creates the table on start; the reference server starts on the seeded table
  async function startPair (pairDbUrl, suffix = '') {
    const service = await startService(bench.track, pairDbUrl, SECRET, serviceLog, { name: `service${suffix}` })
    await admin(async (c) => {
      await c.query(`INSERT INTO books (title, author, year)
        SELECT 'Title ' || i, 'Author ' || i, 1900 + i FROM generate_series(1, $1::int) AS i`, [BOOKS])
      const { rows } = await c.query('SELECT count(*)::int AS count, max(id)::int AS max FROM books')
      if (rows[0].count !== BOOKS || rows[0].max !== BOOKS) throw new Error(`seeding gave ${JSON.stringify(rows[0])}, expected ids 1..${BOOKS}`)
    }, pairDbUrl)
    const reference = await startReference(bench.track, pairDbUrl, SECRET, referenceLog, `reference${suffix}`)
    const differences = await compareAnswers(service, reference)
    await resetTable(pairDbUrl)
    return { service, reference, differences }
  }
  const { service, reference, differences } = await startPair(dbUrl)
  const bare = await startBare(bench.track, referenceLog)
  const baseline = BASELINE === undefined ? undefined : buildBaseline(bench, BASELINE)
  const before = baseline === undefined
    ? undefined
    : await startService(bench.track, dbUrl, SECRET, path.join(tmpDir, 'baseline.log'), { name: `service at ${baseline.commit}`, root: baseline.dir })
  const limited = ONLY === undefined || LIMITED_SCENARIO.includes(ONLY) ? await startLimited(bench.track, dbUrl, serviceLog) : []
  // The CPU of the whole PostgreSQL server, when it runs on this machine (not Citus's workers)
  const postmaster = await postmasterPid()
  /** One run, with the CPU its server and PostgreSQL spent on it, in µs per request. */
  async function measured (scenario, target, token, seconds, listing) {
    const start = { server: cpuSeconds(target.child.pid), pg: postmaster === null ? null : postgresCpuSeconds(postmaster) }
    const result = await run(scenario, target, token, seconds, listing)
    const server = cpuSeconds(target.child.pid) - start.server
    const pg = start.pg === null ? NaN : postgresCpuSeconds(postmaster) - start.pg
    return { ...result, cpuUs: server / result.requests * 1e6, pgCpuUs: pg / result.requests * 1e6 }
  }
  const pairs = [{ engine: `PostgreSQL ${pgVersion}`, service, reference }]
  if (CITUS_URL !== undefined) {
    const onCitus = await startPair(await citusDatabase(bench), ' on Citus')
    differences.push(...onCitus.differences.map((difference) => `on Citus: ${difference}`))
    pairs.push({ engine: `Citus ${await citusVersion()} (a coordinator and its workers)`, service: onCitus.service, reference: onCitus.reference })
  }

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
    '  CPU µs: user plus system time per request from /proc, of the server\'s process (CPU) and of the whole PostgreSQL',
    '  server (PG µs: every backend and helper process, those that exited meanwhile too); CPU / node:http: the',
    '  service\'s CPU per request over node:http alone\'s (tools/bench/bare-http.cjs), measured in each round too',
    `  service: \`npm start\` (fastify-cli)${Number(process.env.BENCH_WORKERS || 1) > 1 ? ` in ${process.env.BENCH_WORKERS} node:cluster workers` : ''}, LOG_LEVEL=${process.env.BENCH_LOG_LEVEL ?? 'info'} to a file, pool max 10, TOKEN_RATE_LIMIT=1e9;`,
    '  reference: tools/bench/reference.cjs (node:http + pg, pg.Pool defaults: max 10, no logging)',
    ...(pairs.length > 1 ? [`  then both again on ${pairs[1].engine}, on a database of their own; each round runs all four in turn`] : [])
  ]
  console.log(`\n${header.join('\n')}\n`)
  if (differences.length > 0) {
    console.log('!!! the two servers answer differently:')
    for (const difference of differences) console.log(`!!!   ${difference}`)
    console.log('')
  }

  const results = pairs.map(() => [])
  // Every run of the floor, and each scenario's own, which its CPU is read against
  const floorRuns = []
  const report = (label, target, result) => process.stderr.write(`  ${label}, ${target.name}: ${result.rps.toFixed(0)} req/s, ` +
    `p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms, CPU ${micros(result.cpuUs)} µs + PG ${micros(result.pgCpuUs)} µs` +
    `${result.non2xx > 0 ? `, ${result.non2xx} NON-2xx` : ''}${result.errors > 0 ? `, socket errors ${JSON.stringify(result.errorDetail)}` : ''}\n`)
  for (const scenario of SCENARIOS.filter((s) => ONLY === undefined || s.name.includes(ONLY))) {
    const targets = [
      ...pairs.flatMap((pair) => scenario.serviceOnly ? [pair.service] : [pair.service, pair.reference]),
      ...before === undefined ? [] : [before],
      ...scenario.name === LIMITED_SCENARIO ? limited : []
    ]
    const runs = Object.fromEntries(targets.map((target) => [target.name, []]))
    const scenarioFloor = []
    for (let round = 1; round <= ROUNDS; round++) {
      // The floor again with each round of each scenario: the machine's speed drifts
      await run(BARE_SCENARIO, bare, '', WARMUP_SECONDS)
      scenarioFloor.push(await measured(BARE_SCENARIO, bare, '', SECONDS))
      report(`${BARE_SCENARIO.name}, round ${round}`, bare, scenarioFloor.at(-1))
      for (const target of targets) {
        const token = await issueToken(service.port)
        const listing = await scenario.target?.(target.port, token)
        await run(scenario, target, token, WARMUP_SECONDS, listing)
        if (scenario.mutates) await resetTable(target.dbUrl)
        const result = await measured(scenario, target, token, SECONDS, listing)
        if (scenario.mutates) await resetTable(target.dbUrl)
        runs[target.name].push(result)
        report(`${scenario.name}, round ${round}`, target, result)
        if (result.non2xx > 0) {
          const sample = await sampleAnswer(scenario, target, token)
          process.stderr.write(`  !!! ${result.non2xx} of ${result.requests} responses were not 2xx; one request now answers ${sample}\n`)
        }
      }
    }
    floorRuns.push(...scenarioFloor)
    pairs.forEach((pair, i) => results[i].push({
      scenario: scenario.name,
      floor: summarise(scenarioFloor),
      service: summarise(runs[pair.service.name]),
      reference: scenario.serviceOnly ? undefined : summarise(runs[pair.reference.name]),
      ...i === 0 && before !== undefined ? { baseline: summarise(runs[before.name]) } : {},
      ...i === 0 && scenario.name === LIMITED_SCENARIO && limited.length > 0
        ? { limited: Object.fromEntries(limited.map((target) => [target.name, summarise(runs[target.name])])) }
        : {}
    }))
  }

  const floor = summarise(floorRuns)
  console.log(`\nnode:http alone (the floor), median of ${floorRuns.length} runs: ${floor.rps.toFixed(0)} req/s, ` +
    `p99 ${floor.p99.toFixed(2)} ms, ${micros(floor.cpuUs)} µs CPU per request (each scenario is read against its own rounds')`)
  pairs.forEach((pair, i) => console.log(`\n${pairs.length > 1 ? `${pair.engine}:\n` : ''}${table(results[i])}\n`))
  if (pairs.length > 1) console.log(`${engines(results)}\n`)
  if (before !== undefined) console.log(`The service against itself at ${baseline.commit} (BENCH_BASELINE), in the same rounds:\n\n${againstBaseline(results[0])}\n`)
  const limitedRow = results[0].find((row) => row.limited !== undefined)
  if (limitedRow !== undefined) console.log(`The service with API_RATE_LIMIT=${HIGH_LIMIT} (never reached), in the same rounds:\n\n${withLimit(limitedRow)}\n`)
  const anomalies = []
  for (const { scenario, service: s, reference: r, baseline: b, limited: l = {} } of results.flat()) {
    for (const [label, summary] of [['service', s], ['reference', r], ['baseline', b], ...Object.entries(l)].filter(([, summary]) => summary !== undefined)) {
      if (summary.non2xx > 0) anomalies.push(`${scenario}: ${summary.non2xx} non-2xx responses from the ${label}`)
      if (summary.errors > 0) anomalies.push(`${scenario}: ${summary.errors} socket errors/timeouts with the ${label}`)
    }
  }
  for (const anomaly of anomalies) console.log(`!!! ${anomaly}`)
  if (differences.length > 0) console.log(`!!! ${differences.length} answer difference(s) between the servers, listed above`)
  if (anomalies.length === 0 && differences.length === 0) console.log('all responses 2xx, no socket errors; both servers answered the checks alike')

  const resultsPath = path.join(tmpDir, 'results.json')
  fs.writeFileSync(resultsPath, JSON.stringify({ header, client, seconds: SECONDS, rounds: ROUNDS, connections: CONNECTIONS, threads: THREADS, differences, anomalies, floor, results }, null, 2))
  fs.rmSync(path.join(tmpDir, 'scenario.lua'), { force: true })
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

runBenchmark('bench', main)

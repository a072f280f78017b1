'use strict'

/**
 * `npm run bench:topology`: the topology of docs/deployment.md with one, two and three instances
 * behind HAProxy, against one instance without a balancer, in one run, on one database of 100
 * books, with the same client and scenarios as `npm run bench` (tools/bench/load.cjs).
 *
 * tools/cluster.ts starts three instances (as `npm start` does) reaching PostgreSQL through one
 * PgBouncer, and HAProxy in front of all three (docs/deploy/haproxy.cfg); two more HAProxy
 * processes, with the same file, front the first instance and the first two. Every target
 * reaches the database through the same PgBouncer, so the ratios show what the balancer and the
 * added instances change, not the pooler. An instance no target sends to is idle.
 *
 * Environment: as `npm run bench` (BENCH_SECONDS, ROUNDS, BENCH_ONLY, BENCH_CLIENT,
 * BENCH_LOG_LEVEL, TEST_DB_URL). Prints one table and writes the raw numbers as JSON under
 * os.tmpdir(); exits 0 when it ran, whatever the numbers: this is not a test.
 */

const { execFileSync } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { USERNAME, PASSWORD, admin, issueToken, markdownTable, runBenchmark } = require('./common.cjs')
const {
  SECONDS, ROUNDS, ONLY, WARMUP_SECONDS, CONNECTIONS, THREADS, BOOKS, SCENARIOS,
  resetTable, chooseClient, createRunner, summarise, describe
} = require('./load.cjs')
const { startCluster } = require('../dist/tools/cluster.js')
const { startHaproxy } = require('../dist/tools/topology/haproxy.js')

const LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? 'info'

// --- report -----------------------------------------------------------------------------------

function table (rows) {
  return markdownTable(['scenario', 'target', 'req/s', 'p50 ms', 'p99 ms', 'ratio'], rows.map(({ scenario, target, summary, ratio }) => [
    scenario, target, summary.rps.toFixed(0), summary.p50.toFixed(2), summary.p99.toFixed(2), ratio.toFixed(2)
  ]), 2)
}

function version (command, args) {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).split('\n')[0].replace(/ - https?:\S+$/, '').trim()
  } catch {
    return 'unknown'
  }
}

// --- main -------------------------------------------------------------------------------------

async function main (bench) {
  const began = Date.now()
  const { tmpDir } = bench
  const logPath = path.join(tmpDir, 'instances.log')
  const log = fs.createWriteStream(logPath)
  const client = chooseClient()
  const run = createRunner(client, { tmpDir, track: bench.track })
  const { dbUrl, pgVersion } = await bench.createDatabase()

  const cluster = await startCluster({
    dbUrl,
    env: {
      SECRET_TOKEN: randomBytes(36).toString('base64url'),
      AUTH_USERNAME: USERNAME,
      AUTH_PASSWORD: PASSWORD,
      LOG_LEVEL,
      // /token is measured, not the limiters
      TOKEN_RATE_LIMIT: '1000000000',
      TOKEN_USERNAME_RATE_LIMIT: '1000000000'
    },
    instances: 3,
    detached: true,
    onOutput: (instance, text) => log.write(text)
  })
  // Stopped after the balancers in front of it (last registered, first stopped)
  bench.onCleanup(() => cluster.stop())
  const balancers = []
  for (const count of [1, 2]) {
    const haproxy = await startHaproxy({ instances: cluster.instances.slice(0, count).map((instance) => instance.address), detached: true })
    bench.onCleanup(() => haproxy.stop())
    balancers.push(haproxy)
  }
  const [first] = cluster.instances
  const targets = [
    { name: '1 instance, no balancer', url: first.url },
    { name: 'HAProxy, 1 instance', url: `http://127.0.0.1:${balancers[0].port}` },
    { name: 'HAProxy, 2 instances', url: `http://127.0.0.1:${balancers[1].port}` },
    { name: 'HAProxy, 3 instances', url: cluster.url }
  ]

  await admin(async (c) => {
    await c.query(`INSERT INTO books (title, author, year)
      SELECT 'Title ' || i, 'Author ' || i, 1900 + i FROM generate_series(1, $1::int) AS i`, [BOOKS])
  }, dbUrl)

  const cpus = os.cpus()
  const header = [
    `bookkeeping topology benchmark, ${new Date().toISOString()}`,
    `machine: ${cpus.length} CPU (${cpus[0]?.model ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}; ` +
      `node ${process.version}; PostgreSQL ${pgVersion}; ${version('haproxy', ['-v'])}; ${version('pgbouncer', ['--version'])}; ${client.name} ${client.version}`,
    `code: ${describe('git', ['describe', '--always', '--dirty'])} (service built from the working tree)`,
    `method: ${client.name === 'wrk' ? `wrk -t${THREADS}` : 'autocannon'} -c${CONNECTIONS}, ${SECONDS} s per run after a ${WARMUP_SECONDS} s warm-up run; ` +
      `${ROUNDS} rounds per scenario, each running the targets in turn; medians of the rounds`,
    '  client, HAProxy, the instances, PgBouncer and PostgreSQL share this machine; one database of',
    `  ${BOOKS} rows, put back after each run of a writing scenario; every instance: \`npm start\`, LOG_LEVEL=${LOG_LEVEL} to a file,`,
    '  pool max 10, through one PgBouncer (transaction pooling); ratio: req/s against the first target'
  ]
  console.log(`\n${header.join('\n')}\n`)

  const rows = []
  const anomalies = []
  for (const scenario of SCENARIOS.filter((s) => ONLY === undefined || s.name.includes(ONLY))) {
    const runs = targets.map(() => [])
    for (let round = 1; round <= ROUNDS; round++) {
      for (const [i, target] of targets.entries()) {
        const token = await issueToken(first.port)
        const listing = await scenario.target?.(first.port, token)
        await run(scenario, target, token, WARMUP_SECONDS, listing)
        if (scenario.mutates) await resetTable(dbUrl)
        const result = await run(scenario, target, token, SECONDS, listing)
        if (scenario.mutates) await resetTable(dbUrl)
        runs[i].push(result)
        process.stderr.write(`  ${scenario.name}, round ${round}, ${target.name}: ${result.rps.toFixed(0)} req/s, ` +
          `p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms` +
          `${result.non2xx > 0 ? `, ${result.non2xx} NON-2xx` : ''}${result.errors > 0 ? `, socket errors ${JSON.stringify(result.errorDetail)}` : ''}\n`)
      }
    }
    const summaries = runs.map(summarise)
    for (const [i, target] of targets.entries()) {
      const summary = summaries[i]
      rows.push({ scenario: scenario.name, target: target.name, summary, ratio: summary.rps / summaries[0].rps })
      if (summary.non2xx > 0) anomalies.push(`${scenario.name}, ${target.name}: ${summary.non2xx} non-2xx responses`)
      if (summary.errors > 0) anomalies.push(`${scenario.name}, ${target.name}: ${summary.errors} socket errors/timeouts`)
    }
  }

  console.log(`\n${table(rows)}\n`)
  for (const anomaly of anomalies) console.log(`!!! ${anomaly}`)
  if (anomalies.length === 0) console.log('all responses 2xx, no socket errors')

  const resultsPath = path.join(tmpDir, 'results.json')
  fs.writeFileSync(resultsPath, JSON.stringify({ header, client, seconds: SECONDS, rounds: ROUNDS, connections: CONNECTIONS, threads: THREADS, anomalies, rows }, null, 2))
  fs.rmSync(path.join(tmpDir, 'scenario.lua'), { force: true })
  await new Promise((resolve) => log.end(resolve))
  // The request log is large; it is kept only when something needs explaining
  if (anomalies.length === 0) fs.rmSync(logPath, { force: true })
  else console.log(`instances' log: ${logPath}`)
  console.log(`raw results: ${resultsPath}`)
  console.log(`total time: ${((Date.now() - began) / 1000).toFixed(0)} s`)
}

runBenchmark('bench-topology', main)

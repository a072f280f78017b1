'use strict'
/**
 * `npm run bench:tracing`: what tracing costs (docs/performance.md, Tracing). A script, not a
 * test: it prints figures and exits 0 when it ran.
 *
 * The service as `npm start` runs it, on one database of 100 books, in turn: with tracing off
 * (no OTEL_ variable), and on (OTEL_EXPORTER_OTLP_ENDPOINT at an OTLP/HTTP receiver in this
 * process that answers every export, `http/protobuf`), every request sampled, then one in ten
 * (OTEL_TRACES_SAMPLER=traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1); with
 * BENCH_TRACING_BASELINE (the directory of another checkout, built), that checkout's service
 * too, as the "before" of a change. Each round runs each of them once, in that order: GET
 * /book/<id> under autocannon (BENCH_CONNECTIONS connections, default 16, BENCH_SECONDS each,
 * default 5, after a second to warm up), requests per second and the CPU each request cost the
 * service's process (user and system, from /proc), medians over ROUNDS rounds (default 5).
 *
 * Environment: TEST_DB_URL (the server, default postgres://postgres@127.0.0.1:5432/postgres),
 * BENCH_TRACING_BASELINE, BENCH_CONNECTIONS, BENCH_SECONDS, ROUNDS.
 */
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const http = require('node:http')
const autocannon = require('autocannon')
const {
  cpuSeconds, freePort, issueToken, markdownTable, median, positive, request, runBenchmark, serviceCommand
} = require('./common.cjs')

const CONNECTIONS = positive('BENCH_CONNECTIONS', 16)
const SECONDS = positive('BENCH_SECONDS', 5)
const ROUNDS = positive('ROUNDS', 5)
const BASELINE = process.env.BENCH_TRACING_BASELINE

/** An OTLP/HTTP receiver on a free port that takes every export and keeps nothing: how many bytes. */
async function receiver (bench) {
  const received = { exports: 0, bytes: 0 }
  const server = http.createServer((req, res) => {
    req.on('data', (chunk) => { received.bytes += chunk.length })
    req.on('end', () => {
      received.exports++
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/x-protobuf' }).end()
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  bench.onCleanup(() => new Promise((resolve) => server.close(resolve)))
  return { url: `http://127.0.0.1:${server.address().port}`, received }
}

/** Starts a service; resolves with its process and port once it answers. */
async function start (bench, env, root) {
  const port = await freePort()
  const { command, args, env: fullEnv } = serviceCommand({ ...env, PORT: String(port) }, root === undefined ? {} : { root })
  const child = bench.track(spawn(command, args, { env: fullEnv, stdio: ['ignore', 'ignore', 'inherit'] }))
  for (const started = Date.now(); ; await new Promise((resolve) => setTimeout(resolve, 100))) {
    if (Date.now() - started > 60_000) throw new Error('the service did not start within 60 s')
    if ((await request(port, 'GET', '/health/ready').catch(() => null))?.status === 200) return { child, port }
  }
}

/** GET /book/<id> under autocannon: requests per second and the CPU µs of each in the service. */
async function measure (port, pid, token, ids, seconds) {
  let next = 0
  const before = cpuSeconds(pid)
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: CONNECTIONS,
    duration: seconds,
    requests: [{ method: 'GET', headers: { authorization: token }, setupRequest: (req) => ({ ...req, path: `/book/${ids[next++ % ids.length]}` }) }]
  })
  const cpu = cpuSeconds(pid) - before
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} answers not 2xx, ${result.errors} errors`)
  return { rps: result.requests.average, cpuUs: cpu / result.requests.total * 1e6 }
}

runBenchmark('tracing', async (bench) => {
  const { dbUrl, pgVersion } = await bench.createDatabase()
  const collector = await receiver(bench)
  const base = { DB_URL: dbUrl, SECRET_TOKEN: randomBytes(32).toString('hex'), LOG_LEVEL: 'warn', TOKEN_RATE_LIMIT: '1000000000' }
  const variants = [
    ...(BASELINE === undefined ? [] : [{ name: `before (${BASELINE})`, env: base, root: BASELINE }]),
    { name: 'tracing off', env: base },
    { name: 'tracing on, every request sampled', env: { ...base, OTEL_EXPORTER_OTLP_ENDPOINT: collector.url } },
    {
      name: 'tracing on, one request in ten sampled',
      env: { ...base, OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' }
    }
  ]
  // The books, created through the service (it migrates the database as it starts)
  const ids = []
  {
    const { child, port } = await start(bench, base)
    const token = await issueToken(port)
    for (let i = 0; i < 100; i++) {
      ids.push((await request(port, 'POST', '/book', { token, body: { title: `Book ${i}`, author: 'Bench', year: 2000 } })).json.data.id)
    }
    child.kill('SIGTERM')
    await new Promise((resolve) => child.once('exit', resolve))
  }
  const results = new Map(variants.map(({ name }) => [name, []]))
  for (let round = 1; round <= ROUNDS; round++) {
    for (const { name, env, root } of variants) {
      const { child, port } = await start(bench, env, root)
      const token = await issueToken(port)
      await measure(port, child.pid, token, ids, 1)
      results.get(name).push(await measure(port, child.pid, token, ids, SECONDS))
      child.kill('SIGTERM')
      await new Promise((resolve) => child.once('exit', resolve))
      process.stderr.write(`round ${round}/${ROUNDS}: ${name} done\n`)
    }
  }
  console.log(`node ${process.version}; PostgreSQL ${pgVersion}; GET /book/<id>, autocannon ${CONNECTIONS} connections, ${SECONDS} s a run, medians of ${ROUNDS} rounds; ${collector.received.exports} exports received (${Math.round(collector.received.bytes / 1024)} KiB)\n`)
  console.log(markdownTable(['Service', 'Requests/s', 'CPU µs per request'], variants.map(({ name }) => {
    const runs = results.get(name)
    return [name, String(Math.round(median(runs.map((run) => run.rps)))), String(Math.round(median(runs.map((run) => run.cpuUs))))]
  })))
})

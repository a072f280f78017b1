'use strict'
/**
 * `npm run bench:list`: the paged, sorted and filtered listing on a large table (docs/performance.md,
 * The list at any size). A script, not a test: it prints figures and exits 0 when it ran.
 *
 * 1. A database of BENCH_LIST_BOOKS books (default 10,000,000), seeded with one SQL statement:
 *    titles of three to five words drawn from 1,000 (`night` is 10 of them, so it is in about
 *    one title of 25; `quixotic` is added to 20 titles), authors from 200 first and 500 last names
 *    (`Tolkien` about one in 500), years 1450 to 2024. The tables are made by the migrations
 *    without the steps that run alone (the indexes, the analyze), seeded, then the service is
 *    started on them: its migration builds the indexes on the full table while a writer inserts,
 *    updates and deletes books, whose slowest write is printed (a migration must not block writes
 *    for more than a second). The database is kept (`bookkeeping_bench_list_<books>`) and used
 *    again by the next run; BENCH_LIST_RESEED=1 makes it anew. How long seeding and the
 *    migration take: docs/performance.md, The list at any size.
 * 2. For each sort, the first page (`limit=100`) and the page 50,000 books deep (its cursor found
 *    by walking there in pages of 1,000); the `title` filter with the common and the rare word;
 *    the `author` filter. Each with one client (BENCH_LIST_REQUESTS requests one after another,
 *    default 200) and with 32 connections (autocannon, BENCH_LIST_SECONDS each, default 5):
 *    p50 and p99 in ms, and requests per second.
 * 3. The whole list, unfiltered, as the contract has it (`GET /books`): time, bytes, and the
 *    service's peak resident memory (VmHWM, reset before).
 * 4. What a listing may cost (docs/operations.md, The cost of a listing): each filter that no
 *    index bounds alone (its status and time), then all of them in turn from 20 keep-alive
 *    connections of 127.0.0.2 for BENCH_LIST_SECONDS * 3, while one client of 127.0.0.3 reads
 *    `GET /books?limit=10&sort=-year` and `GET /book/<id>` (a new connection each, 20 ms apart):
 *    the attacker's statuses, and the other client's p50 and p99.
 *
 * Environment: TEST_DB_URL (the server, default postgres://postgres@127.0.0.1:5432/postgres),
 * BENCH_LIST_BOOKS, BENCH_LIST_RESEED, BENCH_LIST_REQUESTS, BENCH_LIST_SECONDS,
 * BENCH_LIST_WHOLE=0 (skip step 3), BENCH_LIST_COSTLY=0 (skip step 4) or =only (steps 1 and 4).
 */
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const { setTimeout: sleep } = require('node:timers/promises')
const autocannon = require('autocannon')
const {
  freePort, issueToken, listDatabase, markdownTable, readMemory, runBenchmark, serviceCommand, writeDuring
} = require('./common.cjs')

const BOOKS = Number(process.env.BENCH_LIST_BOOKS ?? 10_000_000)
const REQUESTS = Number(process.env.BENCH_LIST_REQUESTS ?? 200)
const SECONDS = Number(process.env.BENCH_LIST_SECONDS ?? 5)
const DEPTH = 50_000
const SORTS = ['id', '-id', 'title', '-title', 'author', '-author', 'year', '-year']

function get (agent, port, url, token) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    http.get({ host: '127.0.0.1', port, path: url, agent, headers: { authorization: token } }, (res) => {
      const chunks = []
      res.on('data', (chunk) => chunks.push(chunk))
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`${url}: ${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 200)}`))
        resolve({ ms: performance.now() - started, link: res.headers.link, body: Buffer.concat(chunks) })
      })
      res.on('error', reject)
    }).on('error', reject)
  })
}

function percentile (values, p) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1)]
}

async function singleClient (port, url, token) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const times = []
  await get(agent, port, url, token)
  for (let i = 0; i < REQUESTS; i++) times.push((await get(agent, port, url, token)).ms)
  agent.destroy()
  return { p50: percentile(times, 50), p99: percentile(times, 99) }
}

async function underLoad (port, url, token) {
  const result = await autocannon({ url: `http://127.0.0.1:${port}${url}`, connections: 32, duration: SECONDS, headers: { authorization: token } })
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx answers, ${result.errors} errors under load`)
  return { p50: result.latency.p50, p99: result.latency.p99, rps: result.requests.average }
}

/** The path of the page `DEPTH` books deep, sorted by `sort`, in pages of 100. */
async function deepPage (port, sort, token) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  let url = `/books?limit=1000&sort=${sort}`
  for (let read = 0; read < DEPTH; read += 1000) {
    const { link } = await get(agent, port, url, token)
    url = /^<([^>]+)>/.exec(link)[1]
  }
  agent.destroy()
  return url.replace('limit=1000', 'limit=100')
}

/** The whole list: seconds, bytes, and the service's peak resident memory while it streamed. */
function wholeList (port, pid, token) {
  fs.writeFileSync(`/proc/${pid}/clear_refs`, '5')
  return new Promise((resolve, reject) => {
    const started = performance.now()
    let bytes = 0
    http.get({ host: '127.0.0.1', port, path: '/books', headers: { authorization: token } }, (res) => {
      res.on('data', (chunk) => { bytes += chunk.length })
      res.on('end', () => resolve({ seconds: (performance.now() - started) / 1000, bytes, peak: readMemory(pid).hwm }))
      res.on('error', reject)
    }).on('error', reject)
  })
}

/** The filters an outside probe found costly (test/helpers/costly-listings.ts has the same). */
const COSTLY = ['/books?limit=1000&title=zq', '/books?limit=1&sort=-title&title=%23',
  `/books?limit=1&title=${'e'.repeat(1000)}`, `/books?sort=title&title=${'the%20'.repeat(250)}`]

/** One request's status (or error) and time, whatever it answers. */
function timed (port, path, token, options) {
  return new Promise((resolve) => {
    const started = performance.now()
    const req = http.get({ host: '127.0.0.1', port, path, headers: { authorization: token }, ...options }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: String(res.statusCode), ms: performance.now() - started }))
    })
    req.setTimeout(30_000, () => req.destroy(new Error('no answer in 30 s')))
    req.on('error', (err) => resolve({ status: err.message, ms: performance.now() - started }))
  })
}

/** Step 4: the costly filters alone, then from 20 connections of one address while another reads. */
async function costlyListings (port, token) {
  for (const path of COSTLY) {
    const { status, ms } = await timed(port, path, token, { agent: false })
    console.log(`${path.slice(0, 50)}: ${status} in ${(ms / 1000).toFixed(2)} s`)
  }
  const agent = new http.Agent({ keepAlive: true, maxSockets: 20, localAddress: '127.0.0.2' })
  const statuses = {}
  const attack = { on: true }
  const attacker = Array.from({ length: 20 }, async (_, connection) => {
    for (let i = connection; attack.on; i++) {
      const { status } = await timed(port, COSTLY[i % COSTLY.length], token, { agent })
      statuses[status] = (statuses[status] ?? 0) + 1
    }
  })
  await sleep(1000)
  const until = Date.now() + SECONDS * 3000
  const other = async (path) => {
    const times = []
    while (Date.now() < until) {
      times.push((await timed(port, path, token, { agent: false, localAddress: '127.0.0.3' })).ms)
      await sleep(20)
    }
    return times
  }
  const [listed, read] = await Promise.all([other('/books?limit=10&sort=-year'), other(`/book/${Math.ceil(BOOKS / 2)}`)])
  attack.on = false
  await Promise.all(attacker)
  agent.destroy()
  console.log(`20 connections of 127.0.0.2 sending them in turn: ${JSON.stringify(statuses)}`)
  for (const [label, times] of [['GET /books?limit=10&sort=-year', listed], ['GET /book/<id>', read]]) {
    console.log(`${label} from 127.0.0.3 meanwhile: ${times.length} requests, p50 ${percentile(times, 50).toFixed(1)} ms, p99 ${percentile(times, 99).toFixed(1)} ms`)
  }
}

/** Steps 2 and 3. */
async function listingScenarios (port, service, token) {
  const scenarios = []
  for (const sort of SORTS) scenarios.push([`first page, sort=${sort}`, `/books?limit=100&sort=${sort}`])
  for (const sort of SORTS) scenarios.push([`page ${DEPTH.toLocaleString('en-US')} deep, sort=${sort}`, await deepPage(port, sort, token)])
  scenarios.push(['title=night (common), first page', '/books?limit=100&title=night'])
  scenarios.push(['title=quixotic (rare), first page', '/books?limit=100&title=quixotic'])
  scenarios.push(['title=night, sort=title', '/books?limit=100&title=night&sort=title'])
  scenarios.push(['author=tolkien, first page', '/books?limit=100&author=tolkien'])
  scenarios.push(['author=tolkien, sort=-year', '/books?limit=100&author=tolkien&sort=-year'])
  const rows = []
  for (const [label, path] of scenarios) {
    const one = await singleClient(port, path, token)
    const many = await underLoad(port, path, token)
    rows.push([label, one.p50.toFixed(2), one.p99.toFixed(2), many.p50.toFixed(0), many.p99.toFixed(0), many.rps.toFixed(0)])
    console.log(`${label}: ${one.p50.toFixed(2)} / ${one.p99.toFixed(2)} ms; 32 connections ${many.p50} / ${many.p99} ms, ${many.rps.toFixed(0)} req/s`)
  }
  console.log()
  console.log(markdownTable(['scenario', '1 client p50 ms', 'p99 ms', '32 conn. p50 ms', 'p99 ms', 'req/s'], rows))
  if (process.env.BENCH_LIST_WHOLE !== '0') {
    const whole = await wholeList(port, service.pid, token)
    console.log(`\nthe whole list (GET /books): ${whole.seconds.toFixed(1)} s, ${(whole.bytes / 1e6).toFixed(0)} MB, ` +
      `service peak RSS ${(whole.peak / 2 ** 20).toFixed(0)} MiB`)
  }
}

runBenchmark('list', async (bench) => {
  const { name, url, seeded } = await listDatabase(BOOKS, { reseed: process.env.BENCH_LIST_RESEED === '1' })
  console.log(`bench:list: ${BOOKS.toLocaleString('en-US')} books, database ${name} (kept)`)
  console.log(seeded === null ? 'seeded by an earlier run' : `seeded in ${seeded.toFixed(1)} s`)
  const port = await freePort()
  const { command, args, env } = serviceCommand({ DB_URL: url, SECRET_TOKEN: randomBytes(36).toString('base64url'), PORT: String(port), LOG_LEVEL: 'info' })
  const stop = { done: false }
  const writing = writeDuring(url, stop)
  const started = performance.now()
  const service = bench.track(spawn(command, args, { env, stdio: ['ignore', 'pipe', 'inherit'] }))
  let steps = 0
  service.stdout.on('data', (chunk) => { steps += (chunk.toString().match(/"applied migration"/g) ?? []).length })
  for (;;) {
    if (service.exitCode !== null) throw new Error(`the service exited (${service.exitCode})`)
    const listening = await new Promise((resolve) => http.get({ host: '127.0.0.1', port, path: '/health/live' }, (res) => { res.resume(); resolve(true) }).on('error', () => resolve(false)))
    if (listening) break
    await sleep(200)
  }
  stop.done = true
  const { slowest, writes } = await writing
  const migrated = (performance.now() - started) / 1000
  console.log(`service listening after ${migrated.toFixed(1)} s (${steps} migration steps applied); ` +
    `${writes} writes meanwhile, the slowest ${slowest.toFixed(0)} ms`)

  const token = await issueToken(port)
  if (process.env.BENCH_LIST_COSTLY !== 'only') await listingScenarios(port, service, token)
  if (process.env.BENCH_LIST_COSTLY !== '0') {
    console.log('\nwhat a listing may cost:')
    await costlyListings(port, token)
  }
})

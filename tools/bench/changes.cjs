'use strict'
/**
 * `npm run bench:changes`: the feed of changes, GET /books/changes (docs/performance.md, Live
 * changes). A script, not a test: it prints figures and exits 0 when it ran, whatever they are.
 *
 * 1. **Delay.** The topology of docs/deployment.md (tools/cluster.ts): three instances, started
 *    as `npm start` starts them, reaching PostgreSQL through one PgBouncer in transaction
 *    pooling, HAProxy in front. A feed is open on each instance's own port (A, B, C). Writes go
 *    to instance A: creates and updates (each with a title of its own) at BENCH_CHANGES_RATE a
 *    second for BENCH_CHANGES_SECONDS, sent at their times whether the last was answered or
 *    not, then a burst of BENCH_CHANGES_BURST sent at once. For each write: the time from its
 *    answer arriving here to its event (kind, book id and title) arriving on each feed. Feed A is
 *    the instance that wrote; B and C are held to a bound: 1 s at the 99th percentile.
 * 2. **1,000 subscribers.** One instance alone on the same database, directly on PostgreSQL,
 *    with MAX_CONNECTIONS_PER_ADDRESS raised (every feed comes from 127.0.0.1). GET /book/<id>
 *    under autocannon (10 connections, BENCH_CHANGES_LOAD_SECONDS), BENCH_CHANGES_ROUNDS rounds
 *    of a run without feeds and a run with BENCH_CHANGES_SUBSCRIBERS idle feeds, held by a child
 *    process of their own (so that their keep-alives do not stall the load generator's event
 *    loop), then a last run without: req/s, p50, p99, and CPU time per request of the service and
 *    of the PostgreSQL backends serving the bench's database (from /proc); the medians. The
 *    service's resident memory (VmRSS) just before the feeds open, after they have been open and
 *    idle for BENCH_CHANGES_IDLE_SECONDS (keep-alives sent meanwhile, counted), and after the
 *    load. Bounds: 150 MB more than idle; p99 not worse than twice what it is without.
 * 3. **The change log's growth.** BENCH_CHANGES_LOG writes (half creates, half updates) through
 *    that instance, 32 at a time; once the instance has placed them all in the feed's order,
 *    what `book_changes` grew by (table, indexes) per change, as written (a change is inserted,
 *    then updated once with its position), and its size per row after VACUUM FULL: what the
 *    rows kept take once the space of pruned and dead rows is reused.
 *
 * Every process it starts is stopped and its database dropped, also when it fails or is
 * interrupted. Environment: TEST_DB_URL (default postgres://postgres@127.0.0.1:5432/postgres),
 * BENCH_CHANGES_RATE (50), BENCH_CHANGES_SECONDS (20), BENCH_CHANGES_BURST (500),
 * BENCH_CHANGES_SUBSCRIBERS (1000), BENCH_CHANGES_IDLE_SECONDS (12), BENCH_CHANGES_LOAD_SECONDS
 * (10), BENCH_CHANGES_ROUNDS (3), BENCH_CHANGES_LOG (20000), BENCH_LOG_LEVEL (the instances',
 * default warn).
 */
const { execFileSync, fork, spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const autocannon = require('autocannon')
const {
  USERNAME, PASSWORD, admin, cpuSeconds, postmasterPid, postgresCpuSeconds, databaseUrl, freePort, issueToken, markdownTable, median, positive, readMemory, request,
  runBenchmark, serviceCommand
} = require('./common.cjs')
const { describe } = require('./load.cjs')

const RATE = positive('BENCH_CHANGES_RATE', 50)
const SECONDS = positive('BENCH_CHANGES_SECONDS', 20)
const BURST = positive('BENCH_CHANGES_BURST', 500)
const SUBSCRIBERS = positive('BENCH_CHANGES_SUBSCRIBERS', 1000)
const IDLE_SECONDS = positive('BENCH_CHANGES_IDLE_SECONDS', 12)
const LOAD_SECONDS = positive('BENCH_CHANGES_LOAD_SECONDS', 10)
const ROUNDS = positive('BENCH_CHANGES_ROUNDS', 3)
const LOG_CHANGES = positive('BENCH_CHANGES_LOG', 20_000)
/** The alone instance's bound per client address: every feed of step 2 comes from 127.0.0.1. */
const PER_ADDRESS = SUBSCRIBERS + 1000
const LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? 'warn'
/** The bounds the feed is held to, printed beside each step's figures. */
const DELAY_BOUND_MS = 1000
const MEMORY_BOUND_MB = 150
const P99_BOUND_RATIO = 2
/** autocannon's connections for GET /book/<id>, and the writers of the log's growth. */
const LOAD_CONNECTIONS = 10
const LOG_WRITERS = 32
/** How long every event may take to arrive after the last write before it counts as missing. */
const ARRIVAL_WAIT_MS = 15_000
const MB = 1e6

// --- the feeds ------------------------------------------------------------------------------

/**
 * A feed read as the event stream format has it, lightly: events end at a blank line; `:` lines
 * are comments. `onEvent(kind, data, at, id)` for each event, with when its last chunk arrived.
 */
function openFeed (port, token, { onEvent = () => {} } = {}) {
  return new Promise((resolve, reject) => {
    const feed = { keepAlives: 0, ended: false, request: null }
    let pending = ''
    const request = http.request({ host: '127.0.0.1', port, path: '/books/changes', headers: { authorization: token, accept: 'text/event-stream' }, agent: false }, (response) => {
      if (response.statusCode !== 200) {
        response.resume()
        reject(new Error(`GET /books/changes answered ${response.statusCode}`))
        return
      }
      response.setEncoding('utf8')
      response.on('data', (chunk) => {
        const at = performance.now()
        pending += chunk
        let end
        while ((end = pending.indexOf('\n\n')) !== -1) {
          const block = pending.slice(0, end)
          pending = pending.slice(end + 2)
          if (block.startsWith(':')) {
            feed.keepAlives++
            continue
          }
          let id = null
          let kind = null
          let data = null
          for (const line of block.split('\n')) {
            if (line.startsWith('id: ')) id = line.slice(4)
            else if (line.startsWith('event: ')) kind = line.slice(7)
            else if (line.startsWith('data: ')) data = line.slice(6)
          }
          if (kind !== null && data !== null) onEvent(kind, data, at, id)
        }
      })
      response.on('end', () => { feed.ended = true })
      response.on('error', () => { feed.ended = true })
      resolve(feed)
    })
    request.on('error', (err) => {
      feed.ended = true
      reject(err)
    })
    request.end()
    feed.request = request
  })
}

/**
 * The child process that holds the idle feeds of step 2 (`fork` of this file with
 * `hold-feeds`): opens BENCH_FEEDS_COUNT feeds on BENCH_FEEDS_PORT, 50 at a time, says how that
 * went, answers `count` with the keep-alives received, and exits on `close` or when its parent
 * goes.
 */
async function holdFeeds () {
  const port = Number(process.env.BENCH_FEEDS_PORT)
  const count = Number(process.env.BENCH_FEEDS_COUNT)
  const token = process.env.BENCH_FEEDS_TOKEN
  const feeds = []
  const failures = []
  const started = performance.now()
  for (let i = 0; i < count; i += 50) {
    const opened = await Promise.allSettled(Array.from({ length: Math.min(50, count - i) }, () => openFeed(port, token)))
    for (const result of opened) {
      if (result.status === 'fulfilled') feeds.push(result.value)
      else failures.push(result.reason.message)
    }
  }
  process.send({ type: 'opened', opened: feeds.length, failures: failures.slice(0, 5), failed: failures.length, ms: performance.now() - started })
  process.on('message', (message) => {
    if (message.type === 'count') {
      process.send({
        type: 'count',
        keepAlives: feeds.reduce((sum, feed) => sum + feed.keepAlives, 0),
        fewest: Math.min(...feeds.map((feed) => feed.keepAlives)),
        open: feeds.filter((feed) => !feed.ended).length
      })
    } else if (message.type === 'close') {
      for (const feed of feeds) feed.request.destroy()
      process.exit(0)
    }
  })
  process.on('disconnect', () => process.exit(0))
}

// --- requests -------------------------------------------------------------------------------

/** One request on `agent`: its status, its JSON body, when its answer arrived and how long it took. */
function send (agent, port, method, url, token, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const headers = { authorization: token }
    if (payload !== undefined) {
      headers['content-type'] = 'application/json'
      headers['content-length'] = Buffer.byteLength(payload)
    }
    const started = performance.now()
    const request = http.request({ host: '127.0.0.1', port, method, path: url, agent, headers, timeout: 30_000 }, (response) => {
      const chunks = []
      response.on('data', (chunk) => chunks.push(chunk))
      response.on('error', reject)
      response.on('end', () => {
        const at = performance.now()
        let json = null
        try {
          json = JSON.parse(Buffer.concat(chunks).toString('utf8'))
        } catch {}
        resolve({ status: response.statusCode, json, at, ms: at - started })
      })
    })
    request.on('timeout', () => request.destroy(new Error(`${method} ${url}: no answer within 30 s`)))
    request.on('error', reject)
    request.end(payload)
  })
}

/**
 * Writes through `port`: every other one creates a book, the others update one created earlier;
 * each has a title no other write has. `write(phase, agent)` resolves with the key its event will have
 * (`kind id title`), when its answer arrived, and how long it took; failures are counted.
 */
function createWriter (port, token) {
  const created = []
  const failures = []
  let written = 0
  async function write (phase, agent) {
    const n = ++written
    const title = `Live change ${n}`
    const update = n % 2 === 0 && created.length > 0
    const target = update ? created[Math.floor(Math.random() * created.length)] : null
    let answer
    try {
      answer = update
        ? await send(agent, port, 'PUT', `/book/${target}`, token, { title })
        : await send(agent, port, 'POST', '/book', token, { title, author: 'Bench Changes', year: 1900 + (n % 125) })
    } catch (err) {
      failures.push(err.message)
      return null
    }
    if (answer.status !== (update ? 200 : 201)) {
      failures.push(`${update ? 'PUT' : 'POST'} answered ${answer.status}`)
      return null
    }
    const id = answer.json.data.id
    if (!update) created.push(id)
    return { key: `${update ? 'updated' : 'created'} ${id} ${title}`, phase, answeredAt: answer.at, ms: answer.ms }
  }
  return { write, failures }
}

// --- figures --------------------------------------------------------------------------------

function percentile (values, p) {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p / 100 * sorted.length) - 1))]
}

const ms = (value) => Number.isFinite(value) ? value.toFixed(0) : '-'
const mb = (bytes) => (bytes / MB).toFixed(1)

function version (command, args) {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).split('\n')[0].replace(/ - https?:\S+$/, '').trim()
  } catch {
    return 'unknown'
  }
}

/** The soft limit of open files of `pid` ('self' for this process), from /proc. */
function openFileLimit (pid) {
  const line = fs.readFileSync(`/proc/${pid}/limits`, 'utf8').split('\n').find((text) => text.startsWith('Max open files'))
  return Number(line.split(/\s{2,}/)[1])
}

// --- 1. delay -------------------------------------------------------------------------------

/** Step 1: the cluster, a feed on each instance, writes through the first; the delays and their table. */
async function measureDelay (bench, dbUrl, log) {
  const { startCluster } = require('../dist/tools/cluster.js')
  const cluster = await startCluster({
    dbUrl,
    env: { SECRET_TOKEN: randomBytes(36).toString('base64url'), AUTH_USERNAME: USERNAME, AUTH_PASSWORD: PASSWORD, LOG_LEVEL },
    instances: 3,
    detached: true,
    onOutput: (instance, text) => log.write(`${instance.name}: ${text}`)
  })
  bench.onCleanup(() => cluster.stop())
  const [writer] = cluster.instances
  const token = await issueToken(writer.port)

  // When each event arrived on each instance's feed, by `kind id title`
  const names = ['A (writes here)', 'B', 'C']
  const arrivals = cluster.instances.map(() => new Map())
  // Events received twice, and ids not above the one before (ids are zero-padded: they compare as text)
  const repeated = cluster.instances.map(() => 0)
  const disordered = cluster.instances.map(() => 0)
  const lastIds = cluster.instances.map(() => '')
  const feeds = []
  for (const [i, instance] of cluster.instances.entries()) {
    feeds.push(await openFeed(instance.port, token, {
      onEvent (kind, data, at, id) {
        if (kind !== 'created' && kind !== 'updated') return
        const book = JSON.parse(data)
        const key = `${kind} ${book.id} ${book.title}`
        if (arrivals[i].has(key)) repeated[i]++
        else arrivals[i].set(key, at)
        if (id === null || id <= lastIds[i]) disordered[i]++
        else lastIds[i] = id
      }
    }))
  }
  // Each reader has placed what was there: its next poll is the writes'
  await sleep(500)

  const steadyAgent = new http.Agent({ keepAlive: true, maxSockets: 32 })
  const burstAgent = new http.Agent({ keepAlive: true, maxSockets: 64 })
  const { write, failures } = createWriter(writer.port, token)
  const steady = []
  const began = performance.now()
  for (let i = 0; i < RATE * SECONDS; i++) {
    const wait = began + i * 1000 / RATE - performance.now()
    if (wait > 0) await sleep(wait)
    steady.push(write('steady', steadyAgent))
  }
  const writes = (await Promise.all(steady)).filter((entry) => entry !== null)
  const steadySeconds = (performance.now() - began) / 1000
  await sleep(1000)
  const burstStarted = performance.now()
  const burstWrites = (await Promise.all(Array.from({ length: BURST }, () => write('burst', burstAgent)))).filter((entry) => entry !== null)
  const burstSeconds = (performance.now() - burstStarted) / 1000
  writes.push(...burstWrites)
  steadyAgent.destroy()
  burstAgent.destroy()

  const waitStarted = performance.now()
  while (performance.now() - waitStarted < ARRIVAL_WAIT_MS && !arrivals.every((seen) => writes.every((entry) => seen.has(entry.key)))) await sleep(100)
  const ended = feeds.filter((feed) => feed.ended).length
  for (const feed of feeds) feed.request.destroy()
  await cluster.stop()

  const rows = []
  const elsewhere = []
  for (const [i, name] of names.entries()) {
    for (const phase of ['steady', 'burst', 'all']) {
      const chosen = writes.filter((entry) => phase === 'all' || entry.phase === phase)
      const delays = chosen.filter((entry) => arrivals[i].has(entry.key)).map((entry) => arrivals[i].get(entry.key) - entry.answeredAt)
      if (i > 0 && phase === 'all') elsewhere.push(...delays)
      rows.push([name, phase, String(chosen.length), String(chosen.length - delays.length),
        ms(percentile(delays, 50)), ms(percentile(delays, 90)), ms(percentile(delays, 99)), ms(Math.max(...delays)), ms(Math.min(...delays))])
    }
  }
  const writeMs = (phase) => writes.filter((entry) => entry.phase === phase).map((entry) => entry.ms)
  const missing = writes.length * 3 - arrivals.reduce((sum, seen) => sum + writes.filter((entry) => seen.has(entry.key)).length, 0)
  const p99 = percentile(elsewhere, 99)
  return {
    rows,
    lines: [
      `writes through A: ${writes.filter((entry) => entry.phase === 'steady').length} at ${RATE}/s over ${steadySeconds.toFixed(1)} s ` +
        `(answered in p50 ${percentile(writeMs('steady'), 50).toFixed(1)} ms, p99 ${percentile(writeMs('steady'), 99).toFixed(1)} ms), ` +
        `then ${burstWrites.length} at once, all answered after ${burstSeconds.toFixed(2)} s (p99 ${percentile(writeMs('burst'), 99).toFixed(0)} ms); ` +
        `${failures.length} failed${failures.length > 0 ? ` (${[...new Set(failures)].slice(0, 3).join('; ')})` : ''}`,
      `events missing after ${ARRIVAL_WAIT_MS / 1000} s: ${missing}; received twice: ${repeated.join(', ')} (A, B, C); ` +
        `out of order: ${disordered.join(', ')}; feeds ended by the service meanwhile: ${ended}`,
      `delay on the other instances (B and C, steady and burst): p99 ${ms(p99)} ms, ` +
        `${p99 <= DELAY_BOUND_MS && missing === 0 ? 'within' : 'OVER'} the bound of ${DELAY_BOUND_MS} ms${missing > 0 ? ' (events missing)' : ''}`
    ],
    figures: { p99, missing, repeated, disordered, failures: failures.length, steadySeconds, burstSeconds }
  }
}

// --- 2. 1,000 subscribers -------------------------------------------------------------------

/**
 * GET /book/<id> under autocannon, and the CPU the service and PostgreSQL (the whole server:
 * `postmaster`, null when it is not on this machine) used meanwhile.
 */
async function loadRun (port, pid, postmaster, token, ids) {
  const pgBefore = postmaster === null ? null : postgresCpuSeconds(postmaster)
  const serviceBefore = cpuSeconds(pid)
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: LOAD_CONNECTIONS,
    duration: LOAD_SECONDS,
    timeout: 10,
    requests: [{ method: 'GET', headers: { authorization: token }, setupRequest: (req) => ({ ...req, path: `/book/${ids[Math.floor(Math.random() * ids.length)]}` }) }]
  })
  const serviceCpu = cpuSeconds(pid) - serviceBefore
  const pgCpu = pgBefore === null ? NaN : postgresCpuSeconds(postmaster) - pgBefore
  const requests = result.requests.total
  return {
    requests,
    rps: requests / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    serviceUs: serviceCpu / requests * 1e6,
    pgUs: pgCpu / requests * 1e6,
    errors: result.non2xx + result.errors + result.timeouts
  }
}

/** The child holding the idle feeds, once it has opened them. */
async function startHolder (bench, port, token) {
  const child = bench.track(fork(__filename, ['hold-feeds'], {
    env: { ...process.env, BENCH_FEEDS_PORT: String(port), BENCH_FEEDS_TOKEN: token, BENCH_FEEDS_COUNT: String(SUBSCRIBERS) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc']
  }))
  const next = (type) => new Promise((resolve, reject) => {
    const onMessage = (message) => {
      if (message.type !== type) return
      child.off('message', onMessage)
      child.off('exit', onExit)
      resolve(message)
    }
    const onExit = (code) => reject(new Error(`the process holding the feeds exited (${code})`))
    child.on('message', onMessage)
    child.once('exit', onExit)
  })
  const opened = await next('opened')
  return {
    opened,
    count () {
      child.send({ type: 'count' })
      return next('count')
    },
    async close () {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.send({ type: 'close' })
      await exited
    }
  }
}

/** Starts the service as `npm start` does, on `dbUrl` directly, and resolves once it is ready. */
async function startService (bench, dbUrl, log) {
  const port = await freePort()
  const { command, args, env } = serviceCommand({
    DB_URL: dbUrl,
    SECRET_TOKEN: randomBytes(36).toString('base64url'),
    PORT: String(port),
    LOG_LEVEL,
    MAX_CONNECTIONS_PER_ADDRESS: String(PER_ADDRESS)
  })
  const service = bench.track(spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }))
  service.stdout.on('data', (chunk) => log.write(`alone: ${chunk}`))
  service.stderr.on('data', (chunk) => log.write(`alone: ${chunk}`))
  const started = performance.now()
  for (;;) {
    if (service.exitCode !== null || service.signalCode !== null) throw new Error(`the service exited (${service.exitCode ?? service.signalCode}); its output is in ${log.path}`)
    if (performance.now() - started > 30_000) throw new Error(`the service was not ready within 30 s; its output is in ${log.path}`)
    const ready = await request(port, 'GET', '/health/ready', { timeoutMs: 1000 }).then((answer) => answer.status === 200, () => false)
    if (ready) return { port, service }
    await sleep(100)
  }
}

/**
 * Step 2: one instance; ROUNDS rounds of GET /book/<id> without, then with the idle feeds, and a
 * last run without; the service's memory just before the feeds open and once they have idled.
 */
async function measureSubscribers (bench, port, pid, dbName) {
  const serviceFiles = openFileLimit(pid)
  const benchFiles = openFileLimit('self')
  const filesLine = `open files: the service's limit ${serviceFiles}, this bench's ${benchFiles}, for ${SUBSCRIBERS} feeds (each a descriptor at each end); ` +
    `the service's MAX_CONNECTIONS_PER_ADDRESS ${PER_ADDRESS}`
  if (serviceFiles < SUBSCRIBERS + 300 || benchFiles < SUBSCRIBERS + 300) throw new Error(`${filesLine}: too few; raise \`ulimit -n\``)
  const token = await issueToken(port)
  const ids = (await admin((client) => client.query('SELECT id FROM books ORDER BY id LIMIT 100'), databaseUrl(dbName))).rows.map((row) => row.id)
  if (ids.length === 0) throw new Error('no books to read')
  const postmaster = await postmasterPid()

  await loadRun(port, pid, postmaster, token, ids)
  const runs = []
  const rounds = []
  for (let round = 1; round <= ROUNDS; round++) {
    runs.push({ name: `round ${round}, without feeds`, feeds: false, ...await loadRun(port, pid, postmaster, token, ids) })
    await sleep(2000)
    const idle = readMemory(pid).rss
    const holder = await startHolder(bench, port, token)
    if (holder.opened.failed > 0) throw new Error(`${holder.opened.failed} of ${SUBSCRIBERS} feeds failed to open: ${holder.opened.failures.join('; ')}`)
    await sleep(IDLE_SECONDS * 1000)
    const withFeeds = readMemory(pid).rss
    const idled = await holder.count()
    runs.push({ name: `round ${round}, with ${SUBSCRIBERS} idle feeds`, feeds: true, ...await loadRun(port, pid, postmaster, token, ids) })
    const afterLoad = readMemory(pid).rss
    const loaded = await holder.count()
    await holder.close()
    rounds.push({ idle, withFeeds, afterLoad, opened: holder.opened, idled, loaded })
  }
  runs.push({ name: 'last, without feeds', feeds: false, ...await loadRun(port, pid, postmaster, token, ids) })

  const summary = (feeds) => {
    const chosen = runs.filter((run) => run.feeds === feeds)
    const of = (field) => median(chosen.map((run) => run[field]))
    return { name: `median, ${feeds ? 'with' : 'without'} feeds`, rps: of('rps'), p50: of('p50'), p99: of('p99'), serviceUs: of('serviceUs'), pgUs: of('pgUs'), errors: chosen.reduce((sum, run) => sum + run.errors, 0) }
  }
  const without = summary(false)
  const withFeeds = summary(true)
  const table = markdownTable(['GET /book/<id>', 'req/s', 'p50 ms', 'p99 ms', 'service CPU µs/req', 'PostgreSQL CPU µs/req', 'errors'], [...runs, without, withFeeds].map((run) => [
    run.name, run.rps.toFixed(0), run.p50.toFixed(2), run.p99.toFixed(2), run.serviceUs.toFixed(0), run.pgUs.toFixed(0), String(run.errors)
  ]))
  const growths = rounds.map((round) => round.withFeeds - round.idle)
  const growth = Math.max(...growths)
  const ratio = withFeeds.p99 / without.p99
  return {
    table,
    lines: [
      filesLine,
      ...rounds.map((round, i) => `round ${i + 1}: ${round.opened.opened} feeds opened in ${(round.opened.ms / 1000).toFixed(1)} s by a child process; ` +
        `after ${IDLE_SECONDS} s idle ${round.idled.open} open, ${round.idled.keepAlives} keep-alives received (the fewest on one feed: ${round.idled.fewest}), ` +
        `after the load ${round.loaded.open} open; service VmRSS ${mb(round.idle)} MB just before the feeds, ${mb(round.withFeeds)} MB after they idled, ` +
        `${mb(round.afterLoad)} MB after the load with them: the feeds ${mb(round.withFeeds - round.idle)} MB`),
      `memory of ${SUBSCRIBERS} idle feeds: at most ${mb(growth)} MB (${(growth / SUBSCRIBERS / 1000).toFixed(1)} kB a feed), ` +
        `${growth <= MEMORY_BOUND_MB * MB ? 'within' : 'OVER'} the bound of ${MEMORY_BOUND_MB} MB`,
      `GET /book/<id> p99, median with the feeds / median without: ${ratio.toFixed(2)}, ` +
        `${ratio <= P99_BOUND_RATIO ? 'within' : 'OVER'} the bound of ${P99_BOUND_RATIO}`
    ],
    figures: { rounds, runs, without, withFeeds, growth, ratio }
  }
}

// --- 3. the log's growth --------------------------------------------------------------------

const SIZES = `SELECT count(*)::int AS rows, count(*) FILTER (WHERE position IS NULL)::int AS unplaced,
  coalesce(avg(octet_length(book)), 0)::float AS book, pg_table_size('book_changes')::float AS table,
  pg_indexes_size('book_changes')::float AS indexes, pg_total_relation_size('book_changes')::float AS total
  FROM book_changes`

/** Step 3: LOG_CHANGES writes through `port`, 32 at a time; what book_changes grew by per change. */
async function measureLog (port, dbUrl) {
  const sizes = async () => (await admin((client) => client.query(SIZES), dbUrl)).rows[0]
  const token = await issueToken(port)
  const before = await sizes()
  const agent = new http.Agent({ keepAlive: true, maxSockets: LOG_WRITERS })
  const { write, failures } = createWriter(port, token)
  const started = performance.now()
  let sent = 0
  await Promise.all(Array.from({ length: LOG_WRITERS }, async () => {
    while (sent < LOG_CHANGES) {
      sent++
      await write('log', agent)
    }
  }))
  const seconds = (performance.now() - started) / 1000
  agent.destroy()
  let after = await sizes()
  for (let waited = 0; after.unplaced > 0 && waited < 30; waited++) {
    await sleep(1000)
    after = await sizes()
  }
  await admin((client) => client.query('VACUUM FULL book_changes'), dbUrl)
  const compact = await sizes()
  const changes = after.rows - before.rows
  const per = (bytes, count) => (bytes / count).toFixed(0)
  const table = markdownTable(['book_changes', 'rows', 'table bytes/change', 'index bytes/change', 'total bytes/change'], [
    [`grown by ${changes} changes, as written`, String(after.rows), per(after.table - before.table, changes), per(after.indexes - before.indexes, changes), per(after.total - before.total, changes)],
    ['after VACUUM FULL, size / rows', String(compact.rows), per(compact.table, compact.rows), per(compact.indexes, compact.rows), per(compact.total, compact.rows)]
  ])
  return {
    table,
    lines: [
      `${changes} changes written through the instance in ${seconds.toFixed(1)} s, ${LOG_WRITERS} at a time (${failures.length} writes failed); ` +
        `${after.unplaced} not placed in the feed's order after waiting; the book's JSON ${after.book.toFixed(0)} bytes on average`,
      `book_changes: ${mb(after.total)} MB as written (table ${mb(after.table)}, indexes ${mb(after.indexes)}), ` +
        `${mb(compact.total)} MB after VACUUM FULL, for ${compact.rows} rows; ` +
        `at that size the 1,000,000 changes the log keeps at least (CHANGES_KEPT_COUNT) take ${(compact.total / compact.rows).toFixed(0)} MB`
    ],
    figures: { before, after, compact, changes, seconds, failures: failures.length }
  }
}

// --- main -----------------------------------------------------------------------------------

async function main (bench) {
  const began = Date.now()
  const { dbUrl, pgVersion } = await bench.createDatabase()
  const dbName = new URL(dbUrl).pathname.slice(1)
  const logPath = path.join(bench.tmpDir, 'instances.log')
  const log = fs.createWriteStream(logPath)
  bench.onCleanup(() => new Promise((resolve) => log.end(resolve)))

  const cpus = os.cpus()
  const header = [
    `bookkeeping changes-feed benchmark, ${new Date().toISOString()}`,
    `machine: ${cpus.length} CPU (${cpus[0]?.model ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}; ` +
      `load average at start ${os.loadavg().map((load) => load.toFixed(2)).join(' ')}`,
    `node ${process.version}; PostgreSQL ${pgVersion}; ${version('haproxy', ['-v'])}; ${version('pgbouncer', ['--version'])}; autocannon ${require('autocannon/package.json').version}`,
    `code: ${describe('git', ['describe', '--always', '--dirty'])} (service built from the working tree); instances' LOG_LEVEL=${LOG_LEVEL}, to ${logPath}`
  ]
  console.log(`\n${header.join('\n')}\n`)

  console.log('1. Delay from a write\'s answer to its event: three instances through one PgBouncer (transaction pooling),\n' +
    '   HAProxy in front (docs/deployment.md); writes to instance A, one feed on each instance\'s own port\n')
  const delay = await measureDelay(bench, dbUrl, log)
  console.log(markdownTable(['feed on', 'writes', 'count', 'missing', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'min ms'], delay.rows, 2))
  console.log(`\n${delay.lines.join('\n')}\n`)

  console.log(`2. ${SUBSCRIBERS} idle subscribers on one instance, alone on the same database directly on PostgreSQL;\n` +
    `   GET /book/<id> by autocannon, ${LOAD_CONNECTIONS} connections, ${LOAD_SECONDS} s per run after a run to warm up;\n` +
    `   ${ROUNDS} rounds of a run without feeds and one with them, then a last run without\n`)
  const { port, service } = await startService(bench, dbUrl, log)
  const subscribers = await measureSubscribers(bench, port, service.pid, dbName)
  console.log(subscribers.table)
  console.log(`\n${subscribers.lines.join('\n')}\n`)

  console.log(`3. The change log's growth: ${LOG_CHANGES} writes through that instance\n`)
  const growth = await measureLog(port, dbUrl)
  console.log(growth.table)
  console.log(`\n${growth.lines.join('\n')}\n`)

  const resultsPath = path.join(bench.tmpDir, 'results.json')
  fs.writeFileSync(resultsPath, JSON.stringify({ header, delay, subscribers, growth }, null, 2))
  console.log(`load average at the end ${os.loadavg().map((load) => load.toFixed(2)).join(' ')}`)
  console.log(`raw results: ${resultsPath}`)
  console.log(`total time: ${((Date.now() - began) / 1000).toFixed(0)} s`)
}

if (process.argv[2] === 'hold-feeds') {
  holdFeeds().catch((err) => {
    console.error(`bench: holding the feeds failed: ${err.stack}`)
    process.exit(1)
  })
} else {
  runBenchmark('bench-changes', main)
}

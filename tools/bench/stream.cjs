'use strict'
/**
 * Measures `GET /books` of the real service on large tables: time to first byte, total time,
 * throughput, the service's peak resident memory, whether the body is a complete envelope; then
 * the same for a buffering baseline (tools/bench/buffered-list.cjs); then a slow reader
 * (backpressure) and a client that disconnects half way. A script, not a test: it prints figures
 * and exits 0 when it ran, whatever it found; 1 only when it could not run.
 *
 *   npm run bench:stream                        # one size, 1,000,000 rows
 *   SIZES=100,1000000,10000000 npm run bench:stream
 *
 * Environment: SIZES (comma-separated row counts, default 1000000), TEST_DB_URL (server to
 * create the throw-away database on, default postgres://postgres@127.0.0.1:5432/postgres),
 * BENCH_PAUSE_MS (the slow reader's pause, default 3000), BENCH_LOG_LEVEL (the service's, default
 * warn; readiness is checked on the port, not on a log line).
 *
 * The service is started exactly as `npm start` starts it (`/bin/sh -c "<scripts.start>"`,
 * whose `exec` makes the spawned pid the service itself); `npm run bench:stream` builds it first. Memory is
 * VmRSS from /proc/<pid>/status sampled every 20 ms, together with VmHWM, the kernel's own peak,
 * which is reset (/proc/<pid>/clear_refs) before each request so that it is that request's peak.
 */
const { spawn, spawnSync } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const { writeFileSync } = require('node:fs')
const http = require('node:http')
const net = require('node:net')
const { join } = require('node:path')
const readline = require('node:readline')
const { setTimeout: sleep } = require('node:timers/promises')
const {
  ROOT, connect, admin, databaseUrl, freePort, serviceCommand, stopChild, request, issueToken, readMemory, cpuSeconds
} = require('./common.cjs')

const SIZES = parseSizes(process.env.SIZES ?? '1000000')
const PAUSE_MS = Number(process.env.BENCH_PAUSE_MS ?? 3000)
/** A service that holds back during the pause uses less CPU than this and grows less than that. */
const BUSY_SHARE = 0.25
const GROWTH_LIMIT = 64e6
const LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? 'warn'

const SAMPLE_MS = 20
/** Where the slow reader pauses and the impatient one disconnects. */
const PROBE_BYTES = 1_000_000
/** A whole list may take this long; no byte at all for IDLE_MS also ends it. */
const REQUEST_TIMEOUT_MS = 20 * 60_000
const IDLE_MS = 120_000
const START_TIMEOUT_MS = 30_000
const STOP_TIMEOUT_MS = 12_000
/** After the disconnect: first look, and how long to keep looking when something is still busy. */
const DISCONNECT_CHECK_MS = 1_000
const DISCONNECT_WAIT_MS = 10_000

const PREFIX = Buffer.from('{"status":200,"message":"Books retrieved successfully","data":[')
const SUFFIX = Buffer.from(']}')
const ROW_START = Buffer.from('{"id":')
const MB = 1e6

function parseSizes (text) {
  const sizes = text.split(',').map((part) => part.trim().replace(/_/g, '')).filter((part) => part !== '')
  for (const size of sizes) {
    if (!/^[1-9]\d*$/.test(size)) {
      console.error(`SIZES: "${size}" is not a positive whole number (SIZES=${text})`)
      process.exit(1)
    }
  }
  // Ascending, so each size only adds rows to the table
  return [...new Set(sizes.map(Number))].sort((a, b) => a - b)
}

/**
 * Resident memory of one process over one request: VmRSS every 20 ms with its time, and VmHWM
 * before (after resetting it, when the kernel lets us) and after.
 */
class MemoryProbe {
  constructor (pid) {
    this.pid = pid
    this.samples = []
    this.hwmReset = false
  }

  start () {
    try {
      writeFileSync(`/proc/${this.pid}/clear_refs`, '5')
      this.hwmReset = true
    } catch {}
    this.before = readMemory(this.pid)
    if (this.before !== null) this.samples.push({ t: performance.now(), rss: this.before.rss })
    this.timer = setInterval(() => this.sample(), SAMPLE_MS)
    return this
  }

  sample () {
    const memory = readMemory(this.pid)
    if (memory !== null) this.samples.push({ t: performance.now(), rss: memory.rss })
    return memory
  }

  stop () {
    clearInterval(this.timer)
    this.after = this.sample()
    return this
  }

  /** Highest sampled RSS in [from, to] (performance.now() times). */
  sampledPeak (from = -Infinity, to = Infinity) {
    let peak = null
    for (const { t, rss } of this.samples) {
      if (t >= from && t <= to && (peak === null || rss > peak)) peak = rss
    }
    return peak
  }

  /** The request's peak: the kernel's when it is this request's, else the sampled one. */
  peak () {
    const sampled = this.sampledPeak()
    const hwm = this.after?.hwm ?? null
    const hwmIsOurs = hwm !== null && (this.hwmReset || hwm > (this.before?.hwm ?? Infinity))
    if (hwmIsOurs) return Math.max(hwm, sampled ?? 0)
    return sampled
  }
}

/** A child process with its recent output lines and its exit. */
class Child {
  constructor (name, command, args, env) {
    this.name = name
    this.exit = null
    this.lines = []
    this.child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    this.pid = this.child.pid
    this.exited = new Promise((resolve) => {
      this.child.once('error', (err) => {
        this.exit = { code: null, signal: null, error: err.message }
        resolve(this.exit)
      })
      this.child.once('close', (code, signal) => {
        this.exit ??= { code, signal }
        resolve(this.exit)
      })
    })
    for (const stream of [this.child.stdout, this.child.stderr]) {
      readline.createInterface({ input: stream }).on('line', (line) => {
        this.lines.push({ t: performance.now(), line })
        if (this.lines.length > 2000) this.lines.shift()
      })
    }
  }

  get running () {
    return this.exit === null
  }

  describeExit () {
    if (this.exit === null) return `${this.name} still running`
    const how = this.exit.error ?? (this.exit.signal !== null ? `signal ${this.exit.signal}` : `code ${this.exit.code}`)
    const last = this.lines.slice(-3).map(({ line }) => line.slice(0, 200)).join(' | ')
    return `${this.name} exited (${how})${last === '' ? '' : `; last output: ${last}`}`
  }

  /** SIGTERM, then SIGKILL when it has not exited within STOP_TIMEOUT_MS. */
  async stop () {
    if (this.running) await stopChild(this.child, STOP_TIMEOUT_MS)
    return await this.exited
  }
}

function accepts (port) {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { socket.destroy(); resolve(false) })
  })
}

/** Resolves when something accepts connections on `port`; rejects when `child` exits first. */
async function waitForPort (child, port) {
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (!child.running) throw new Error(`${child.describeExit()} before listening`)
    if (await accepts(port)) return
    if (Date.now() > deadline) throw new Error(`${child.name} not listening on ${port} after ${START_TIMEOUT_MS} ms`)
    await sleep(50)
  }
}

/**
 * Checks a list body as it streams by, holding only a few bytes: the envelope's prefix and suffix,
 * and every row start `{"id":<n>` (rows counted, ids expected to be 1, 2, 3, ... as seeded).
 */
class BodyScanner {
  constructor () {
    this.rows = 0
    this.head = Buffer.alloc(0)
    this.tail = Buffer.alloc(0)
    this.carry = null
    this.outOfOrder = null
  }

  push (chunk) {
    if (this.head.length < PREFIX.length) {
      this.head = Buffer.concat([this.head, chunk.subarray(0, PREFIX.length - this.head.length)])
    }
    this.tail = Buffer.concat([this.tail, chunk.subarray(-16)]).subarray(-16)
    const buf = this.carry === null ? chunk : Buffer.concat([this.carry, chunk])
    this.carry = null
    let from = 0
    for (;;) {
      const at = buf.indexOf(ROW_START, from)
      if (at === -1) break
      let i = at + ROW_START.length
      let id = 0
      while (i < buf.length && buf[i] >= 0x30 && buf[i] <= 0x39) {
        id = id * 10 + buf[i] - 0x30
        i++
      }
      if (i === buf.length) {
        // The id may go on in the next chunk
        this.carry = Buffer.from(buf.subarray(at))
        return
      }
      this.rows++
      if (id !== this.rows && this.outOfOrder === null) this.outOfOrder = { row: this.rows, id }
      from = i
    }
    // A row start split between this chunk and the next
    this.carry = Buffer.from(buf.subarray(Math.max(from, buf.length - (ROW_START.length - 1))))
  }

  /** What is wrong with the body, given the rows it should hold; empty when nothing is. */
  problems (expectedRows) {
    const problems = []
    if (!this.head.equals(PREFIX)) problems.push(`starts ${JSON.stringify(this.head.toString('latin1').slice(0, 70))}`)
    if (!this.tail.subarray(-SUFFIX.length).equals(SUFFIX)) problems.push(`ends ${JSON.stringify(this.tail.toString('latin1'))}`)
    if (this.rows !== expectedRows) problems.push(`${this.rows} rows, not ${expectedRows}`)
    if (this.outOfOrder !== null) problems.push(`row ${this.outOfOrder.row} has id ${this.outOfOrder.id}`)
    return problems
  }
}

/**
 * `GET /books` on a fresh connection, timed and scanned chunk by chunk, never buffered.
 * `onChunk({ out, res, abort })` runs after each chunk (the slow reader pauses `res` there, the
 * impatient one calls `abort`). Resolves, never rejects: failures are in `out.error`.
 */
function streamBooks (port, token, { onChunk } = {}) {
  return new Promise((resolve) => {
    const started = performance.now()
    const out = {
      status: null,
      headersMs: null,
      firstByteMs: null,
      totalMs: null,
      bytes: 0,
      scan: new BodyScanner(),
      errorBody: '',
      error: null,
      aborted: false
    }
    let settled = false
    const finish = (err) => {
      if (settled) return
      settled = true
      clearTimeout(overall)
      out.totalMs = performance.now() - started
      if (err) out.error = err.message || String(err)
      resolve(out)
    }
    const req = http.request({
      host: '127.0.0.1', port, method: 'GET', path: '/books', headers: { authorization: token }, agent: false
    })
    const overall = setTimeout(() => req.destroy(new Error(`not complete after ${REQUEST_TIMEOUT_MS / 1000} s`)), REQUEST_TIMEOUT_MS)
    req.setTimeout(IDLE_MS, () => req.destroy(new Error(`no byte for ${IDLE_MS / 1000} s`)))
    const abort = () => {
      out.aborted = true
      req.destroy()
      finish()
    }
    req.on('error', finish)
    req.on('response', (res) => {
      out.status = res.statusCode
      out.headersMs = performance.now() - started
      res.on('data', (chunk) => {
        if (out.firstByteMs === null) out.firstByteMs = performance.now() - started
        out.bytes += chunk.length
        if (out.status === 200) out.scan.push(chunk)
        else if (out.errorBody.length < 2000) out.errorBody += chunk.toString('utf8')
        if (onChunk !== undefined) onChunk({ out, res, abort })
      })
      res.on('error', finish)
      const closed = () => finish(res.complete ? null : new Error(`connection closed after ${out.bytes} bytes, before the end of the body`))
      res.on('end', closed)
      res.on('close', closed)
    })
    req.end()
  })
}

/** "ok", "INVALID: ..." or "failed: ..." for one list request. */
function verdict (out, expectedRows, child) {
  let text
  if (out.error !== null) text = `failed: ${out.error}`
  else if (out.status !== 200) {
    let message = out.errorBody.slice(0, 200)
    try {
      message = JSON.parse(out.errorBody).message
    } catch {}
    text = `failed: HTTP ${out.status} ${message}`
  } else {
    const problems = out.scan.problems(expectedRows)
    text = problems.length === 0 ? 'ok' : `INVALID: ${problems.join('; ')}`
  }
  if (child !== undefined && !child.running) text += ` (${child.describeExit()})`
  return text
}

const mb = (bytes) => bytes === null || bytes === undefined ? '-' : (bytes / MB).toFixed(1)
const group = (n) => n.toLocaleString('en-US')

function table (header, rows) {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => String(row[i]).length)))
  const line = (cells) => cells.map((cell, i) => {
    const text = String(cell)
    // Figures right-aligned, the size and words left-aligned
    return i === 1 || i === cells.length - 1 ? text.padEnd(widths[i]) : text.padStart(widths[i])
  }).join(' | ').trimEnd()
  return [line(header), widths.map((width) => '-'.repeat(width)).join('-|-'), ...rows.map(line)].join('\n')
}

/** The service's own sessions, from an admin connection. */
async function serviceSessions (admin, database) {
  const { rows } = await admin.query(`
    SELECT pid, state, wait_event,
           round(extract(epoch FROM now() - xact_start)::numeric, 1) AS xact_s,
           left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS query
    FROM pg_stat_activity
    WHERE application_name = 'bookkeeping' AND datname = $1
    ORDER BY pid`, [database])
  return rows
}

/** Sessions that still work for a request: running a statement or holding a transaction open. */
const busy = (sessions) => sessions.filter(({ state }) => state !== 'idle')

function describeSessions (sessions) {
  if (sessions.length === 0) return 'no sessions'
  const counts = new Map()
  for (const { state } of sessions) counts.set(state, (counts.get(state) ?? 0) + 1)
  const summary = [...counts].map(([state, count]) => `${count} ${state}`).join(', ')
  const details = busy(sessions).map(({ pid, state, xact_s: xactSeconds, query }) =>
    `\n      pid ${pid} ${state}${xactSeconds === null ? '' : `, transaction open ${xactSeconds} s`}: ${query}`)
  return summary + details.join('')
}

function gitDescription () {
  const head = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' })
  if (head.status !== 0) return 'not a git checkout'
  const status = spawnSync('git', ['status', '--porcelain'], { cwd: ROOT, encoding: 'utf8' })
  const changed = status.stdout.split('\n').filter((line) => line !== '').length
  return `${head.stdout.trim()}${changed === 0 ? '' : ` + ${changed} changed file(s)`}`
}

const state = { admin: null, seeder: null, service: null, baseline: null, database: null }
let cleaning = null
/** Set on Ctrl-C: the run stops where it is, and only the cleanup speaks. */
let interrupted = false

/** Stops everything and drops the database; runs once, also on error and on Ctrl-C. */
function cleanup () {
  cleaning ??= (async () => {
    const stops = [state.service, state.baseline].filter((child) => child !== null).map((child) => child.stop())
    const results = await Promise.allSettled(stops)
    if (state.service !== null && results[0]?.status === 'fulfilled') {
      console.log(`\nservice stopped: ${state.service.describeExit().replace(/; last output.*/, '')}`)
    }
    await state.seeder?.end().catch(() => {})
    if (state.database !== null) {
      await admin((client) => client.query(`DROP DATABASE IF EXISTS ${state.database} WITH (FORCE)`)).then(
        () => console.log(`database ${state.database} dropped`),
        (err) => console.error(`could not drop database ${state.database}: ${err.message}`))
    }
    await state.admin?.end().catch(() => {})
  })()
  return cleaning
}

for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]]) {
  process.once(signal, () => {
    interrupted = true
    console.error(`\n${signal}: stopping and dropping the database`)
    cleanup().finally(() => process.exit(code))
  })
}

async function startService (dbUrl) {
  const port = await freePort()
  const { start, command, args, env } = serviceCommand({
    DB_URL: dbUrl,
    SECRET_TOKEN: randomBytes(36).toString('base64url'),
    TOKEN_RATE_LIMIT: '10000',
    PORT: String(port),
    LOG_LEVEL
  })
  const service = new Child('service', command, args, env)
  service.port = port
  service.command = start
  state.service = service
  await waitForPort(service, port)
  return service
}

/** The buffering baseline, started again when it died on the previous size. */
async function baseline (dbUrl) {
  if (state.baseline?.running) return state.baseline
  const port = await freePort()
  const child = new Child('baseline', process.execPath, [join(__dirname, 'buffered-list.cjs')], {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    DB_URL: dbUrl,
    PORT: String(port)
  })
  child.port = port
  state.baseline = child
  await waitForPort(child, port)
  return child
}

async function seed (seeder, from, to) {
  const started = performance.now()
  await seeder.query(`INSERT INTO books (title, author, year)
    SELECT 'Title ' || g, 'Author ' || g, g % 3000 FROM generate_series($1::bigint, $2::bigint) g`, [from + 1, to])
  // Hint bits and statistics now, not during the first measured read; no checkpoint in the middle
  await seeder.query('VACUUM (ANALYZE) books')
  await seeder.query('CHECKPOINT').catch(() => {})
  const { rows } = await seeder.query('SELECT count(*)::bigint AS n, pg_total_relation_size(\'books\') AS bytes FROM books')
  console.log(`seeded ${group(to - from)} rows in ${((performance.now() - started) / 1000).toFixed(1)} s: ` +
    `${group(Number(rows[0].n))} rows, ${mb(Number(rows[0].bytes))} MB on disk`)
}

/** One list request against `child` (service or baseline), with its memory and CPU. */
async function measure (implementation, child, size, authorization) {
  const memory = new MemoryProbe(child.pid).start()
  const cpuBefore = cpuSeconds(child.pid)
  const out = await streamBooks(child.port, authorization)
  memory.stop()
  // A process that died on the request: let its exit (and last words) arrive
  if (out.error !== null) await Promise.race([child.exited, sleep(500)])
  const cpuAfter = cpuSeconds(child.pid)
  const result = verdict(out, size, child)
  const ok = result === 'ok'
  const row = {
    size,
    implementation,
    firstByteMs: out.firstByteMs,
    totalMs: out.totalMs,
    bytes: out.bytes,
    rows: out.scan.rows,
    rateMBs: ok ? out.bytes / MB / (out.totalMs / 1000) : null,
    peak: memory.peak(),
    before: memory.before?.rss ?? null,
    cpu: cpuBefore !== null && cpuAfter !== null ? cpuAfter - cpuBefore : null,
    result
  }
  console.log(`  ${implementation}: ${result}, ${(out.totalMs / 1000).toFixed(2)} s, ${mb(out.bytes)} MB, ` +
    `peak RSS ${mb(row.peak)} MB (sampled ${mb(memory.sampledPeak())}, VmHWM ${mb(memory.before?.hwm)} -> ` +
    `${mb(memory.after?.hwm)}${memory.hwmReset ? ' after reset' : ''}, ${memory.samples.length} samples)`)
  return row
}

function printTable (rows) {
  const header = ['size', 'implementation', 'first byte ms', 'total s', 'MB', 'MB/s', 'rows',
    'peak RSS MB', 'RSS before MB', 'CPU s', 'result']
  const cells = rows.map((row) => [
    group(row.size), row.implementation,
    row.firstByteMs === null ? '-' : row.firstByteMs.toFixed(0),
    (row.totalMs / 1000).toFixed(2), mb(row.bytes),
    row.rateMBs === null ? '-' : row.rateMBs.toFixed(1),
    group(row.rows), mb(row.peak), mb(row.before),
    row.cpu === null ? '-' : row.cpu.toFixed(2), row.result
  ])
  console.log(`\n${table(header, cells)}`)
  console.log('MB = 10^6 bytes. first byte: request sent to first body byte. peak RSS: the process\'s peak ' +
    'resident memory during the request (VmHWM reset before it, and VmRSS sampled every 20 ms). CPU s: the ' +
    'process\'s user+system time during the request. baseline: tools/bench/buffered-list.cjs (one query, ' +
    'JSON.stringify, one write; no statement timeout).')
}

/** A reader that stops after ~1 MB for PAUSE_MS, then reads the rest. */
async function slowReader (admin, service, size) {
  const authorization = await issueToken(service.port)
  const memory = new MemoryProbe(service.pid).start()
  const pause = {}
  let pausing = null
  const out = await streamBooks(service.port, authorization, {
    onChunk: ({ out, res }) => {
      if (pausing !== null || out.bytes < PROBE_BYTES) return
      res.pause()
      pause.start = performance.now()
      pause.bytes = out.bytes
      pause.rssStart = readMemory(service.pid)?.rss ?? null
      pause.cpuStart = cpuSeconds(service.pid)
      pausing = (async () => {
        await sleep(PAUSE_MS / 2)
        pause.sessions = await serviceSessions(admin, state.database).catch((err) => err)
        await sleep(PAUSE_MS / 2)
        pause.rssEnd = readMemory(service.pid)?.rss ?? null
        pause.cpuEnd = cpuSeconds(service.pid)
        pause.end = performance.now()
        res.resume()
      })()
    }
  })
  await pausing
  memory.stop()
  const result = verdict(out, size, service)
  console.log(`\nBackpressure: GET /books of ${group(size)} rows, reading paused for ${PAUSE_MS} ms after ~1 MB`)
  if (pause.start === undefined) {
    console.log(`  never paused: the response had ${group(out.bytes)} bytes; ${result}`)
    return
  }
  const duringPeak = memory.sampledPeak(pause.start, pause.end)
  const growth = duringPeak - pause.rssStart
  console.log(`  paused after ${mb(pause.bytes)} MB received; RSS (MB): before request ${mb(memory.before?.rss)}, ` +
    `peak before the pause ${mb(memory.sampledPeak(-Infinity, pause.start))}, at pause start ${mb(pause.rssStart)}, ` +
    `peak during the pause ${mb(duringPeak)}, at its end ${mb(pause.rssEnd)}, ` +
    `peak after resuming ${mb(memory.sampledPeak(pause.end))}, at the end ${mb(memory.after?.rss)}; ` +
    `request peak ${mb(memory.peak())}`)
  // A service that ignores backpressure goes on producing while nobody reads: it keeps a core
  // busy and its memory grows with the unread rest of the body. One that holds back fills the
  // socket buffers and goes idle; its RSS may still rise a little (garbage not yet collected)
  const cpu = pause.cpuStart !== null && pause.cpuEnd !== null ? pause.cpuEnd - pause.cpuStart : null
  const cpuShare = cpu === null ? null : cpu / (PAUSE_MS / 1000)
  const heldBack = cpuShare !== null && cpuShare < BUSY_SHARE && growth < GROWTH_LIMIT
  console.log(`  during the pause: RSS ${growth >= 0 ? '+' : ''}${mb(growth)} MB at its peak, ` +
    `${mb(out.bytes - pause.bytes)} MB of the body unread; service CPU ` +
    `${cpu === null ? '-' : `${cpu.toFixed(2)} s (${(cpuShare * 100).toFixed(0)}% of a core)`}: ` +
    `${heldBack ? 'held back' : 'DID NOT HOLD BACK'} (held back = under ${BUSY_SHARE * 100}% of a core ` +
    `and under ${mb(GROWTH_LIMIT)} MB of growth)`)
  const sessions = pause.sessions instanceof Error ? `could not read: ${pause.sessions.message}` : describeSessions(pause.sessions)
  console.log(`  service's database sessions mid-pause: ${sessions}`)
  console.log(`  after resuming: ${result}, ${group(out.scan.rows)} rows, ${mb(out.bytes)} MB, ` +
    `${(out.totalMs / 1000).toFixed(2)} s in all`)
}

/** A client that disconnects after ~1 MB: the service must let go of its query and keep serving. */
async function disconnect (admin, service, size) {
  const authorization = await issueToken(service.port)
  const requestedAt = performance.now()
  const out = await streamBooks(service.port, authorization, {
    onChunk: ({ out, abort }) => { if (out.bytes >= PROBE_BYTES) abort() }
  })
  const abortedAt = performance.now()
  const cpuAtAbort = cpuSeconds(service.pid)
  console.log(`\nDisconnect: GET /books of ${group(size)} rows, client gone after ${mb(out.bytes)} MB`)
  if (!out.aborted) console.log(`  never disconnected: ${verdict(out, size, service)}`)
  await sleep(DISCONNECT_CHECK_MS)
  const cpuAfter = cpuSeconds(service.pid)
  let sessions = await serviceSessions(admin, state.database)
  // A service that goes on reading the table for nobody keeps using CPU after the client left
  const cpu = cpuAtAbort !== null && cpuAfter !== null ? `${(cpuAfter - cpuAtAbort).toFixed(2)} s` : '-'
  console.log(`  after ${DISCONNECT_CHECK_MS / 1000} s: service sessions ${describeSessions(sessions)}; ` +
    `service CPU since the disconnect ${cpu}; RSS ${mb(readMemory(service.pid)?.rss)} MB`)
  if (busy(sessions).length === 0) {
    console.log('  no query left active or idle in transaction: ok')
  } else {
    while (busy(sessions).length > 0 && performance.now() - abortedAt < DISCONNECT_WAIT_MS) {
      await sleep(250)
      sessions = await serviceSessions(admin, state.database)
    }
    const after = ((performance.now() - abortedAt) / 1000).toFixed(1)
    console.log(busy(sessions).length === 0
      ? `  LATE: the sessions went idle only ${after} s after the disconnect`
      : `  STUCK: still busy ${after} s after the disconnect: ${describeSessions(sessions)}`)
  }
  try {
    const response = await request(service.port, 'GET', '/book/1', { token: authorization })
    const good = response.status === 200 && response.json?.data?.id === 1
    console.log(`  then GET /book/1: ${response.status} in ${response.ms.toFixed(0)} ms${good ? ': ok' : `: UNEXPECTED ${response.text.slice(0, 200)}`}`)
  } catch (err) {
    console.log(`  then GET /book/1: FAILED: ${err.message}`)
  }
  // Log lines arrive through a pipe, a moment later
  await sleep(200)
  const logged = service.lines.filter(({ t }) => t >= requestedAt).flatMap(({ line }) => {
    try {
      const entry = JSON.parse(line)
      if (entry.url === '/token') return []
      const request = entry.method === undefined ? '' : ` ${entry.method} ${entry.url} ${entry.statusCode} ${entry.responseTime} ms`
      return `level ${entry.level} "${entry.msg}"${request}${entry.err ? ` (${entry.err.message})` : ''}`
    } catch {
      return line.slice(0, 200)
    }
  })
  console.log(`  service log (LOG_LEVEL=${LOG_LEVEL}) since the aborted request: ${logged.length === 0 ? 'nothing' : logged.join(' | ')}`)
  if (!service.running) console.log(`  SERVICE DIED: ${service.describeExit()}`)
}

async function main () {
  state.admin = await connect()
  const database = `bookkeeping_bench_${process.pid}_${randomBytes(4).toString('hex')}`
  await state.admin.query(`CREATE DATABASE ${database}`)
  state.database = database
  const dbUrl = databaseUrl(database)

  const service = await startService(dbUrl)
  console.log(`bookkeeping GET /books bench: sizes ${SIZES.map(group).join(', ')}; node ${process.version}; ` +
    `commit ${gitDescription()}`)
  console.log(`service pid ${service.pid} on port ${service.port}: ${service.command}`)
  console.log(`database ${database}; pause ${PAUSE_MS} ms; RSS sampled every ${SAMPLE_MS} ms`)

  state.seeder = await connect(dbUrl)

  const rows = []
  let seeded = 0
  for (const size of SIZES) {
    console.log(`\n${group(size)} rows`)
    await seed(state.seeder, seeded, size)
    seeded = size
    if (interrupted) return
    if (!service.running) throw new Error(service.describeExit())
    rows.push(await measure('service', service, size, await issueToken(service.port)))
    if (interrupted) return
    try {
      rows.push(await measure('buffered baseline', await baseline(dbUrl), size, ''))
    } catch (err) {
      rows.push({ size, implementation: 'buffered baseline', firstByteMs: null, totalMs: 0, bytes: 0, rows: 0, rateMBs: null, peak: null, before: null, cpu: null, result: `failed: ${err.message}` })
    }
  }
  await state.baseline?.stop()

  if (interrupted) return
  printTable(rows)
  if (service.running) await slowReader(state.admin, service, seeded)
  if (interrupted) return
  if (service.running) await disconnect(state.admin, service, seeded)
  if (!service.running) console.log(`\nSERVICE DIED: ${service.describeExit()}`)
}

main().then(
  async () => {
    if (interrupted) return
    await cleanup()
    console.log(`bench ran in ${(performance.now() / 1000).toFixed(1)} s`)
    process.exit(0)
  },
  (err) => {
    if (interrupted) return
    console.error(`\nbench could not run: ${err.stack}`)
    cleanup().finally(() => process.exit(1))
  }
)

'use strict'
/**
 * `npm run bench:bulk`: bulk import (`POST /books`) and export (`GET /books` as CSV) of the real
 * service against PostgreSQL's own `COPY` through psql's `\copy`, in one run on one database
 * (docs/performance.md, Bulk import and export). A script, not a test: it prints figures and the
 * targets beside them, and exits 0 when it ran, whatever they are; 1 only when it could not run.
 *
 * 0. BENCH_BOOKS books (default 1,000,000) are generated into a CSV file (header
 *    `title,author,year`) and an NDJSON file of the same books: titles of one to six words from
 *    a list, some with a subtitle, a comma, quotes, a line break, accents, right-to-left text or
 *    an emoji; authors from lists of first and last names, some `Last, First`, some two; years
 *    1450 to 2025, a few before the common era. A new database; the service is started on it as
 *    `npm start` starts it and migrates it: `books` with all its indexes.
 * 1. Import. The reference: `psql -c "\copy books (title, author, year) FROM '<file>' CSV HEADER"`
 *    (the same file), then `TRUNCATE books`. Then `POST /books` of the file as `text/csv`, then
 *    as `application/x-ndjson`, each with `Prefer: return=minimal` into the emptied table. Each:
 *    the time from the first byte sent to the last received, the CPU of the client (psql; this
 *    script), of the service and of the PostgreSQL processes of this database (its backends and
 *    autovacuum workers, read from /proc by their process titles), and the service's peak
 *    resident memory above its idle one, read once it had started (VmRSS every 20 ms and VmHWM,
 *    reset before the step).
 *    Targets: CSV at most 1.5x the reference, 150 MB above idle; NDJSON at most 1.2x CSV.
 * 2. Export, of the books the reference stored (vacuumed first, so neither reader sets hint
 *    bits): `psql -c "\copy (SELECT id, title, author, year FROM books ORDER BY id) TO STDOUT CSV"`
 *    read to its end by this script, then `GET /books` with `Accept: text/csv`; its length is
 *    checked against the reference's (a header line, and CRLF where COPY ends a record with LF).
 *    Targets: at most 1.5x the reference, 150 MB above idle.
 * 3. Point reads during an import: a CSV import of the same books into the table holding the
 *    books of step 1 while a second client sends `GET /book/<id>` (ids of those books, one
 *    keep-alive connection, one request at a time, BENCH_PROBE_PAUSE_MS apart): p50 and p99 of
 *    those that started while the import ran, and of BENCH_PROBE_SECONDS of them before it.
 *    Target: p99 under 50 ms.
 *
 * A `CHECKPOINT` comes before each timed step, so that none pays for the writes of the one before.
 * Each figure is one run; on shared cores compare the ratios of one run rather than times of two.
 * Every process it starts is stopped, its database dropped and its files removed (the service's
 * log is kept when the run fails), also when it is interrupted.
 *
 * With BENCH_STORE=pglite the database is an embedded store (tools/bench/pglite-store.cjs: PGlite
 * with the service's settings, served as `DB_URL=pglite:memory` serves it, in a worker thread of
 * this script, so the service's memory is its own) and the reference is PGlite's own COPY of the
 * same file into, and out of, the same database: `COPY ... FROM '/dev/blob'` and `TO '/dev/blob'`.
 * PG CPU is then this process's beyond its main thread.
 *
 * Environment: BENCH_BOOKS (1000000), BENCH_PROBE_PAUSE_MS (10), BENCH_PROBE_SECONDS (3),
 * BENCH_LOG_LEVEL (the service's, default warn), BENCH_PGBOUNCER (1: the service through a
 * PgBouncer in transaction pooling, the reference direct), BENCH_STORE (postgres, or pglite),
 * TEST_DB_URL (the server, default postgres://postgres@127.0.0.1:5432/postgres; a Citus
 * coordinator, docs/development.md, Citus), PSQL (the psql program, default psql on PATH).
 */
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const { Worker } = require('node:worker_threads')
const {
  ADMIN_URL, admin, cpuSeconds, freePort, issueToken, markdownTable, positive, readAnswer, readMemory, request, runBenchmark, serviceCommand
} = require('./common.cjs')

const BOOKS = positive('BENCH_BOOKS', 1_000_000)
const PROBE_PAUSE_MS = Number(process.env.BENCH_PROBE_PAUSE_MS ?? 10)
const PROBE_SECONDS = positive('BENCH_PROBE_SECONDS', 3)
const LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? 'warn'
const PSQL = process.env.PSQL ?? 'psql'
/** The service through a PgBouncer in transaction pooling (docs/deploy/pgbouncer.ini); psql's `\copy` still direct. */
const THROUGH_PGBOUNCER = process.env.BENCH_PGBOUNCER === '1'
/** `postgres` (the server at TEST_DB_URL) or `pglite` (an embedded store, tools/bench/pglite-store.cjs). */
const STORE = process.env.BENCH_STORE ?? 'postgres'
if (!['postgres', 'pglite'].includes(STORE)) throw new Error(`BENCH_STORE is postgres or pglite, not ${STORE}`)
if (STORE === 'pglite' && THROUGH_PGBOUNCER) throw new Error('BENCH_PGBOUNCER is for BENCH_STORE=postgres')

/** The targets the figures are printed beside: the ratios to COPY, the memory, the p99 of point reads. */
const IMPORT_RATIO_TARGET = 1.5
const NDJSON_RATIO_TARGET = 1.2
const EXPORT_RATIO_TARGET = 1.5
const MEMORY_TARGET_MB = 150
const PROBE_P99_TARGET_MS = 50

const SAMPLE_MS = 20
/** The database's processes are read every fifth sample: a scan of /proc costs more than a status file. */
const DATABASE_SAMPLE_EVERY = 5
const IDLE_SETTLE_MS = 2000
const START_TIMEOUT_MS = 60_000
/** An import or export that has sent nothing for this long is taken as stuck. */
const IDLE_TIMEOUT_MS = 300_000
const MB = 1e6
/** `BOOKS_CSV_HEADER` of src/csv-text.ts: what the service's CSV has before the first book. */
const EXPORT_HEADER_BYTES = Buffer.byteLength('id,title,author,year\r\n')

// --- the books ------------------------------------------------------------------------------

const TITLE_WORDS = `night day river stone garden house winter summer shadow light city island
  war peace king queen child mother father road sea mountain forest fire water memory dream
  letter story secret time voyage journey song silence heart hunger glass iron silver golden
  last first little great lost hidden broken quiet wild dark bright empty distant northern
  southern old new long short second other strange common open burning falling rising
  sleeping waking invisible red blue green black white yellow autumn spring morning evening
  bridge tower castle harbor valley desert orchard library kitchen window door wall field
  storm rain snow wind moon sun star sky earth clock mirror map book bell ship train horse
  wolf fox crow owl bird fish tree rose lily oak birch thorn salt bread wine honey milk ash
  dust bone blood gold paper ink name word promise lie truth law order chaos history empire
  republic revolution kingdom village province frontier border exile return remains ruins`.split(/\s+/).filter(Boolean)
const JOINERS = ['of', 'the', 'and', 'in', 'at', 'under', 'beyond', 'without', 'for', 'a']
const FIRST_NAMES = `James Mary John Patricia Robert Jennifer Michael Linda William Elizabeth David
  Barbara Richard Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa
  Anthony Margaret Mark Sandra Paul Ashley Steven Dorothy Andrew Kimberly Kenneth Emily Joshua
  Donna Kevin Michelle Brian Carol George Amanda Edward Melissa Olga Ivan Yuki Haruki Chen Wei
  Aisha Omar Fatima Ingrid Søren Zoë José Ana María François Jürgen Björk Chiamaka Kwame
  Priya Arjun Siobhán Łukasz Dvořák Émile`.split(/\s+/).filter(Boolean)
const LAST_NAMES = `Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez
  Hernandez Lopez Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez
  Thompson White Harris Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright
  Scott Torres Nguyen Hill Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell
  Carter Roberts Tolstoy Dostoevsky Murakami Achebe Adichie Borges Márquez Eco Calvino Kafka
  Mann Hesse Rilke Szymborska Čapek Müller Østergaard Ó'Brien O'Connor D'Arcy García-Lorca
  van der Berg de la Cruz 村上 الخطيب Левин`.split(/\s+/).filter(Boolean)
const EXTRAS = [' — 第二版', ' (نسخة جديدة)', ' 📚', ' – Édition révisée', ' 🌙✨', ' «Том 2»']

/** A small deterministic generator (mulberry32): the same books in every run. */
function random32 (seed) {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6D2B79F5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

function createBookMaker (seed) {
  const random = random32(seed)
  const pick = (list) => list[Math.floor(random() * list.length)]
  const capital = (word) => word[0].toUpperCase() + word.slice(1)
  const phrase = (min, max) => {
    const count = min + Math.floor(random() * (max - min + 1))
    const words = []
    for (let i = 0; i < count; i++) words.push(i > 0 && i < count - 1 && random() < 0.25 ? pick(JOINERS) : capital(pick(TITLE_WORDS)))
    return words.join(' ')
  }
  const person = () => `${pick(FIRST_NAMES)} ${pick(LAST_NAMES)}`
  return () => {
    let title = phrase(1, 6)
    const t = random()
    if (t < 0.08) title += `: ${phrase(2, 4)}`
    else if (t < 0.13) title = `${phrase(1, 3)}, ${phrase(1, 3)}`
    else if (t < 0.15) title = `The "${capital(pick(TITLE_WORDS))}" ${phrase(1, 3)}`
    else if (t < 0.153) title = `${title}\n${phrase(1, 3)}`
    else if (t < 0.163) title += pick(EXTRAS)
    let author = person()
    const a = random()
    if (a < 0.03) author = `${pick(LAST_NAMES)}, ${pick(FIRST_NAMES)}`
    else if (a < 0.08) author = `${person()} and ${person()}`
    else if (a < 0.09) author = `${pick(FIRST_NAMES)} "${pick(FIRST_NAMES)}" ${pick(LAST_NAMES)}`
    const year = random() < 0.002 ? -1 - Math.floor(random() * 800) : 1450 + Math.floor(random() * 576)
    return { title, author, year }
  }
}

/** A CSV field as COPY ... CSV writes it: quoted when it holds a comma, a quote, CR or LF. */
function csvField (text) {
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text
}

function writeChunk (stream, text) {
  return stream.write(text) ? null : new Promise((resolve) => stream.once('drain', resolve))
}

async function closeStream (stream) {
  await new Promise((resolve, reject) => stream.end((err) => err ? reject(err) : resolve()))
}

/** The CSV file (with its header line) and the NDJSON file of the same `count` books. */
async function writeBooks (dir, count) {
  const csvPath = path.join(dir, 'books.csv')
  const ndjsonPath = path.join(dir, 'books.ndjson')
  const csv = fs.createWriteStream(csvPath)
  const ndjson = fs.createWriteStream(ndjsonPath)
  const nextBook = createBookMaker(41)
  let csvText = 'title,author,year\n'
  let ndjsonText = ''
  for (let i = 0; i < count; i++) {
    const book = nextBook()
    csvText += `${csvField(book.title)},${csvField(book.author)},${book.year}\n`
    ndjsonText += `${JSON.stringify(book)}\n`
    if (csvText.length > 1 << 20 || i === count - 1) {
      await Promise.all([writeChunk(csv, csvText), writeChunk(ndjson, ndjsonText)])
      csvText = ''
      ndjsonText = ''
    }
  }
  await Promise.all([closeStream(csv), closeStream(ndjson)])
  return { csvPath, ndjsonPath, csvBytes: fs.statSync(csvPath).size, ndjsonBytes: fs.statSync(ndjsonPath).size }
}

// --- what a step costs ----------------------------------------------------------------------

/**
 * User plus system CPU seconds of the PostgreSQL processes working for database `name` (their
 * titles name it: backends, autovacuum workers). A process that exits takes its time with it,
 * so each is read while it lives and its last reading kept: `poll()` often, `total()` at the end.
 */
class DatabaseCpu {
  constructor (name) {
    this.marker = ` ${name} `
    this.last = new Map()
    this.others = new Set()
  }

  poll () {
    for (const entry of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(entry) || this.others.has(entry)) continue
      let command = ''
      let title = ''
      try {
        command = fs.readFileSync(`/proc/${entry}/comm`, 'utf8')
        // A new backend has the postmaster's title until it has set its own: read it each time
        if (command === 'postgres\n') title = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8')
      } catch {}
      if (command !== 'postgres\n') {
        this.others.add(entry)
        continue
      }
      if (!title.startsWith('postgres:') || !title.includes(this.marker)) continue
      const seconds = cpuSeconds(entry)
      if (seconds !== null) this.last.set(entry, seconds)
    }
  }

  total () {
    this.poll()
    let sum = 0
    for (const seconds of this.last.values()) sum += seconds
    return sum
  }
}

/**
 * One step's costs: every SAMPLE_MS the service's VmRSS (its peak above `idleRss`, VmHWM reset
 * so that the kernel's own peak is the step's too), the CPU of the client (the psql given to
 * `setClient`: its last reading; else this process) and of the database's PostgreSQL processes.
 */
function watch ({ servicePid, idleRss, database }) {
  try {
    fs.writeFileSync(`/proc/${servicePid}/clear_refs`, '5')
  } catch {}
  const before = readMemory(servicePid)
  let peak = before?.rss ?? 0
  let clientPid = null
  const serviceBefore = cpuSeconds(servicePid)
  const databaseBefore = database.total()
  const selfBefore = process.cpuUsage()
  let clientCpu = null
  // This process's own CPU counts as the client's only outside the sampling
  let samplingCpu = 0
  let samples = 0
  const sample = () => {
    const started = process.cpuUsage()
    const memory = readMemory(servicePid)
    if (memory !== null) peak = Math.max(peak, memory.rss)
    if (clientPid !== null) clientCpu = cpuSeconds(clientPid) ?? clientCpu
    if (samples++ % DATABASE_SAMPLE_EVERY === 0) database.poll()
    const spent = process.cpuUsage(started)
    samplingCpu += (spent.user + spent.system) / 1e6
  }
  const timer = setInterval(sample, SAMPLE_MS)
  return {
    setClient (pid) {
      clientPid = pid
      clientCpu = 0
    },
    stop () {
      clearInterval(timer)
      sample()
      const after = readMemory(servicePid)
      const self = process.cpuUsage(selfBefore)
      const databaseCpu = database.total() - databaseBefore
      return {
        rssBefore: before?.rss ?? NaN,
        peakAboveIdle: Math.max(peak, after?.hwm ?? 0) - idleRss,
        serviceCpu: cpuSeconds(servicePid) - serviceBefore,
        databaseCpu,
        // An embedded store in this process is not the client's
        clientCpu: clientPid === null ? (self.user + self.system) / 1e6 - samplingCpu - (database.inThisProcess ? databaseCpu : 0) : clientCpu
      }
    }
  }
}

/** psql running `command` on `dbUrl`: its time and the length of its standard output; `onSpawn(pid)` once started. */
function runPsql (dbUrl, command, onSpawn = () => {}) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const child = spawn(PSQL, ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', dbUrl, '-c', command], { stdio: ['ignore', 'pipe', 'pipe'] })
    onSpawn(child.pid)
    let bytes = 0
    let errors = ''
    child.stdout.on('data', (chunk) => { bytes += chunk.length })
    child.stderr.on('data', (chunk) => { errors += chunk })
    child.once('error', (err) => reject(new Error(`${PSQL}: ${err.message} (set PSQL to the program)`)))
    child.once('close', (code) => {
      const seconds = (performance.now() - started) / 1000
      if (code !== 0) return reject(new Error(`psql ${command.slice(0, 60)} exited ${code}: ${errors.trim().slice(0, 300)}`))
      resolve({ seconds, bytes })
    })
  })
}

/** `POST /books` of a file: status, JSON answer and seconds, from the first byte sent to the last received. */
function postFile (port, token, file, contentType) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const req = http.request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/books',
      agent: false,
      headers: {
        authorization: token,
        'content-type': contentType,
        'content-length': fs.statSync(file).size,
        prefer: 'return=minimal'
      }
    }, (res) => {
      readAnswer(res).then((answer) => resolve({ ...answer, seconds: (performance.now() - started) / 1000 }), reject)
    })
    req.setTimeout(IDLE_TIMEOUT_MS, () => req.destroy(new Error(`POST /books: nothing for ${IDLE_TIMEOUT_MS / 1000} s`)))
    // An answer before the whole body was sent (a refusal) ends the upload: its answer counts;
    // a connection that ends with no answer (the service gone) fails the step
    let answered = false
    req.once('response', () => { answered = true })
    req.on('error', (err) => { if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') reject(err) })
    req.on('close', () => { if (!answered) reject(new Error('POST /books: the connection closed with no answer')) })
    fs.createReadStream(file, { highWaterMark: 1 << 20 }).on('error', reject).pipe(req)
  })
}

/** `GET /books` as CSV, read to the end: status, content type, bytes, whether it ended complete, seconds. */
function getCsv (port, token) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const req = http.get({
      host: '127.0.0.1', port, path: '/books', agent: false, headers: { authorization: token, accept: 'text/csv' }
    }, (res) => {
      let bytes = 0
      res.on('data', (chunk) => { bytes += chunk.length })
      res.on('error', reject)
      res.on('close', () => resolve({
        status: res.statusCode,
        type: res.headers['content-type'] ?? '',
        bytes,
        complete: res.complete,
        seconds: (performance.now() - started) / 1000
      }))
    })
    req.setTimeout(IDLE_TIMEOUT_MS, () => req.destroy(new Error(`GET /books: nothing for ${IDLE_TIMEOUT_MS / 1000} s`)))
    req.on('error', reject)
  })
}

// --- point reads during an import -----------------------------------------------------------

function percentile (values, p) {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1)]
}

/**
 * GET /book/<id> of ids in [first, last], one at a time on one keep-alive connection, until
 * `stop.done`: each request's start, time and status.
 */
async function probe (port, token, first, last, stop) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const samples = []
  const random = random32(7)
  try {
    while (!stop.done) {
      const id = first + Math.floor(random() * (last - first + 1))
      const at = performance.now()
      const status = await new Promise((resolve) => {
        const req = http.get({ host: '127.0.0.1', port, path: `/book/${id}`, agent, headers: { authorization: token } }, (res) => {
          res.resume()
          res.on('end', () => resolve(String(res.statusCode)))
          res.on('error', (err) => resolve(err.message))
        })
        req.setTimeout(30_000, () => req.destroy(new Error('no answer in 30 s')))
        req.on('error', (err) => resolve(err.message))
      })
      samples.push({ at, ms: performance.now() - at, status })
      if (PROBE_PAUSE_MS > 0) await sleep(PROBE_PAUSE_MS)
    }
  } finally {
    agent.destroy()
  }
  return samples
}

function describeProbe (samples) {
  const ms = samples.map((sample) => sample.ms)
  const statuses = {}
  for (const { status } of samples) statuses[status] = (statuses[status] ?? 0) + 1
  return { count: samples.length, p50: percentile(ms, 50), p99: percentile(ms, 99), max: Math.max(...ms), statuses }
}

// --- the stores -----------------------------------------------------------------------------

/**
 * The database the service uses, and its store's own COPY of the same books as the reference:
 * `copyIn(file, watcher)` and `copyOut(watcher)` answer `{ seconds }` and `{ seconds, bytes }`.
 * At a Citus coordinator, the database is spread over its workers (tools/topology/citus.ts), whose
 * processes for it count as the database's when they run on this machine.
 */
async function serverStore (bench) {
  const { dbUrl, pgVersion } = await bench.createDatabase()
  // The build of the tools (npm run build:tools)
  const { citusWorkers, spreadOverCitus } = require('../dist/tools/topology/citus.js')
  const workers = await citusWorkers(ADMIN_URL)
  if (workers.length > 0) bench.onCleanup(await spreadOverCitus(ADMIN_URL, new URL(dbUrl).pathname.slice(1), workers))
  const citus = workers.length === 0
    ? ''
    : `, Citus ${(await admin((client) => client.query("SELECT extversion FROM pg_extension WHERE extname = 'citus'"), dbUrl)).rows[0].extversion} over ${workers.length} workers`
  const runOn = (command) => (watcher) => runPsql(dbUrl, command, (psqlPid) => watcher.setClient(psqlPid))
  return {
    dbUrl,
    version: `PostgreSQL ${pgVersion}${citus}`,
    database: new DatabaseCpu(new URL(dbUrl).pathname.slice(1)),
    copyInLabel: 'psql \\copy books FROM file CSV (reference)',
    copyOutLabel: 'psql \\copy (SELECT ... ORDER BY id) TO STDOUT CSV (reference)',
    copyIn: (file, watcher) => runOn(`\\copy books (title, author, year) FROM '${file}' CSV HEADER`)(watcher),
    copyOut: runOn('\\copy (SELECT id, title, author, year FROM books ORDER BY id) TO STDOUT CSV')
  }
}

/**
 * An embedded store in a worker thread of this process (tools/bench/pglite-store.cjs), as the
 * service serves `pglite:memory` itself, apart from the service so that its memory is the
 * service's alone; the reference is PGlite's own COPY from and to a file, on the same database.
 * Its CPU is what this process spends beyond its main thread.
 */
async function pgliteStore (bench) {
  const worker = new Worker(path.join(__dirname, 'pglite-store.cjs'))
  const answer = () => new Promise((resolve, reject) => {
    const failed = (err) => reject(new Error(`the PGlite store: ${err.message}`))
    worker.once('error', failed).once('message', (message) => {
      worker.off('error', failed)
      if (message.error !== undefined) reject(new Error(`the PGlite store: ${message.error}`))
      else resolve(message)
    })
  })
  const { port } = await answer()
  bench.onCleanup(async () => {
    worker.postMessage('stop')
    await answer().catch(() => {})
    await worker.terminate()
  })
  const ask = (message) => {
    const answered = answer()
    worker.postMessage(message)
    return answered
  }
  const dbUrl = `postgres://postgres@127.0.0.1:${port}/postgres`
  const version = (await admin((client) => client.query('SELECT version() AS v'), dbUrl)).rows[0].v.split(' on ')[0]
  // The main thread's CPU is this script's: the rest of the process is the store's (its thread, and
  // the threads that collect its garbage, compile its WebAssembly and read its files)
  const mainThread = `${process.pid}/task/${process.pid}`
  return {
    dbUrl,
    version,
    database: { inThisProcess: true, poll () {}, total: () => cpuSeconds(process.pid) - cpuSeconds(mainThread) },
    // PGlite's own COPY has no client
    referenceCosts: { clientCpu: null },
    copyInLabel: "PGlite COPY books FROM '/dev/blob' CSV (reference)",
    copyOutLabel: "PGlite COPY (SELECT ... ORDER BY id) TO '/dev/blob' CSV (reference)",
    copyIn: (file) => ask({ copyIn: file }),
    copyOut: () => ask({ copyOut: true })
  }
}

// --- the service ----------------------------------------------------------------------------

async function startService (bench, dbUrl, log) {
  const port = await freePort()
  let serviceDbUrl = dbUrl
  if (THROUGH_PGBOUNCER) {
    // The build of the tools (npm run build:tools), as bench:topology uses it
    const { startPgbouncer } = require('../dist/tools/topology/pgbouncer.js')
    const pgbouncer = await startPgbouncer(dbUrl)
    bench.onCleanup(() => pgbouncer.stop())
    serviceDbUrl = pgbouncer.url(dbUrl)
  }
  const { command, args, env } = serviceCommand({
    DB_URL: serviceDbUrl,
    SECRET_TOKEN: randomBytes(36).toString('base64url'),
    PORT: String(port),
    LOG_LEVEL
  })
  const service = bench.track(spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }))
  service.stdout.on('data', (chunk) => log.write(chunk))
  service.stderr.on('data', (chunk) => log.write(chunk))
  const started = performance.now()
  for (;;) {
    if (service.exitCode !== null || service.signalCode !== null) throw new Error(`the service exited (${service.exitCode ?? service.signalCode}); its output is in ${log.path}`)
    if (performance.now() - started > START_TIMEOUT_MS) throw new Error(`the service was not ready within ${START_TIMEOUT_MS / 1000} s; its output is in ${log.path}`)
    const ready = await request(port, 'GET', '/health/ready', { timeoutMs: 1000 }).then((answer) => answer.status === 200, () => false)
    if (ready) return { port, pid: service.pid }
    await sleep(100)
  }
}

// --- the run --------------------------------------------------------------------------------

const seconds = (value) => value.toFixed(2)
const megabytes = (bytes) => (bytes / MB).toFixed(1)
const ratio = (value, reference) => (value / reference).toFixed(2)
const verdict = (ok) => ok ? 'met' : 'MISSED'

function costRow (label, seconds_, costs, ratioText) {
  return [label, seconds(seconds_), ratioText,
    costs.serviceCpu === null ? '-' : seconds(costs.serviceCpu), seconds(costs.databaseCpu), costs.clientCpu === null ? '-' : seconds(costs.clientCpu),
    costs.peakAboveIdle === null ? '-' : megabytes(costs.peakAboveIdle)]
}

runBenchmark('bulk', async (bench) => {
  let finished = false
  bench.onCleanup(async () => {
    for (const file of ['books.csv', 'books.ndjson']) fs.rmSync(path.join(bench.tmpDir, file), { force: true })
    if (finished) fs.rmSync(bench.tmpDir, { recursive: true, force: true })
  })
  const store = STORE === 'pglite' ? await pgliteStore(bench) : await serverStore(bench)
  const { dbUrl, database } = store
  const sql = (text, values) => admin((client) => client.query(text, values), dbUrl)

  const generated = performance.now()
  const files = await writeBooks(bench.tmpDir, BOOKS)
  console.log(`bench:bulk: ${BOOKS.toLocaleString('en-US')} books, CSV ${megabytes(files.csvBytes)} MB, NDJSON ${megabytes(files.ndjsonBytes)} MB ` +
    `(generated in ${seconds((performance.now() - generated) / 1000)} s); ${store.version}; ${os.cpus().length} cores` +
    (THROUGH_PGBOUNCER ? '; the service through PgBouncer' : ''))

  const log = fs.createWriteStream(path.join(bench.tmpDir, 'service.log'))
  log.path = path.join(bench.tmpDir, 'service.log')
  const { port, pid } = await startService(bench, dbUrl, log)
  const token = await issueToken(port)
  const indexes = (await sql("SELECT count(*)::int AS n FROM pg_indexes WHERE tablename = 'books'")).rows[0].n
  await sleep(IDLE_SETTLE_MS)
  // What each step's peak is measured above: the service started, a token issued, nothing else
  const idleRss = readMemory(pid).rss
  console.log(`service started and migrated the database: books has ${indexes} indexes; idle RSS ${megabytes(idleRss)} MB\n`)
  const settle = async () => {
    await sql('CHECKPOINT')
    await sleep(500)
  }
  const countBooks = async () => (await sql('SELECT count(*)::int AS n FROM books')).rows[0].n
  const importRows = []
  const exportRows = []
  const lines = []

  // 1a. The reference import
  await settle()
  let watcher = watch({ servicePid: pid, idleRss, database })
  let costs
  const copyIn = await store.copyIn(files.csvPath, watcher)
  const copyInCosts = { ...watcher.stop(), serviceCpu: null, peakAboveIdle: null, ...store.referenceCosts }
  const copied = await countBooks()
  if (copied !== BOOKS) throw new Error(`the reference stored ${copied} books of ${BOOKS}`)
  importRows.push(costRow(store.copyInLabel, copyIn.seconds, copyInCosts, '1.00'))

  // 2. The exports, of the books the reference stored
  await sql('VACUUM ANALYZE books')
  await settle()
  watcher = watch({ servicePid: pid, idleRss, database })
  const copyOut = await store.copyOut(watcher)
  const copyOutCosts = { ...watcher.stop(), serviceCpu: null, peakAboveIdle: null, ...store.referenceCosts }
  exportRows.push(costRow(store.copyOutLabel, copyOut.seconds, copyOutCosts, '1.00'))
  await settle()
  watcher = watch({ servicePid: pid, idleRss, database })
  const exported = await getCsv(port, token)
  costs = watcher.stop()
  const expectedBytes = copyOut.bytes + EXPORT_HEADER_BYTES + BOOKS
  if (exported.status === 200 && exported.type.startsWith('text/csv')) {
    exportRows.push(costRow('GET /books, Accept: text/csv', exported.seconds, costs, ratio(exported.seconds, copyOut.seconds)))
    const sameLength = exported.bytes === expectedBytes
    lines.push(`export: ${megabytes(exported.bytes)} MB, ${exported.complete ? 'complete' : 'NOT COMPLETE'}, ` +
      `${sameLength ? 'the reference\'s length with a header line and CRLF line ends' : `EXPECTED ${expectedBytes} bytes (the reference's ${copyOut.bytes}, a header line, CRLF)`}; ` +
      `time ${ratio(exported.seconds, copyOut.seconds)}x the reference (target <= ${EXPORT_RATIO_TARGET}: ${verdict(exported.seconds / copyOut.seconds <= EXPORT_RATIO_TARGET)}), ` +
      `RSS +${megabytes(costs.peakAboveIdle)} MB over idle (${megabytes(costs.rssBefore)} MB just before) (target <= ${MEMORY_TARGET_MB}: ${verdict(costs.peakAboveIdle / MB <= MEMORY_TARGET_MB)})`)
  } else {
    lines.push(`export: GET /books with Accept: text/csv answered ${exported.status} ${exported.type}: not CSV, not measured`)
  }

  // 1b. The service's imports, each into the emptied table
  const imports = {}
  for (const [label, file, contentType] of [['CSV', files.csvPath, 'text/csv'], ['NDJSON', files.ndjsonPath, 'application/x-ndjson']]) {
    await sql('TRUNCATE books')
    await settle()
    watcher = watch({ servicePid: pid, idleRss, database })
    const answer = await postFile(port, token, file, contentType)
    costs = watcher.stop()
    const stored = await countBooks()
    if (answer.status !== 201) {
      lines.push(`import ${label}: POST /books answered ${answer.status} after ${seconds(answer.seconds)} s: ${answer.text.slice(0, 200)}; not measured`)
      continue
    }
    if (answer.json?.data?.count !== BOOKS || stored !== BOOKS) throw new Error(`POST /books ${label}: answered count ${answer.json?.data?.count}, stored ${stored}, of ${BOOKS}`)
    imports[label] = { seconds: answer.seconds, costs }
    importRows.push(costRow(`POST /books, ${contentType}, return=minimal`, answer.seconds, costs, ratio(answer.seconds, copyIn.seconds)))
  }
  if (imports.CSV !== undefined) {
    const { seconds: csvSeconds, costs: csvCosts } = imports.CSV
    lines.push(`import CSV: ${ratio(csvSeconds, copyIn.seconds)}x the reference (target <= ${IMPORT_RATIO_TARGET}: ${verdict(csvSeconds / copyIn.seconds <= IMPORT_RATIO_TARGET)}), ` +
      `RSS +${megabytes(csvCosts.peakAboveIdle)} MB over idle (${megabytes(csvCosts.rssBefore)} MB just before) (target <= ${MEMORY_TARGET_MB}: ${verdict(csvCosts.peakAboveIdle / MB <= MEMORY_TARGET_MB)})`)
  }
  if (imports.NDJSON !== undefined && imports.CSV !== undefined) {
    const { seconds: ndjsonSeconds, costs: ndjsonCosts } = imports.NDJSON
    lines.push(`import NDJSON: ${ratio(ndjsonSeconds, imports.CSV.seconds)}x CSV (target <= ${NDJSON_RATIO_TARGET}: ${verdict(ndjsonSeconds / imports.CSV.seconds <= NDJSON_RATIO_TARGET)}), ` +
      `RSS +${megabytes(ndjsonCosts.peakAboveIdle)} MB over idle (${megabytes(ndjsonCosts.rssBefore)} MB just before)`)
  }

  // 3. Point reads while a CSV import runs, of the books the last import stored
  if (imports.CSV !== undefined) {
    const { first, last } = (await sql('SELECT min(id)::int8 AS first, max(id)::int8 AS last FROM books')).rows[0]
    const before = { done: false }
    const quiet = probe(port, token, Number(first), Number(last), before)
    await sleep(PROBE_SECONDS * 1000)
    before.done = true
    const idle = describeProbe(await quiet)
    await settle()
    const during = { done: false }
    const probing = probe(port, token, Number(first), Number(last), during)
    const started = performance.now()
    const answer = await postFile(port, token, files.csvPath, 'text/csv')
    const ended = performance.now()
    during.done = true
    const reads = describeProbe((await probing).filter((sample) => sample.at >= started && sample.at + sample.ms <= ended))
    const statuses = (figures) => Object.entries(figures.statuses).map(([status, n]) => `${n} x ${status}`).join(', ')
    lines.push(`GET /book/<id> alone: ${idle.count} reads, p50 ${idle.p50.toFixed(1)} ms, p99 ${idle.p99.toFixed(1)} ms (${statuses(idle)})`)
    lines.push(`GET /book/<id> during a CSV import of ${BOOKS.toLocaleString('en-US')} books into a table of as many (answered ${answer.status} in ${seconds(answer.seconds)} s): ` +
      `${reads.count} reads, p50 ${reads.p50.toFixed(1)} ms, p99 ${reads.p99.toFixed(1)} ms, max ${reads.max.toFixed(1)} ms (${statuses(reads)}); ` +
      `p99 target < ${PROBE_P99_TARGET_MS} ms: ${verdict(reads.p99 < PROBE_P99_TARGET_MS)}`)
  }

  const header = ['step', 'seconds', 'x reference', 'service CPU s', 'PG CPU s', 'client CPU s', 'RSS above idle MB']
  console.log(markdownTable(header, [...importRows, ...exportRows]))
  console.log()
  for (const line of lines) console.log(line)
  console.log(STORE === 'pglite'
    ? '\nPG CPU: the PGlite store (this process beyond its main thread); client CPU: this script\'s main thread, for the service'
    : '\nPG CPU: the PostgreSQL processes of this database; client CPU: psql, or this script for the service')
  finished = true
})

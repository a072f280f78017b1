'use strict'
/**
 * What the benchmarks share (tools/bench/run.cjs, topology.cjs, stream.cjs, load.cjs,
 * embedded-start.cjs, list.cjs, console.cjs, changes.cjs): the service, its database, its
 * clients, the kept databases of many books, reading a process's memory and CPU time, the median
 * of runs, and undoing what a run started.
 */
const { spawnSync } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const pg = require('pg')

const ROOT = path.resolve(__dirname, '..', '..')
const ADMIN_URL = process.env.TEST_DB_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const USERNAME = 'bench'
const PASSWORD = randomBytes(12).toString('base64url')

/** A connected client; its errors surface in the queries, not as an unhandled 'error'. */
async function connect (url = ADMIN_URL) {
  const client = new pg.Client({ connectionString: url, application_name: 'bookkeeping-bench' })
  client.on('error', () => {})
  await client.connect()
  return client
}

/** The workers of a Citus coordinator at `url` (tools/topology/citus.ts); none on PostgreSQL. */
function citusWorkers (url = ADMIN_URL) {
  return require('../dist/tools/topology/citus.js').citusWorkers(url)
}

/** `fn(client)` on a connection of its own, closed afterwards. */
async function admin (fn, url = ADMIN_URL) {
  const client = await connect(url)
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}

function databaseUrl (name) {
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  return url.toString()
}

/**
 * Books of `npm run bench:list` and `npm run bench:console`, in one statement: titles of three
 * to five words drawn from 1,000 (`night` is 10 of them, so it is in about one title of 25;
 * `Quixotic` is added to 20 titles), authors from 200 first and 500 last names (`Tolkien` about
 * one in 500), years 1450 to 2024.
 */
const LIST_SEED = `INSERT INTO books (title, author, year)
  SELECT initcap(array_to_string(ARRAY(
           SELECT words[1 + ((g::int8 * (7919 + w * 104729) + w * 15485863) % 1000)::int]
           FROM generate_series(1, 3 + g % 3) AS w), ' ')) ||
           CASE WHEN g % ($1::int / 20) = 7 THEN ' Quixotic' ELSE '' END,
         firsts[1 + (g * 31 % 200)::int] || ' ' || lasts[1 + (g * 17 % 500)::int],
         1450 + (g * 7 % 575)::int
  FROM generate_series(1, $1::int) AS g,
       (SELECT array_fill('night'::text, ARRAY[10]) || array_agg(word) AS words FROM (
          SELECT 'w' || to_hex(n * 2654435761 % 4294967296) AS word FROM generate_series(1, 990) AS n) AS v) AS t,
       (SELECT array_agg('First' || n) AS firsts FROM generate_series(1, 200) AS n) AS f,
       (SELECT array_agg(CASE WHEN n = 1 THEN 'Tolkien' ELSE 'Last' || n END) AS lasts FROM generate_series(1, 500) AS n) AS l`

/** The migration steps (src/db/migrations.ts, as built in dist/) and the statements of each. */
async function migrations () {
  return await import(path.join(ROOT, 'dist', 'src', 'db', 'migrations.js'))
}

/**
 * The kept database of `books` books (`bookkeeping_bench_list_<books>`), seeded with LIST_SEED
 * (`keptDatabase`). One that does not hold them is made anew, unless `create` is false: then
 * this fails, and says how to make it.
 */
function listDatabase (books, { reseed = false, create = true } = {}) {
  return keptDatabase(`bookkeeping_bench_list_${books}`, books, {
    seed: LIST_SEED, values: [books], reseed, create, how: `BENCH_LIST_BOOKS=${books} npm run bench:list`
  })
}

/**
 * The kept database `name` of `books` books, seeded with one statement (`seed`, with `values`)
 * into the tables of the migration steps before the first that runs alone: a database written
 * before the indexes, whose other steps (the indexes, the search's words) the service makes when
 * it starts on it, as it would on a database written by an older version. A database that
 * holds `books` books already is used as it is (`seeded` null), unless `reseed`; one that does
 * not is made anew, unless `create` is false: then this fails, and says `how` to make it.
 */
async function keptDatabase (name, books, { seed, values, reseed = false, create = true, how }) {
  const url = databaseUrl(name)
  const exists = await admin(async (client) => (await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1)
  if (exists && !reseed) {
    const count = await admin(async (client) => Number((await client.query('SELECT count(*) FROM books')).rows[0].count), url)
    if (count >= books) return { name, url, seeded: null }
  }
  if (!create) throw new Error(`database ${name} is missing or holds fewer than ${books} books: make it with ${how}`)
  // At a Citus coordinator (docs/development.md, Citus) the database is spread over its workers
  // (tools/topology/citus.ts, as built by npm run build:tools), on the workers made anew too
  const workers = await citusWorkers(ADMIN_URL)
  await admin(async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await client.query(`CREATE DATABASE ${name}`)
  })
  if (workers.length > 0) {
    const { onNode, spreadOverCitus } = require('../dist/tools/topology/citus.js')
    for (const { host, port } of workers) await admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`), onNode(ADMIN_URL, host, port, 'postgres'))
    await spreadOverCitus(ADMIN_URL, name, workers)
  }
  const started = performance.now()
  await admin(async (client) => {
    await client.query(`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`)
    const { migrations: steps, statementsOf, distribution } = await migrations()
    const firstAlone = steps.find(({ alone }) => alone).version
    for (const step of steps.filter(({ version }) => version < firstAlone)) {
      for (const statement of statementsOf(step)) await client.query(statement)
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [step.version, step.name])
    }
    // On Citus the tables are distributed before the books go in, as the service's migration
    // distributes them in the transaction of each of those steps (src/db/migrate.ts)
    if (workers.length > 0) {
      await client.query(`SELECT create_distributed_table(t.name, t.column_name)
        FROM unnest($1::text[], $2::text[]) AS t(name, column_name) WHERE to_regclass(t.name) IS NOT NULL`,
      [distribution.map((d) => d.table), distribution.map((d) => d.column)])
    }
    await client.query(seed, values)
    await client.query('VACUUM ANALYZE books')
  }, url)
  return { name, url, seeded: (performance.now() - started) / 1000 }
}

/**
 * Writes while the service migrates, until `stop`: how many, and each insert, update and delete
 * of a book that together took over SLOW_WRITE_MS (`slow`: when it started, ms epoch; how long it
 * took, ms; what its backend waited on meanwhile, pg_stat_activity's wait events sampled every
 * 50 ms from another connection: `Lock` is a lock the migration holds, `IO` the disk, the WAL's
 * flush among them), and the slowest of all.
 */
const SLOW_WRITE_MS = 250
async function writeDuring (url, stop) {
  const client = await connect(url)
  const monitor = await connect(url)
  const { rows: [{ pid }] } = await client.query('SELECT pg_backend_pid() AS pid')
  let slowest = 0
  const slow = []
  let waits = new Set()
  let writes = 0
  const sampled = { on: true }
  const sampling = (async () => {
    while (sampled.on) {
      const { rows } = await monitor.query("SELECT wait_event_type || ':' || wait_event AS wait FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND wait_event IS NOT NULL", [pid])
      for (const { wait } of rows) waits.add(wait)
      await sleep(50)
    }
  })()
  try {
    while (!stop.done) {
      const started = Date.now()
      const timer = performance.now()
      waits = new Set()
      const { rows: [{ id }] } = await client.query("INSERT INTO books (title, author, year) VALUES ('written during the migration', 'bench', 2000) RETURNING id")
      await client.query('UPDATE books SET year = 2001 WHERE id = $1', [id])
      await client.query('DELETE FROM books WHERE id = $1', [id])
      const took = performance.now() - timer
      slowest = Math.max(slowest, took)
      if (took > SLOW_WRITE_MS) slow.push({ started, took, waits: [...waits] })
      writes++
      await sleep(20)
    }
  } finally {
    sampled.on = false
    await sampling.catch(() => {})
    await client.end()
    await monitor.end()
  }
  return { slowest, slow, writes }
}

function freePort () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

/**
 * The service as `npm start` starts it: package.json's start command through `/bin/sh -c`, as
 * npm runs it (its `exec` makes the spawned pid the service itself), with node_modules/.bin on
 * PATH; `env` is added to the environment. `root`: another checkout's (BENCH_BASELINE, run.cjs);
 * `nodeFlags`: its `fastify` run by `node` with these flags, a profiler's (`npm run profile`).
 */
function serviceCommand (env, { root = ROOT, nodeFlags = [] } = {}) {
  const { start } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).scripts
  // BENCH_WORKERS > 1: the same command line, run by that many node:cluster workers
  const workers = Number(process.env.BENCH_WORKERS || 1)
  const profiled = nodeFlags.length > 0
  if (workers > 1 && profiled) throw new Error('BENCH_WORKERS and a CPU profile do not go together')
  const command = workers > 1
    ? start.replace(/^exec fastify start /, `exec node ${path.join(__dirname, 'cluster.cjs')} `)
    : profiled
      ? start.replace(/^exec fastify start /, `exec node ${nodeFlags.join(' ')} ${path.join(root, 'node_modules', 'fastify-cli', 'cli.js')} start `)
      : start
  if ((workers > 1 || profiled) && command === start) throw new Error(`npm start is not \`exec fastify start ...\`: ${start}`)
  return {
    start: command,
    command: '/bin/sh',
    args: ['-c', command],
    env: {
      PATH: `${path.join(root, 'node_modules', '.bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: process.env.HOME ?? os.tmpdir(),
      AUTH_USERNAME: USERNAME,
      AUTH_PASSWORD: PASSWORD,
      HOST: '127.0.0.1',
      BENCH_WORKERS: String(workers),
      ...env
    }
  }
}

/** SIGTERM, then SIGKILL when the process is still there after `killAfterMs`. */
async function stopChild (child, killAfterMs) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs)
  await exited
  clearTimeout(timer)
}

/**
 * Runs `main(bench)` and undoes what it started, once, when it ends, fails or is interrupted
 * (SIGINT, SIGTERM, SIGHUP): the child processes given to `bench.track` (SIGTERM, SIGKILL after
 * 10 s), then what was given to `bench.onCleanup`, last first, then the database of
 * `bench.createDatabase`. `bench.tmpDir` is a new directory named after `label`, kept: the raw
 * results are written there. A failure prints its stack and sets exit code 1; after a signal,
 * the failures of the run being torn down are expected and not printed.
 */
function runBenchmark (label, main) {
  const children = new Set()
  const stoppers = []
  let dbName = null
  let cleaning = null
  const cleanup = () => {
    cleaning ??= (async () => {
      await Promise.all([...children].map((child) => stopChild(child, 10_000)))
      for (const stop of stoppers.reverse()) await stop().catch((err) => console.error(`bench: ${err.message}`))
      if (dbName !== null) {
        await admin((client) => client.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`))
          .catch((err) => console.error(`bench: could not drop database ${dbName}: ${err.message}`))
      }
    })()
    return cleaning
  }
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(signal, () => {
      console.error(`\nbench: ${signal}, stopping what the run started and dropping its database`)
      cleanup().finally(() => process.exit(128 + os.constants.signals[signal]))
    })
  }
  const bench = {
    tmpDir: fs.mkdtempSync(path.join(os.tmpdir(), `bookkeeping-${label}-`)),
    track (child) {
      children.add(child)
      child.once('exit', () => children.delete(child))
      return child
    },
    onCleanup (stop) {
      stoppers.push(stop)
    },
    /** A new database, dropped at the end: its URL, and the server's version for the header. */
    async createDatabase () {
      const name = `bookkeeping_bench_${randomBytes(6).toString('hex')}`
      await admin((client) => client.query(`CREATE DATABASE ${name}`))
      dbName = name
      const pgVersion = await admin(async (client) => (await client.query('SHOW server_version')).rows[0].server_version)
      return { dbUrl: databaseUrl(name), pgVersion }
    }
  }
  main(bench).then(
    () => cleanup(),
    async (err) => {
      if (cleaning !== null) return
      console.error(`bench: ${err.stack ?? err}`)
      await cleanup()
      process.exitCode = 1
    }
  )
}

/** An answer read whole: its status, headers and text, and the text parsed when it is JSON (else null). */
function readAnswer (res) {
  return new Promise((resolve, reject) => {
    const chunks = []
    res.on('data', (chunk) => chunks.push(chunk))
    res.on('error', reject)
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      let json = null
      try {
        json = JSON.parse(text)
      } catch {}
      resolve({ status: res.statusCode, headers: res.headers, text, json })
    })
  })
}

/** A small request on a fresh connection; the body is read whole and parsed as JSON when it is JSON. */
function request (port, method, path, { token, body, timeoutMs = 10_000 } = {}) {
  return new Promise((resolve, reject) => {
    const headers = {}
    if (token !== undefined) headers.authorization = token
    let payload
    if (body !== undefined) {
      payload = JSON.stringify(body)
      headers['content-type'] = 'application/json'
      headers['content-length'] = Buffer.byteLength(payload)
    }
    const started = performance.now()
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, agent: false, timeout: timeoutMs }, (res) => {
      readAnswer(res).then((answer) => resolve({ ...answer, ms: performance.now() - started }), reject)
    })
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)))
    req.on('error', reject)
    req.end(payload)
  })
}

async function issueToken (port) {
  const response = await request(port, 'POST', '/token', { body: { username: USERNAME, password: PASSWORD } })
  if (response.status !== 200) throw new Error(`POST /token answered ${response.status}: ${response.text.slice(0, 200)}`)
  return response.json.data.token
}

/** VmRSS and VmHWM (the kernel's own peak) of `pid` in bytes, or null when the process is gone. */
function readMemory (pid) {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
    const bytes = (name) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)[1]) * 1024
    return { rss: bytes('VmRSS'), hwm: bytes('VmHWM') }
  } catch {
    return null
  }
}

const clockTicks = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100

/** User plus system CPU time of `pid` in seconds, or null when the process is gone. */
function cpuSeconds (pid) {
  const fields = statFields(pid)
  return fields === null ? null : (Number(fields[11]) + Number(fields[12])) / clockTicks
}

/** The fields of `/proc/<pid>/stat` after the command's name (the 3rd onwards), or null when the process is gone. */
function statFields (pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  } catch {
    return null
  }
}

/**
 * The process id of the PostgreSQL server behind `url` (the parent of a backend), or null when
 * that server is not on this machine, where its processes can be read.
 */
async function postmasterPid (url = ADMIN_URL) {
  // Read while the backend lives: it exits with the connection
  const fields = await admin(async (client) => {
    const backend = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid
    // A server elsewhere: the same pid here may be any other process
    let command = ''
    try {
      command = fs.readFileSync(`/proc/${backend}/comm`, 'utf8').trim()
    } catch {}
    return command === 'postgres' ? statFields(backend) : null
  }, url)
  return fields === null ? null : Number(fields[1])
}

/**
 * User plus system CPU seconds of a whole PostgreSQL server: the postmaster, its live processes
 * (backends, writers, autovacuum), and through the postmaster's children's times those that have
 * exited, so a connection that comes and goes during a run is counted too.
 */
function postgresCpuSeconds (postmaster) {
  const own = statFields(postmaster)
  if (own === null) return null
  let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14])
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const fields = statFields(entry)
    if (fields !== null && Number(fields[1]) === postmaster) ticks += Number(fields[11]) + Number(fields[12])
  }
  return ticks / clockTicks
}

/** A positive integer from the environment variable `name`, or `fallback` when it is not set. */
function positive (name, fallback) {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${raw}`)
  return value
}

function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/** A Markdown table of text cells: the first `textColumns` left-aligned, the figures after them right-aligned. */
function markdownTable (header, body, textColumns = 1) {
  const widths = header.map((title, i) => Math.max(title.length, ...body.map((row) => row[i].length)))
  const line = (cells) => `| ${cells.map((cell, i) => i < textColumns ? cell.padEnd(widths[i]) : cell.padStart(widths[i])).join(' | ')} |`
  return [line(header), `|${widths.map((width, i) => i < textColumns ? `-${'-'.repeat(width)}-` : `${'-'.repeat(width + 1)}:`).join('|')}|`, ...body.map(line)].join('\n')
}

module.exports = {
  positive,
  markdownTable,
  readMemory,
  cpuSeconds,
  postmasterPid,
  postgresCpuSeconds,
  median,
  ROOT,
  ADMIN_URL,
  USERNAME,
  PASSWORD,
  connect,
  admin,
  citusWorkers,
  databaseUrl,
  keptDatabase,
  SLOW_WRITE_MS,
  writeDuring,
  listDatabase,
  migrations,
  freePort,
  serviceCommand,
  stopChild,
  runBenchmark,
  request,
  readAnswer,
  issueToken
}

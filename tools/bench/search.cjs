'use strict'
/**
 * The search of `GET /books?q=` on a large table (docs/api.md, Search): `npm run build && node
 * tools/bench/search.cjs`. A script, not a test: it prints figures and exits 0 when it ran.
 *
 * 1. A database of BENCH_SEARCH_BOOKS books (default 10,000,000), seeded with one SQL statement
 *    (SEARCH_SEED): titles of 2 to 6 words, about 30% of them English stopwords (`the` in about a
 *    quarter of the titles, `of` in one of eight), the rest drawn Zipf-like (Zipf-Mandelbrot,
 *    q = 49) from 60,000 pronounceable synthetic words and a few hundred real ones (`night`,
 *    `war`, `peace`, ... `dune`, `foundation`); authors from first and last names, some
 *    accented (Brontë, Márquez, Dvořák); years 1450 to 2024; a few known books planted across the
 *    id range (Dune, The Hobbit, Foundation, Wuthering Heights, ...) and `Quixotic` in 20
 *    titles. The tables are made by the migration steps before the first that runs alone, as
 *    bench:list makes its own: a database written before the indexes and the search, whose
 *    steps (functions, triggers, indexes, the list of known words) the service's migration
 *    makes. The database is kept (`bookkeeping_bench_search_<books>`) and
 *    used again by the next run; BENCH_SEARCH_RESEED=1 makes it anew.
 * 2. The service is started on it: its migration builds the indexes (those of the listing and
 *    the search's) and the list of known words on the full table while a writer inserts, updates
 *    and deletes books; the time of each step and the slowest write are printed (a step must not
 *    block reads or writes for more than a second), and the slowest during each step of those
 *    over SLOW_WRITE_MS (common.cjs), with what it waited on (a lock of the migration's, or the disk).
 * 3. Each search's first page (`limit=20`) with one client, keep-alive: BENCH_SEARCH_REQUESTS
 *    requests one after another (default 100; a scenario stops after BENCH_SEARCH_CAP_SECONDS,
 *    default 60), p50 and p99 in ms and the statuses answered (a 422 or 503 is a figure, not a
 *    failure); the page 50 pages deep of a ranked walk; and the CPU each page cost the service's
 *    process and PostgreSQL (the backends of this database, and the whole server), next to the
 *    same figures for GET /book/<id> of the service and of the reference server
 *    (tools/bench/reference.cjs, started on the same database), measured in the same run.
 * 4. The searches mixed from 32 connections (autocannon, BENCH_SEARCH_SECONDS, default 5) while
 *    another client reads GET /book/<id> on a keep-alive connection of its own, 20 ms apart: its
 *    p50 and p99, and the same reader on an idle service; and the CPU per search under that load
 *    (the service's and PostgreSQL's, the reader's requests counted in), next to the mean of the
 *    same searches' CPU one at a time (step 3).
 * 5. The CPU of a create (POST /book, BENCH_SEARCH_CREATES, default 3,000, from 4 clients) on a
 *    scratch database of BENCH_SEARCH_CREATE_BOOKS books (default 100,000; dropped at the end),
 *    after a run that is not measured, with the search's indexes and triggers, without them
 *    (dropped), and with them again (made again), all in the same run: the two runs with them
 *    show how far a figure varies.
 *
 * Environment: TEST_DB_URL (the server, default postgres://postgres@127.0.0.1:5432/postgres; a Citus
 * coordinator, docs/development.md, Citus: the databases are spread over its workers, and the CPU
 * of PostgreSQL is that of the coordinator and the workers together),
 * BENCH_SEARCH_BOOKS, BENCH_SEARCH_RESEED, BENCH_SEARCH_REQUESTS, BENCH_SEARCH_CAP_SECONDS,
 * BENCH_SEARCH_SECONDS, BENCH_SEARCH_CREATES, BENCH_SEARCH_CREATE_BOOKS.
 */
const { execFileSync, spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const fs = require('node:fs')
const http = require('node:http')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const autocannon = require('autocannon')
const {
  ADMIN_URL, ROOT, admin, citusWorkers, connect, cpuSeconds, freePort, issueToken, keptDatabase, markdownTable,
  migrations, positive, postgresCpuSeconds, postmasterPid, runBenchmark, serviceCommand, SLOW_WRITE_MS, stopChild, writeDuring
} = require('./common.cjs')
const { startReference } = require('./load.cjs')

const BOOKS = positive('BENCH_SEARCH_BOOKS', 10_000_000)
const REQUESTS = positive('BENCH_SEARCH_REQUESTS', 100)
const CAP_SECONDS = positive('BENCH_SEARCH_CAP_SECONDS', 60)
const SECONDS = positive('BENCH_SEARCH_SECONDS', 5)
const CREATES = positive('BENCH_SEARCH_CREATES', 3000)
const CREATE_BOOKS = positive('BENCH_SEARCH_CREATE_BOOKS', 100_000)
const CREATE_CLIENTS = 4
const LIMIT = 20
const DEPTH = 50
/** GET /book/<id> is short: its CPU per request needs more requests than the 10 ms clock tick resolves in 100. */
const BOOK_READS = Math.max(REQUESTS, 3000)
const SECRET = randomBytes(36).toString('base64url')

/** Stopwords, each as many times in 100 slots as its share of the stopwords drawn. */
const STOPWORDS = `the:23 of:12 and:8 a:7 in:7 to:5 on:4 for:4 with:4 at:3 by:3 from:3 an:2 my:3 his:3 her:3
  into:2 over:1 under:1 your:1 our:1`.split(/\s+/).flatMap((entry) => {
    const [word, slots] = entry.split(':')
    return Array(Number(slots)).fill(word)
  })

/**
 * Real words, the most frequent first: the j-th is the content word of rank 3j (of 60,000), so
 * `night` is in about one title of 130 and `dune` in about one of 1,300.
 */
const REAL_WORDS = `night war house love man time world death life river king city heart shadow stone fire
  winter summer peace light dark sea star moon sun garden road forest mountain queen blood dream ghost
  secret island storm journey child wind rain gold silver iron glass book letter song mirror bridge tower
  castle village empire kingdom girl boy woman mother father daughter son brother sister friend stranger
  hunter thief soldier doctor captain prince princess lady lord knight dragon wolf bird horse lion tiger
  bear snow ice ocean desert valley field flower rose tree leaf spring autumn morning evening day year
  century history memory silence truth lie hope fear joy sorrow glory honor courage faith promise return
  escape voyage quest battle siege victory defeat revolution republic nation country land earth sky
  heaven hell angel devil saint sinner witch wizard magic spell curse crown throne sword shield arrow
  ship harbor coast shore wave tide lake pond stream well door window wall room hall kitchen table chair
  bed clock key lock chain ring circle line edge corner street market station train engine machine
  garden cathedral church temple palace prison school library museum theater circus orchard vineyard
  farm barn mill meadow hill cliff cave tunnel path trail camp fort harbor lighthouse dune foundation
  horizon frontier border north south east west winterfell summerland twilight dawn dusk midnight noon
  hour minute season weather thunder lightning cloud mist fog smoke ash dust sand salt pepper honey
  bread wine milk water coffee tea sugar apple orange lemon cherry plum olive cedar oak pine willow
  maple birch ivy moss fern lily violet daisy tulip orchid jasmine amber ivory pearl ruby emerald
  sapphire diamond crystal marble granite copper bronze steel velvet silk linen cotton wool leather
  paper ink pen brush canvas portrait painting sculpture music dance opera symphony ballad poem story
  tale legend myth chronicle diary journal archive map compass anchor lantern candle torch mask veil
  cloak glove boot hat feather wing claw tooth bone skull spirit soul mind body hand eye face voice`
  .split(/\s+/).filter((word, i, all) => word !== '' && all.indexOf(word) === i)

const FIRST_NAMES = `James Mary John Patricia Robert Jennifer Michael Linda William Elizabeth David Barbara Richard
  Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty Mark Margaret
  Donald Sandra Steven Ashley Paul Kimberly Andrew Emily Joshua Donna Kenneth Michelle Kevin Dorothy Brian
  Carol George Amanda Edward Melissa Ronald Deborah Timothy Stephanie Jason Rebecca Jeffrey Sharon Ryan
  Laura Jacob Cynthia Gary Kathleen Nicholas Amy Eric Shirley Jonathan Angela Stephen Helen Larry Anna
  Justin Brenda Scott Pamela Brandon Nicole José María François Zoë Renée Søren Jürgen Björn Ångel Chloé
  Inés Raphaël Noémie Łukasz Dvořka Antonín Gabriel Isabel Lucía Matías Sebastián Hélène Joël Anaïs`
  .split(/\s+/).filter(Boolean)

const LAST_NAMES = `Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez
  Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark
  Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green Adams Nelson
  Baker Hall Rivera Campbell Mitchell Carter Roberts Gomez Phillips Evans Turner Diaz Parker Cruz Edwards
  Collins Reyes Stewart Morris Morales Murphy Cook Rogers Gutierrez Ortiz Morgan Cooper Peterson Bailey
  Reed Kelly Howard Ramos Kim Cox Ward Richardson Watson Brooks Chavez Wood James Bennett Gray Mendoza
  Ruiz Hughes Price Alvarez Castillo Sanders Patel Myers Long Ross Foster Jimenez Márquez Dvořák Müller
  Schröder Böhm Núñez Peña Muñoz Ibáñez Gómez Sørensen Ångström Åberg Lindqvist Čapek Novák Kovač Wałęsa
  Dąbrowski Łopez Öztürk Çelik Yılmaz Gauß Straße Brontë Chloé Noël Lefèvre Bézier Déjà Façade Françoise
  Hoffmann Fischer Weber Wagner Becker Schulz Koch Richter Klein Wolf Neumann Schwarz Zimmermann Braun
  Hartmann Krüger Lange Werner Lehmann Köhler Maier Rossi Russo Ferrari Esposito Bianchi Romano Colombo
  Ricci Marino Greco Bruno Gallo Conti Costa Giordano Mancini Rizzo Lombardi Moretti Dubois Durand Leroy
  Moreau Simon Laurent Michel Garnier Faure Rousseau Blanc Guerin Muller Henry Roussel Nicolas Perrin`
  .split(/\s+/).filter(Boolean).filter((name) => name !== 'Brontë')

/** Known books, each at a fraction of the id range (`Brontë` and `Tolkien` are in no other author). */
const PLANTED = [
  [0.11, 'Dune', 'Frank Herbert', 1965],
  [0.23, 'The Hobbit', 'J. R. R. Tolkien', 1937],
  [0.31, 'Foundation', 'Isaac Asimov', 1951],
  [0.37, 'Dune Messiah', 'Frank Herbert', 1969],
  [0.47, 'Wuthering Heights', 'Emily Brontë', 1847],
  [0.52, 'War and Peace', 'Leo Tolstoy', 1869],
  [0.58, 'The Lord of the Rings', 'J. R. R. Tolkien', 1954],
  [0.66, 'Foundation and Empire', 'Isaac Asimov', 1952],
  [0.71, 'Children of Dune', 'Frank Herbert', 1976],
  [0.83, 'One Hundred Years of Solitude', 'Gabriel García Márquez', 1967],
  [0.91, 'The Night Circus', 'Erin Morgenstern', 2011]
]

/** How many distinct synthetic words the vocabulary holds besides the real ones. */
const SYNTHETIC_WORDS = 60_000

/** A float in [0, 1) from a bigint key and a seed: PostgreSQL's hash, deterministic for a server version. */
const unit = (key, seed) => `((hashint8extended(${key}, ${seed}) & 4503599627370495)::float8 / 4503599627370496)`

/** Bytes of each word's slot in the vocabulary: a word is read at its offset, whatever its rank (an array of texts is walked). */
const SLOT = 20

/** The w-th word of book g's title (SEARCH_SEED): a stopword, or the content word of its rank. */
const titleWord = (w) => `CASE WHEN ${unit(`g * 8 + ${w}`, 1)} < 0.3 THEN s.stops[1 + floor(${unit(`g * 8 + ${w}`, 1)} / 0.3 * 100)::int]
             ELSE rtrim(convert_from(substring(v.vocabulary FROM
               (floor(50 * exp(${unit(`g * 8 + ${w}`, 2)} * v.span))::int - 50) * ${SLOT} + 1 FOR ${SLOT}), 'UTF8')) END`

/**
 * The books, in one statement: $1 how many, $2 the 100 stopword slots, $3 the real words, $4
 * first names, $5 last names, $6 to $9 the planted books (ids, titles, authors, years). A word is a stopword with
 * probability 0.3, else the content word of rank floor(50 exp(r ln((N + 50) / 50))) - 49 of the
 * N words: real word j at rank 3j, synthetic words (two or three syllables drawn by hash,
 * distinct, none a real word or a stopword) at the others. The vocabulary is one bytea of
 * SLOT-byte slots in rank order, so that reading a word costs the same at any rank.
 */
const SEARCH_SEED = `INSERT INTO books (title, author, year)
  SELECT coalesce(($7::text[])[planted.at], initcap(concat_ws(' ', ${[1, 2, 3, 4, 5, 6].map((w) => w <= 2 ? titleWord(w) : `CASE WHEN l.words >= ${w} THEN ${titleWord(w)} END`).join(',\n           ')})) ||
           CASE WHEN g % greatest(1, $1::int / 20) = 7 THEN ' Quixotic' ELSE '' END),
         coalesce(($8::text[])[planted.at], ($4::text[])[1 + (hashint8extended(g, 4) & 1048575)::int % cardinality($4::text[])] || ' ' ||
           ($5::text[])[1 + (hashint8extended(g, 5) & 1048575)::int % cardinality($5::text[])]),
         coalesce(($9::int[])[planted.at], 1450 + (hashint8extended(g, 6) & 1048575)::int % 575)
  FROM generate_series(1, $1::int) AS g
  CROSS JOIN LATERAL (SELECT array_position($6::int[], g) AS at) AS planted
  CROSS JOIN LATERAL (SELECT 2 + (hashint8extended(g, 3) & 1023)::int % 5 AS words) AS l
  CROSS JOIN (SELECT $2::text[] AS stops) AS s
  CROSS JOIN (
    SELECT ln((count(*) + 50) / 50.0)::float8 AS span,
           string_agg(convert_to(rpad(CASE WHEN ranked.rank % 3 = 0 AND ranked.rank / 3 <= cardinality($3::text[])
                                           THEN ($3::text[])[ranked.rank / 3] ELSE ranked.word END, ${SLOT}), 'UTF8'), ''::bytea ORDER BY ranked.rank) AS vocabulary
    FROM (
      SELECT row_number() OVER (ORDER BY hashint8extended(candidates.n, 7)) AS rank, candidates.word
      FROM (
        SELECT DISTINCT ON (word) n, word FROM (
          SELECT n, syllables[1 + (hashint8extended(n, 11) & 65535)::int % cardinality(syllables)] ||
                    syllables[1 + (hashint8extended(n, 12) & 65535)::int % cardinality(syllables)] ||
                    CASE WHEN hashint8extended(n, 13) & 7 = 0
                         THEN syllables[1 + (hashint8extended(n, 14) & 65535)::int % cardinality(syllables)] ELSE '' END AS word
          FROM generate_series(1, ${SYNTHETIC_WORDS * 2}) AS n,
               (SELECT array_agg(onset || vowel || coda) AS syllables
                FROM unnest('{b,c,d,f,g,h,j,k,l,m,n,p,r,s,t,v,w,z,b,c,d,f,g,h,k,l,m,n,p,r,s,t,br,cr,dr,fr,gr,pr,tr,bl,cl,fl,pl,sl,st,sh,ch,th}'::text[]) AS onset,
                     unnest('{a,e,i,o,u,a,e,i,o,u,y,ai,ea,ou}'::text[]) AS vowel,
                     unnest('{"","","","","",n,r,l,s,m,t,nd,st}'::text[]) AS coda) AS parts
        ) AS made
        WHERE word <> ALL ($3::text[] || $2::text[])
        ORDER BY word, n
      ) AS candidates
      ORDER BY rank LIMIT ${SYNTHETIC_WORDS}
    ) AS ranked
  ) AS v`

const seedValues = (books) => [books, STOPWORDS, REAL_WORDS, FIRST_NAMES, LAST_NAMES,
  ...[0, 1, 2, 3].map((i) => PLANTED.map((book) => i === 0 ? Math.max(1, Math.floor(books * book[0])) : book[i]))]

const SEARCH_TRIGGERS = ['books_search_words_created', 'books_search_words_updated']

/**
 * The kept database of `books` books, seeded with SEARCH_SEED (common.cjs, keptDatabase): written
 * before the indexes and the search, whose steps, its triggers and its list of known words
 * included, the service's migration makes. `seeded` null when an earlier run made it.
 */
function searchDatabase (books, reseed) {
  return keptDatabase(`bookkeeping_bench_search_${books}`, books, { seed: SEARCH_SEED, values: seedValues(books), reseed })
}

/**
 * The service's output: written to `logPath`, its JSON lines read for the migration steps
 * applied (with their time) and the warnings and errors it logged (counted by message).
 */
function watchLog (child, logPath) {
  const log = fs.createWriteStream(logPath)
  const state = { steps: [], problems: new Map() }
  let rest = ''
  const read = (chunk) => {
    log.write(chunk)
    const lines = (rest + chunk.toString()).split('\n')
    rest = lines.pop()
    for (const line of lines) {
      let entry
      try {
        entry = JSON.parse(line)
      } catch {
        continue
      }
      if (entry.msg === 'applied migration') state.steps.push({ version: entry.version, name: entry.name, time: entry.time })
      if (entry.level >= 40) {
        const key = `${entry.level >= 50 ? 'error' : 'warn'}: ${entry.msg}${entry.err?.message ? ` (${entry.err.message.slice(0, 160)})` : ''}`
        state.problems.set(key, (state.problems.get(key) ?? 0) + 1)
      }
    }
  }
  child.stdout.on('data', read)
  child.stderr.on('data', read)
  child.once('exit', () => log.end())
  return state
}

async function startService (bench, url, logPath, variables = {}) {
  const port = await freePort()
  const { command, args, env } = serviceCommand({
    DB_URL: url,
    SECRET_TOKEN: SECRET,
    PORT: String(port),
    LOG_LEVEL: 'info',
    TOKEN_RATE_LIMIT: '1000000000',
    TOKEN_USERNAME_RATE_LIMIT: '1000000000',
    ...variables
  })
  const started = Date.now()
  const child = bench.track(spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] }))
  const log = watchLog(child, logPath)
  return { port, child, log, started, ready: () => until(child, port, 'the service') }
}

/** Resolves once `/health/live` answers (or anything, for the reference server). */
async function until (child, port, name, probe = '/health/live') {
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${name} exited (${child.exitCode ?? child.signalCode})`)
    const answered = await new Promise((resolve) => http.get({ host: '127.0.0.1', port, path: probe }, (res) => { res.resume(); resolve(true) })
      .on('error', () => resolve(false)))
    if (answered) return
    await sleep(200)
  }
}

/** A token, issued again when it is older than 10 minutes (tokens last 15). */
function tokens (port) {
  let token = null
  let issued = 0
  return async () => {
    if (token === null || Date.now() - issued > 600_000) {
      token = await issueToken(port)
      issued = Date.now()
    }
    return token
  }
}

/** One request on `agent`: its status (or the error's text), time and `Link`; never throws. */
function timedGet (agent, port, urlPath, token, body = false) {
  return new Promise((resolve) => {
    const started = performance.now()
    const req = http.get({ host: '127.0.0.1', port, path: urlPath, agent, headers: { authorization: token } }, (res) => {
      const chunks = []
      res.on('data', (chunk) => { if (body) chunks.push(chunk) })
      res.on('end', () => resolve({
        status: String(res.statusCode), ms: performance.now() - started, link: res.headers.link, body: body ? Buffer.concat(chunks).toString() : ''
      }))
      res.on('error', (err) => resolve({ status: `error: ${err.message}`, ms: performance.now() - started }))
    })
    req.setTimeout(30_000, () => req.destroy(new Error('no answer in 30 s')))
    req.on('error', (err) => resolve({ status: `error: ${err.message}`, ms: performance.now() - started }))
  })
}

const nextOf = (link) => link === undefined ? null : /^<([^>]+)>;\s*rel="next"/.exec(link)?.[1] ?? null

function percentile (values, p) {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1)]
}

const countsOf = (statuses) => statuses.reduce((counts, status) => ({ ...counts, [status]: (counts[status] ?? 0) + 1 }), {})
const statusText = (counts) => Object.entries(counts).map(([status, count]) => `${status}×${count}`).join(' ')

/**
 * CPU seconds so far: of each process in `pids`, of the backends of the database `dbName` (read
 * by pid from pg_stat_activity: one that exits meanwhile is missed, which a pool's do not), and
 * of the whole PostgreSQL server (every backend and helper, of every database: other work on
 * the same server counts too). On Citus, of the coordinator and each worker (`servers`, one
 * each), summed.
 */
function cpuMeter (servers, dbName) {
  const read = async (pids) => {
    const backends = new Map()
    for (const { monitor } of servers) {
      const { rows } = await monitor.query('SELECT pid FROM pg_stat_activity WHERE datname = $1', [dbName])
      for (const { pid } of rows) backends.set(pid, cpuSeconds(pid) ?? 0)
    }
    const server = servers.reduce((sum, { postmaster }) => sum + (postmaster === null ? NaN : postgresCpuSeconds(postmaster)), 0)
    return { pids: pids.map((pid) => cpuSeconds(pid) ?? 0), backends, server }
  }
  return async (pids, work) => {
    const before = await read(pids)
    const result = await work()
    const after = await read(pids)
    let database = 0
    for (const [pid, seconds] of after.backends) database += seconds - (before.backends.get(pid) ?? 0)
    return { result, own: after.pids.map((seconds, i) => seconds - before.pids[i]), database, server: after.server - before.server }
  }
}

/** `count` requests of `urlPath` one after another on one keep-alive connection, after one not counted; stops after CAP_SECONDS. */
async function sequential (port, urlPath, token, count = REQUESTS) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  await timedGet(agent, port, urlPath, token)
  const times = []
  const statuses = []
  const until = Date.now() + CAP_SECONDS * 1000
  while (times.length < count && Date.now() < until) {
    const { status, ms } = await timedGet(agent, port, urlPath, token)
    times.push(ms)
    statuses.push(status)
  }
  agent.destroy()
  return { times, statuses: countsOf(statuses), requests: times.length, capped: times.length < count }
}

const SEARCHES = [
  ['one rare word', 'quixotic'],
  ['one common word', 'the'],
  ['one common word, sort=id', 'the', '&sort=id'],
  ['two words', 'war peace'],
  ['a phrase', '"the night"'],
  ['a word excluded', 'war -peace'],
  ['a 3-letter prefix', 'dun'],
  ['a typo', 'tolkein'],
  ['a typo', 'fondation']
]
/** Words whose books are counted after the migration (through the search's indexes), as tsquery texts. */
const COUNTED = ['the', 'of', 'night', 'war', 'peace', 'war & peace', 'garden', 'dune', 'dun:*', 'foundation', 'quixotic', 'tolkien']

const searchPath = (q, extra = '', limit = LIMIT) => `/books?q=${encodeURIComponent(q)}&limit=${limit}${extra}`

/** What a search's first page answers: status, books, the first titles (for the log). */
async function peek (port, urlPath, token) {
  const { status, ms, body } = await timedGet(false, port, urlPath, token, true)
  let data = null
  try {
    data = JSON.parse(body).data
  } catch {}
  const first = Array.isArray(data) ? data.slice(0, 3).map((book) => `${book.title} / ${book.author}`).join('; ') : body.slice(0, 120)
  return `${status} in ${ms.toFixed(0)} ms, ${Array.isArray(data) ? data.length : 0} books: ${first}`
}

/**
 * The page DEPTH pages deep of a ranked search: the first of `candidates` whose walk goes that
 * deep, with how long the walk there took; the words tried before it and their first pages'
 * statuses.
 */
async function deepPage (port, candidates, token) {
  const tried = []
  for (const q of candidates) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    let url = searchPath(q)
    const started = performance.now()
    let page = 1
    let last = null
    for (; page < DEPTH; page++) {
      last = await timedGet(agent, port, url, token)
      const next = last.status === '200' ? nextOf(last.link) : null
      if (next === null) break
      url = next
    }
    agent.destroy()
    if (page === DEPTH) return { q, url, walkSeconds: (performance.now() - started) / 1000, tried }
    tried.push(`${q}: page ${page} answered ${last.status}${last.status === '200' ? ' without a next page' : ''}`)
  }
  return { q: null, tried }
}

/** The searches' first pages mixed from 32 connections, while one client reads GET /book/<id> 20 ms apart. */
async function underLoad (port, token, paths) {
  const reader = readBooks(port, token, SECONDS * 1000)
  const byPath = Object.fromEntries(paths.map((p) => [p, {}]))
  let turn = 0
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: 32,
    duration: SECONDS,
    headers: { authorization: token },
    // Each connection's next request is the next path of the mix, whatever the others send
    requests: [{
      method: 'GET',
      setupRequest: (req, context) => {
        context.path = paths[turn++ % paths.length]
        return { ...req, path: context.path }
      },
      onResponse: (status, _body, context) => {
        byPath[context.path][status] = (byPath[context.path][status] ?? 0) + 1
      }
    }]
  })
  const read = await reader
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([status, { count }]) => [status, count]))
  if (result.errors > 0) statuses.errors = result.errors
  if (result.timeouts > 0) statuses.timeouts = result.timeouts
  return { statuses, byPath, rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, read }
}

/** GET /book/<id> of random ids for `ms`, 20 ms apart, on a keep-alive connection of its own. */
async function readBooks (port, token, ms) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const times = []
  const statuses = []
  const until = Date.now() + ms
  while (Date.now() < until) {
    const { status, ms: took } = await timedGet(agent, port, `/book/${1 + Math.floor(Math.random() * BOOKS)}`, token)
    times.push(took)
    statuses.push(status)
    await sleep(20)
  }
  agent.destroy()
  return { p50: percentile(times, 50), p99: percentile(times, 99), requests: times.length, statuses: countsOf(statuses) }
}

/** A small deterministic generator (mulberry32): the same books for each measurement of creates. */
function generator (seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6D2B79F5) >>> 0
    let t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** A book like the seeded ones; one word in ten new, never written before (the known words then grow). */
function bookBody (random, run) {
  const pick = (list) => list[Math.floor(random() * list.length)]
  const words = Array.from({ length: 2 + Math.floor(random() * 5) }, () => {
    const r = random()
    if (r < 0.3) return pick(STOPWORDS)
    if (r < 0.4) return `${pick(['zor', 'quel', 'vash', 'mird', 'plon', 'trask'])}${run}${Math.floor(random() * 1e9).toString(36).replace(/[0-9]/g, '')}`
    return pick(REAL_WORDS)
  })
  return JSON.stringify({
    title: words.map((word) => word[0].toUpperCase() + word.slice(1)).join(' '),
    author: `${pick(FIRST_NAMES)} ${pick(LAST_NAMES)}`,
    year: 1450 + Math.floor(random() * 575)
  })
}

function post (agent, port, token, body) {
  return new Promise((resolve) => {
    const started = performance.now()
    const req = http.request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/book',
      agent,
      headers: { authorization: token, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
    }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: String(res.statusCode), ms: performance.now() - started }))
    })
    req.on('error', (err) => resolve({ status: `error: ${err.message}`, ms: performance.now() - started }))
    req.end(body)
  })
}

/** `count` creates from CREATE_CLIENTS keep-alive clients: statuses, creates per second. */
async function creates (port, token, count, seed, run) {
  const random = generator(seed)
  const bodies = Array.from({ length: count }, () => bookBody(random, run))
  const statuses = []
  let next = 0
  const started = performance.now()
  await Promise.all(Array.from({ length: CREATE_CLIENTS }, async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    while (next < bodies.length) statuses.push((await post(agent, port, token, bodies[next++])).status)
    agent.destroy()
  }))
  return { statuses: countsOf(statuses), perSecond: count / ((performance.now() - started) / 1000) }
}

/**
 * Step 5: the CPU per create on a scratch database of CREATE_BOOKS books: with the search's
 * indexes and triggers, without them (dropped), and with them again (made again from the
 * migrations' statements), so that the order of the runs shows in their spread. The GIN indexes
 * take new entries into their pending list; a run with them ends by flushing it, as a later
 * insert or vacuum would, so that what it costs is counted.
 */
async function createCost (bench, logDir, servers) {
  const { dbUrl } = await bench.createDatabase()
  const dbName = new URL(dbUrl).pathname.slice(1)
  // On Citus a cluster of its own, as the kept database (common.cjs, keptDatabase)
  const workers = await citusWorkers()
  if (workers.length > 0) bench.onCleanup(await require('../dist/tools/topology/citus.js').spreadOverCitus(ADMIN_URL, dbName, workers))
  const service = await startService(bench, dbUrl, path.join(logDir, 'service-creates.log'))
  await service.ready()
  const seeded = performance.now()
  await admin(async (client) => {
    await client.query(SEARCH_SEED, seedValues(CREATE_BOOKS))
    await client.query('VACUUM ANALYZE books')
    await client.query('VACUUM ANALYZE search_words')
  }, dbUrl)
  const words = await admin(async (client) => (await client.query('SELECT count(*)::int AS n FROM search_words')).rows[0].n, dbUrl)
  console.log(`\ncreates: scratch database ${dbName}, ${CREATE_BOOKS.toLocaleString('en-US')} books and ${words.toLocaleString('en-US')} known words ` +
    `seeded (triggers on) in ${((performance.now() - seeded) / 1000).toFixed(1)} s; ${CREATES} creates from ${CREATE_CLIENTS} clients per run`)
  const { migrations: steps, statementsOf } = await migrations()
  const remake = [
    ...steps.filter(({ index }) => index === 'books_title_words' || index === 'books_author_words').flatMap(statementsOf),
    ...steps.flatMap(statementsOf).filter((statement) => statement.includes('CREATE TRIGGER books_search_words_created'))
  ]
  if (remake.length !== 3) throw new Error(`expected the two search indexes and the triggers among the migrations, found ${remake.length} statements`)
  const token = await issueToken(service.port)
  const measure = cpuMeter(servers, dbName)
  const flusher = await connect(dbUrl)
  const rows = []
  // A run before those measured, and its autovacuum done: the first measured run after the seeding
  // cost a third more than the same run later, in the service and in PostgreSQL alike
  await creates(service.port, token, CREATES, 99, 'warm')
  await flusher.query('VACUUM ANALYZE books')
  const phases = [['with the search index and triggers', true], ['without them', false], ['with them again', true]]
  for (const [i, [label, indexed]] of phases.entries()) {
    await creates(service.port, token, 1000, 100 + i, `w${i}`)
    const { result, own: [serviceCpu], database, server } = await measure([service.child.pid], async () => {
      const made = await creates(service.port, token, CREATES, 1 + i, `m${i}`)
      if (indexed) await flusher.query("SELECT gin_clean_pending_list('books_title_words'), gin_clean_pending_list('books_author_words')")
      return made
    })
    const row = {
      label,
      indexed,
      statuses: result.statuses,
      perSecond: result.perSecond,
      service: serviceCpu / CREATES * 1e6,
      database: database / CREATES * 1e6,
      server: server / CREATES * 1e6
    }
    rows.push(row)
    console.log(`POST /book ${label}: ${statusText(result.statuses)}, ${result.perSecond.toFixed(0)}/s, ` +
      `service ${row.service.toFixed(0)} µs + PostgreSQL ${row.database.toFixed(0)} µs (whole server ${row.server.toFixed(0)} µs) CPU per create`)
    if (i === 0) {
      // One at a time: Citus drops no two distributed objects in one command
      for (const index of ['books_title_words', 'books_author_words']) await flusher.query(`DROP INDEX ${index}`)
      // None on Citus (src/db/migrations.ts, version 22), which refuses even DROP TRIGGER IF EXISTS on a distributed table
      if (workers.length === 0) for (const trigger of SEARCH_TRIGGERS) await flusher.query(`DROP TRIGGER ${trigger} ON books`)
    } else if (i === 1) {
      for (const statement of remake) await flusher.query(statement)
    }
    await flusher.query('VACUUM ANALYZE books')
  }
  await flusher.end()
  await stopChild(service.child, 10_000)
  for (const [text, count] of service.log.problems) console.log(`  the service of the creates logged ${count}× ${text}`)
  const mean = (pick) => (pick(rows[0]) + pick(rows[2])) / 2
  const ratio = {
    total: mean((row) => row.service + row.database) / (rows[1].service + rows[1].database),
    database: mean((row) => row.database) / rows[1].database,
    perSecond: mean((row) => row.perSecond) / rows[1].perSecond
  }
  console.log(`with (mean of the two runs) / without: service+PostgreSQL CPU ${ratio.total.toFixed(2)}, ` +
    `PostgreSQL alone ${ratio.database.toFixed(2)}, creates per second ${ratio.perSecond.toFixed(2)}`)
  return { rows, ratio }
}

runBenchmark('search', async (bench) => {
  const began = Date.now()
  const { name, url, seeded } = await searchDatabase(BOOKS, process.env.BENCH_SEARCH_RESEED === '1')
  const code = execFileSync('git', ['describe', '--always', '--dirty'], { cwd: ROOT, encoding: 'utf8' }).trim()
  const workers = await citusWorkers()
  const citus = workers.length === 0
    ? ''
    : `, Citus ${(await admin((client) => client.query("SELECT extversion FROM pg_extension WHERE extname = 'citus'"), url)).rows[0].extversion} over ${workers.length} workers`
  console.log(`bench search, ${new Date().toISOString()}, code ${code} (the service as built in dist/), PostgreSQL ` +
    `${await admin(async (client) => (await client.query('SHOW server_version')).rows[0].server_version)}${citus}`)
  console.log(`${BOOKS.toLocaleString('en-US')} books, database ${name} (kept); ` +
    `${seeded === null ? 'seeded by an earlier run' : `seeded in ${seeded.toFixed(1)} s`}`)
  // On Citus the coordinator's `books` is empty: its shards' size
  const size = await admin(async (client) => (await client.query(`SELECT pg_size_pretty(${workers.length > 0 ? 'citus_total_relation_size' : 'pg_total_relation_size'}('books')) AS size`)).rows[0].size, url)
  console.log(`books ${size} before the migration's indexes`)

  // Step 2: the migration on the full table, under writes
  const logPath = path.join(bench.tmpDir, 'service.log')
  const stop = { done: false }
  const writing = writeDuring(url, stop)
  const service = await startService(bench, url, logPath)
  await service.ready()
  stop.done = true
  const { slowest, slow, writes } = await writing
  const migrated = (Date.now() - service.started) / 1000
  console.log(`service listening after ${migrated.toFixed(1)} s, ${service.log.steps.length} migration steps applied; ` +
    `${writes} writes meanwhile, the slowest ${slowest.toFixed(0)} ms`)
  // Each step's slowest write over SLOW_WRITE_MS, and what it waited on
  const slowestOfStep = new Map()
  for (const write of slow) {
    const step = service.log.steps.find(({ time }) => time >= write.started)
    const name = step === undefined ? 'after the last step' : `step ${step.version} ${step.name}`
    if (write.took > (slowestOfStep.get(name)?.took ?? 0)) slowestOfStep.set(name, write)
  }
  for (const [name, { took, waits }] of slowestOfStep) console.log(`  slowest write over ${SLOW_WRITE_MS} ms during ${name}: ${took.toFixed(0)} ms, waiting on ${waits.join(', ') || 'nothing sampled'}`)
  let previous = service.started
  for (const { version, name: step, time } of service.log.steps) {
    console.log(`  ${String(version).padStart(2)} ${step}: ${((time - previous) / 1000).toFixed(1)} s`)
    previous = time
  }
  const sizes = await admin(async (client) => (await client.query(`SELECT
      (SELECT count(*) FROM search_words)::int8 AS words,
      pg_size_pretty(pg_relation_size('books_title_words')) AS title_words,
      pg_size_pretty(pg_relation_size('books_author_words')) AS author_words,
      pg_size_pretty(pg_total_relation_size('search_words')) AS known`)).rows[0], url)
  console.log(`known words ${Number(sizes.words).toLocaleString('en-US')} (${sizes.known} with its indexes); ` +
    `index books_title_words ${sizes.title_words}, books_author_words ${sizes.author_words}`)

  // A statement per word: Citus runs no correlated subquery beside a set returning function
  const counts = await admin(async (client) => {
    const rows = []
    for (const words of COUNTED) {
      const { rows: [{ books }] } = await client.query(`SELECT count(*)::int8 AS books FROM books
        WHERE search_words_of(title) @@ $1::tsquery OR search_words_of(author) @@ $1::tsquery`, [words])
      rows.push({ words, books })
    }
    return rows
  }, url)
  console.log(`books holding: ${counts.map(({ words, books }) => `${words} ${Number(books).toLocaleString('en-US')}`).join(', ')}`)

  const reference = await startReference(bench.track, url, SECRET, path.join(bench.tmpDir, 'reference.log'))
  const token = tokens(service.port)
  // The coordinator, and on Citus each worker: their backends of this database and whole servers
  const { onNode } = require('../dist/tools/topology/citus.js')
  const nodes = [ADMIN_URL, ...(await citusWorkers()).map(({ host, port }) => onNode(ADMIN_URL, host, port, 'postgres'))]
  const servers = []
  for (const node of nodes) {
    const monitor = await connect(node)
    bench.onCleanup(() => monitor.end())
    servers.push({ monitor, postmaster: await postmasterPid(node) })
  }
  const measure = cpuMeter(servers, name)

  // Step 3: each search with one client, and its CPU per page
  console.log('\nfirst pages (one request each):')
  for (const [label, q, extra = ''] of SEARCHES) console.log(`  ${label}, q=${q}${extra}: ${await peek(service.port, searchPath(q, extra), await token())}`)
  const rows = []
  const measured = async (label, target, urlPath, count) => {
    const pids = target === reference ? [reference.child.pid] : [service.child.pid]
    const { result, own: [serverCpu], database, server } = await measure(pids, async () => sequential(target.port, urlPath, await token(), count))
    const row = {
      label,
      requests: result.requests,
      statuses: result.statuses,
      capped: result.capped,
      p50: percentile(result.times, 50),
      p99: percentile(result.times, 99),
      cpu: serverCpu / result.requests * 1e6,
      pg: database / result.requests * 1e6,
      server: server / result.requests * 1e6
    }
    rows.push(row)
    console.log(`${label}: ${result.requests} requests${result.capped ? ` (stopped after ${CAP_SECONDS} s)` : ''}, ${statusText(result.statuses)}; ` +
      `p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms; CPU per request: ${target === reference ? 'reference' : 'service'} ${row.cpu.toFixed(0)} µs, ` +
      `PostgreSQL ${row.pg.toFixed(0)} µs (whole server ${row.server.toFixed(0)} µs)`)
    return row
  }
  console.log()
  const bookPath = `/book/${Math.ceil(BOOKS / 3)}`
  const referenceRow = await measured('reference: GET /book/<id>', reference, bookPath, BOOK_READS)
  await measured('service: GET /book/<id>', service, bookPath, BOOK_READS)
  for (const [label, q, extra = ''] of SEARCHES) await measured(`q=${q}${extra} (${label})`, service, searchPath(q, extra))
  const deep = await deepPage(service.port, ['the', 'of', 'night', 'war', 'garden', 'dune', 'foundation'], await token())
  for (const line of deep.tried) console.log(`deep page: ${line}`)
  if (deep.q === null) {
    console.log(`deep page: no search tried reached page ${DEPTH}`)
  } else {
    console.log(`deep page: q=${deep.q}, walked to page ${DEPTH} in ${deep.walkSeconds.toFixed(1)} s`)
    await measured(`q=${deep.q}, page ${DEPTH} (ranked walk)`, service, deep.url)
  }
  console.log()
  console.log(markdownTable(
    ['scenario', 'requests', 'statuses', 'p50 ms', 'p99 ms', 'service CPU µs', 'PG µs', 'PG server µs', 'CPU / reference'],
    rows.map((row) => [
      row.label, `${row.requests}${row.capped ? '*' : ''}`, statusText(row.statuses), row.p50.toFixed(1), row.p99.toFixed(1),
      row.cpu.toFixed(0), row.pg.toFixed(0), row.server.toFixed(0),
      ((row.cpu + row.pg) / (referenceRow.cpu + referenceRow.pg)).toFixed(1)
    ])))
  console.log(`  CPU per request from /proc: the server's process (service or reference), PostgreSQL's backends of ${name}, and the whole` +
    '\n  PostgreSQL server (any other database\'s work included); CPU / reference: (server + PG) over the reference\'s GET /book/<id>;' +
    `\n  * stopped after BENCH_SEARCH_CAP_SECONDS (${CAP_SECONDS} s); the service logs every request at info, the reference nothing`)

  // Step 4: under load
  const alone = await readBooks(service.port, await token(), SECONDS * 1000)
  const mixed = [...SEARCHES.map(([, q, extra = '']) => searchPath(q, extra)), ...deep.q === null ? [] : [deep.url]]
  const loadToken = await token()
  const { result: load, own: [loadCpu], database: loadDatabase } = await measure([service.child.pid], () => underLoad(service.port, loadToken, mixed))
  console.log(`\n${mixed.length} searches mixed from 32 connections for ${SECONDS} s: ${statusText(load.statuses)}, ` +
    `${load.rps.toFixed(1)} req/s, p50 ${load.p50} ms, p99 ${load.p99} ms`)
  // The reader's GET /book/<id> are counted in: they cost far less than a search
  const searched = Object.values(load.byPath).reduce((sum, counts) => sum + Object.values(counts).reduce((a, b) => a + b, 0), 0)
  const loadCost = { service: loadCpu / searched * 1e6, database: loadDatabase / searched * 1e6 }
  const searchRows = rows.filter(({ label }) => label.startsWith('q='))
  const aloneCost = {
    service: searchRows.reduce((sum, row) => sum + row.cpu, 0) / searchRows.length,
    database: searchRows.reduce((sum, row) => sum + row.pg, 0) / searchRows.length
  }
  console.log(`CPU per search under this load (the reader's requests counted in): service ${loadCost.service.toFixed(0)} µs + PostgreSQL ` +
    `${loadCost.database.toFixed(0)} µs; the same searches one at a time, mean: ${aloneCost.service.toFixed(0)} + ${aloneCost.database.toFixed(0)} µs; ` +
    `under load / alone ${((loadCost.service + loadCost.database) / (aloneCost.service + aloneCost.database)).toFixed(2)}`)
  for (const [p, counts] of Object.entries(load.byPath)) console.log(`  ${decodeURIComponent(p.replace(/&cursor=.*/, '&cursor=...'))}: ${statusText(counts) || 'no answer'}`)
  console.log(`GET /book/<id> 20 ms apart on its own keep-alive connection: idle service p50 ${alone.p50.toFixed(1)} ms, p99 ${alone.p99.toFixed(1)} ms ` +
    `(${statusText(alone.statuses)}); under the searches p50 ${load.read.p50.toFixed(1)} ms, p99 ${load.read.p99.toFixed(1)} ms (${statusText(load.read.statuses)})`)

  // Step 5: creates with and without the search's indexes
  const createCosts = await createCost(bench, bench.tmpDir, servers)

  console.log('\n' + markdownTable(['measure', 'value'], [
    ['books', BOOKS.toLocaleString('en-US')],
    ['seeding (s)', seeded === null ? 'earlier run' : seeded.toFixed(1)],
    ['migration until listening (s)', migrated.toFixed(1)],
    // The search's steps: from its first, the extension that folds accents
    ...service.log.steps.filter(({ version }) => version >= (service.log.steps.find(({ name }) => name === 'create extension unaccent')?.version ?? Infinity)).map(({ version, name: step }) => {
      const i = service.log.steps.findIndex((s) => s.version === version)
      const from = i === 0 ? service.started : service.log.steps[i - 1].time
      return [`  step ${version} ${step} (s)`, ((service.log.steps[i].time - from) / 1000).toFixed(1)]
    }),
    ['slowest write during the migration (ms)', slowest.toFixed(0)],
    ['load: searches mixed, 32 connections', `${statusText(load.statuses)}; ${load.rps.toFixed(1)} req/s`],
    ['load: service + PG µs per search, under load; one at a time', `${loadCost.service.toFixed(0)} + ${loadCost.database.toFixed(0)}; ` +
      `${aloneCost.service.toFixed(0)} + ${aloneCost.database.toFixed(0)}`],
    ['GET /book/<id> p50 / p99 ms, idle', `${alone.p50.toFixed(1)} / ${alone.p99.toFixed(1)}`],
    ['GET /book/<id> p50 / p99 ms, under the searches', `${load.read.p50.toFixed(1)} / ${load.read.p99.toFixed(1)}`],
    ...createCosts.rows.map((row) => [`POST /book ${row.label}: service + PG µs per create`, `${row.service.toFixed(0)} + ${row.database.toFixed(0)}`]),
    ['POST /book CPU (service + PG) with / without', createCosts.ratio.total.toFixed(2)],
    ['POST /book CPU (PG alone) with / without', createCosts.ratio.database.toFixed(2)]
  ], 1))

  const problems = [...service.log.problems.entries()]
  console.log(problems.length === 0
    ? '\nthe service logged no warning or error'
    : `\nthe service logged:\n${problems.map(([text, count]) => `  ${count}× ${text}`).join('\n')}`)
  console.log(`service log: ${logPath}`)
  console.log(`total time: ${((Date.now() - began) / 1000).toFixed(0)} s`)
})

/**
 * The client examples of docs/clients.md (docs/examples/), run against the real service so they
 * cannot rot: the JavaScript one (`node client.mjs`) and the Python one (`python3 client.py`) as
 * the processes a reader would start, the typed one (typed-client.ts) imported. Each does its
 * round of create, list, walk page by page, read, update with `If-Match` and delete; starting
 * with a token that has expired, it logs in again; answered 429 with `Retry-After: 5` (the
 * service's bound on connections per address, held full by this test), it waits 5 s and goes on;
 * a write with a stale `If-Match` is its ApiError 412. Between client and service a TCP proxy
 * shows the requests on the wire: the bare token, the Idempotency-Key, the same on a repeat,
 * each page's cursor, the If-Match. The generated types must be what `npm run client:types` makes
 * of the service's document now.
 */
import { spawn, spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import type pg from 'pg'
import t, { type Test } from 'tap'
import { ApiError, type Book, createBookkeepingClient, dataOf, exampleRound } from '../../docs/examples/typed-client.js'
import { entityTag, FIRST_VERSION } from '../../src/entity-tags.js'
import { listingCursors, walkOf } from '../../src/listing.js'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { PASSWORD, SECRET, USERNAME, testEnv } from '../helper.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { type Service, startService, temporaryDirectory } from '../helpers/service.js'
import { mint, nowSeconds } from '../helpers/tokens.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { withTimeout } from '../helpers/wait.js'

const EXAMPLES = join(PROJECT_ROOT, 'docs', 'examples')
/** The generated types, which the typed client example and the console (console) use */
const CLIENT_TYPES = 'console/bookkeeping-api.d.ts'
const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }
/**
 * The books in each database before the examples run, stored in an order their titles do not
 * have. The examples' walk, Herbert's books by title, one a page, goes Children of Dune, Dune
 * (the round's), Dune Messiah, then an empty page; Emma is not his.
 */
const OTHER_BOOKS = [
  { title: 'Dune Messiah', author: 'Frank Herbert', year: 1969 },
  { title: 'Emma', author: 'Jane Austen', year: 1815 },
  { title: 'Children of Dune', author: 'Frank Herbert', year: 1976 }
]
/** The query of the examples' walk */
const WALK = { limit: '1', sort: 'title', author: 'herbert' } as const
/** The query of the examples' search: a typo of Herbert, whose books it finds */
const SEARCH = { q: 'herbret', limit: '2' } as const
const STEPS = ['created', 'listed', 'walked', 'searched', 'read', 'updated', 'deleted'] as const
/**
 * A bound for a hang of one run of an example: two waits of 5 s and a few requests take over
 * 10 s alone, and a Python run beside other test files on a loaded machine far longer
 */
const RUN_TIMEOUT = 60_000

interface Run {
  /** What each step answered, by step name */
  steps: Record<string, unknown>
  /** The lines the client logged about its repeats (stderr for the scripts) */
  log: string[]
  /** What went wrong, if the run failed */
  failure: string | null
}

/** How a write was refused: the status and message of its ApiError; null when it was done. */
type Refusal = { status: number, message: string } | null

interface Example {
  name: string
  run: (t: Test, url: string, token?: string) => Promise<Run>
  /** Updates book `id`, then deletes it, each with `If-Match: ifMatch`, as a program using the client would. */
  writeIfMatch: (t: Test, url: string, id: number, ifMatch: string) => Promise<Refusal[]>
}

/** A program run to its end with the examples' variables and `env`, killed after RUN_TIMEOUT. */
function runProgram (t: Test, command: string, args: string[], url: string, env: Record<string, string>) {
  return new Promise<{ stdout: string, stderr: string, failure: string | null }>((resolve, reject) => {
    const child = spawn(command, args, {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/tmp',
        BOOKKEEPING_URL: url,
        BOOKKEEPING_USERNAME: USERNAME,
        BOOKKEEPING_PASSWORD: PASSWORD,
        ...env
      },
      stdio: ['ignore', 'pipe', 'pipe']
    })
    t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT)
    child.once('error', reject)
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ stdout, stderr, failure: code === 0 ? null : `exit ${code ?? signal}\n${stdout}\n${stderr}` })
    })
  })
}

/**
 * An example run as a script, as docs/clients.md tells a reader to run it; `writeIfMatch`, the
 * program that makes its conditional writes (it prints how each was refused, as JSON).
 */
function script (name: string, command: string, file: string, writeIfMatch: { args: string[], env?: Record<string, string> }): Example {
  return {
    name,
    run: async (t, url, token) => {
      const { stdout, stderr, failure } = await runProgram(t, command, [join(EXAMPLES, file)], url,
        token === undefined ? {} : { BOOKKEEPING_TOKEN: token })
      const steps: Record<string, unknown> = {}
      for (const line of stdout.split('\n')) {
        const match = /^(\w+) (.*)$/.exec(line)
        if (match !== null) steps[match[1]!] = JSON.parse(match[2]!)
      }
      return { steps, log: stderr.split('\n').filter((line) => line !== ''), failure }
    },
    writeIfMatch: async (t, url, id, ifMatch) => {
      const { stdout, failure } = await runProgram(t, command, writeIfMatch.args, url,
        { ...writeIfMatch.env, BOOK_ID: String(id), IF_MATCH: ifMatch })
      if (failure !== null) throw new Error(failure)
      return JSON.parse(stdout) as Refusal[]
    }
  }
}

/** The conditional writes of a program that imports client.mjs, as in docs/clients.md. */
const JAVASCRIPT_WRITE_IF_MATCH = `
import { ApiError, BookkeepingClient } from ${JSON.stringify(pathToFileURL(join(EXAMPLES, 'client.mjs')).href)}
const { BOOKKEEPING_URL: baseUrl, BOOKKEEPING_USERNAME: username, BOOKKEEPING_PASSWORD: password, BOOK_ID: id, IF_MATCH: ifMatch } = process.env
const client = new BookkeepingClient({ baseUrl, username, password })
const refusal = (write) => write().then(() => null, (err) => {
  if (!(err instanceof ApiError)) throw err
  return { status: err.status, message: err.message }
})
console.log(JSON.stringify([
  await refusal(() => client.updateBook(id, { year: 1966 }, ifMatch)),
  await refusal(() => client.deleteBook(id, ifMatch))
]))
`

/** The same with client.py. */
const PYTHON_WRITE_IF_MATCH = `
import json, os
from client import ApiError, BookkeepingClient
env = os.environ
client = BookkeepingClient(env["BOOKKEEPING_URL"], env["BOOKKEEPING_USERNAME"], env["BOOKKEEPING_PASSWORD"])
def refusal(write):
    try:
        write()
        return None
    except ApiError as err:
        return {"status": err.status, "message": err.message}
print(json.dumps([
    refusal(lambda: client.update_book(env["BOOK_ID"], {"year": 1966}, if_match=env["IF_MATCH"])),
    refusal(lambda: client.delete_book(env["BOOK_ID"], if_match=env["IF_MATCH"])),
]))
`

/** How a write of the typed client was refused. */
async function refusal (write: () => Promise<unknown>): Promise<Refusal> {
  try {
    await write()
    return null
  } catch (err) {
    if (!(err instanceof ApiError)) throw err
    return { status: err.status, message: err.message }
  }
}

const EXAMPLES_TO_RUN: Example[] = [
  script('JavaScript (fetch)', process.execPath, 'client.mjs', { args: ['--input-type=module', '-e', JAVASCRIPT_WRITE_IF_MATCH] }),
  script('Python (standard library)', 'python3', 'client.py', {
    args: ['-c', PYTHON_WRITE_IF_MATCH],
    // Importing client.py from its folder, leaving no __pycache__ in it
    env: { PYTHONPATH: EXAMPLES, PYTHONDONTWRITEBYTECODE: '1' }
  }),
  {
    name: 'typed (openapi-fetch)',
    run: async (_t, url, token) => {
      const log: string[] = []
      const api = createBookkeepingClient({ baseUrl: url, username: USERNAME, password: PASSWORD, token, log: (line) => log.push(line) })
      try {
        const steps = await withTimeout(exampleRound(api), RUN_TIMEOUT, 'the typed round')
        return { steps, log, failure: null }
      } catch (err) {
        return { steps: {}, log, failure: String((err as Error).stack) }
      }
    },
    writeIfMatch: async (_t, url, id, ifMatch) => {
      const api = createBookkeepingClient({ baseUrl: url, username: USERNAME, password: PASSWORD })
      const params = { path: { id: String(id) }, header: { 'if-match': ifMatch } }
      return [
        await refusal(async () => dataOf(await api.PUT('/book/{id}', { params, body: { year: 1966 } }))),
        await refusal(async () => dataOf(await api.DELETE('/book/{id}', { params })))
      ]
    }
  }
]

/** A token signed with the service's secret that expired a minute ago. */
const expiredToken = () => mint({ payload: { exp: nowSeconds() - 60 } })
/** A valid token as the service would issue it, made without asking it (no connection). */
const freshToken = () => mint({ payload: { exp: nowSeconds() + 900 } })

/** A service holding OTHER_BOOKS, the proxy in front of it, and its database seen from the test. */
async function setUp (t: Test, env: Record<string, string> = {}) {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, { ...testEnv(dbUrl), ...env })
  const proxy = await TcpProxy.start(t, service.port)
  proxy.recordSent = true
  const db = await pgClient(t, dbUrl)
  await db.query(`INSERT INTO books (title, author, year)
    SELECT title, author, year FROM jsonb_to_recordset($1) AS other (title text, author text, year int)`, [JSON.stringify(OTHER_BOOKS)])
  return { service, proxy, db, url: `http://127.0.0.1:${proxy.port}` }
}

interface WireRequest {
  line: string
  headers: Map<string, string>
}

/**
 * The requests in what clients sent, one after the other (each with a Content-Length body or
 * none: the examples send no chunked bodies).
 */
function requestsIn (sent: string): WireRequest[] {
  const requests: WireRequest[] = []
  let offset = 0
  while (offset < sent.length) {
    const end = sent.indexOf('\r\n\r\n', offset)
    if (end === -1) throw new Error(`an incomplete request on the wire: ${JSON.stringify(sent.slice(offset, offset + 200))}`)
    const [requestLine = '', ...fields] = sent.slice(offset, end).split('\r\n')
    const headers = new Map(fields.map((field) => {
      const colon = field.indexOf(':')
      return [field.slice(0, colon).toLowerCase(), field.slice(colon + 1).trim()]
    }))
    requests.push({ line: requestLine.replace(/ HTTP\/1\.1$/, ''), headers })
    offset = end + 4 + Number(headers.get('content-length') ?? 0)
  }
  return requests
}

/**
 * `METHOD path status` of each request line the service logged after `offset` in its output, once
 * it has logged the round's last call (a line is written as its answer goes out: the client may
 * have it, and have exited, a moment before the test reads the line).
 */
async function requestLines (service: Service, offset: number): Promise<string[]> {
  await service.waitFor(() => service.stdout.slice(offset).includes('"method":"DELETE"'), 5000, 'the request line of the delete')
  return service.stdout.slice(offset).split('\n').filter((line) => line.includes('"msg":"request"'))
    .map((line) => JSON.parse(line) as { method: string, url: string, statusCode: number })
    .filter(({ url }) => !url.startsWith('/health'))
    .map(({ method, url, statusCode }) => `${method} ${url} ${statusCode}`)
}

/** The log lines of the service after `offset`, parsed. */
function logLines (service: Service, offset: number): Array<{ time: number, msg: string, method?: string, url?: string, statusCode?: number }> {
  return service.stdout.slice(offset).split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line))
}

/**
 * The round answered as the service stores books, with the bare token and an Idempotency-Key on
 * the wire; the walk (checkWalk); the update with If-Match, the ETag the read answered; the book
 * stored once (its key names it, and after the delete only OTHER_BOOKS are left). False when the
 * example failed: nothing else about its run is worth checking then.
 */
async function checkRound (t: Test, run: Run, db: pg.Client, sent: WireRequest[]): Promise<boolean> {
  if (!t.equal(run.failure, null, 'the example ran to its end')) return false
  t.strictSame(Object.keys(run.steps), [...STEPS], 'every step answered')
  const created = run.steps.created as Book
  t.match(created, { ...BOOK, id: Number }, 'created: the book with its new id')
  const listed = run.steps.listed as Book[]
  t.equal(listed.length, OTHER_BOOKS.length + 1, 'listed: every book')
  t.ok(listed.some((book) => JSON.stringify(book) === JSON.stringify(created)), 'listed: the one created among them')
  checkWalk(t, listed, run.steps.walked as Book[][], sent)
  // Every Herbert book ranks alike (the author, through a typo): by id
  t.strictSame(run.steps.searched, listed.filter(({ author }) => author.endsWith('Herbert')).sort((a, b) => a.id - b.id).slice(0, 2),
    'searched: the first page of the search, best first')
  t.strictSame(sent.filter(({ line }) => line.startsWith('GET /books?q=') || line.includes('&q=')).map(({ line }) =>
    Object.fromEntries(new URLSearchParams(line.slice(line.indexOf('?') + 1)))), [SEARCH], 'the search asked once, with its query')
  t.strictSame(run.steps.read, created, 'read: the book as created')
  t.strictSame(run.steps.updated, { ...created, year: 1966 }, 'updated: the new year, the rest kept')
  t.equal(run.steps.deleted, null, 'deleted: data null')
  // Created, read, and not changed until the update: the version of its ETag is the first
  t.equal(sent.find(({ line }) => line.startsWith('PUT '))?.headers.get('if-match'), entityTag(created.id, FIRST_VERSION),
    'the update carries If-Match: the ETag the read answered')

  for (const request of sent.filter(({ line }) => line !== 'POST /token')) {
    t.match(request.headers.get('authorization'), /^[\w-]+\.[\w-]+\.[\w-]+$/, `${request.line}: the bare token in Authorization`)
  }
  const keys = sent.filter(({ line }) => line === 'POST /book').map(({ headers }) => headers.get('idempotency-key'))
  t.match(keys[0], /^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/, 'the create carries a random UUID as a quoted Idempotency-Key')
  t.strictSame(new Set(keys).size, 1, `every repeat of the create carries the same key (${keys.length} sent)`)
  const { rows } = await db.query<{ id: string }>('SELECT book_id::text AS id FROM idempotency_keys WHERE key = $1', [keys[0]?.slice(1, -1)])
  t.strictSame(rows, [{ id: String(created.id) }], 'the key is stored once, naming the book created')
  // Each round deletes the book it created: any other would be a second copy
  const { rows: left } = await db.query('SELECT title, author, year FROM books ORDER BY id')
  t.strictSame(left, OTHER_BOOKS, 'the book is gone, and no second copy of it was stored')
  return true
}

/**
 * The walk: the listed books that WALK matches, by title then id, one a page, each once, then
 * the empty page after the last full one. On the wire each page is asked with WALK's
 * parameters, the first without a cursor, each next one with the cursor of the Link of the page
 * before: it names that page's last book (the service signs its cursors; a client cannot make one).
 */
function checkWalk (t: Test, listed: Book[], walked: Book[][], sent: WireRequest[]) {
  const matching = listed.filter(({ author }) => author.toLowerCase().includes(WALK.author))
    .sort((a, b) => a.title === b.title ? a.id - b.id : a.title < b.title ? -1 : 1)
  t.strictSame(walked, [...matching.map((book) => [book]), []],
    'walked: the matching books by title, one a page, each once, then an empty page')
  const cursors = listingCursors(SECRET)
  const walk = walkOf(WALK)!
  const asked = sent.filter(({ line }) => line.startsWith('GET /books?') && !new URLSearchParams(line.slice(line.indexOf('?') + 1)).has('q')).map(({ line }) => {
    const { cursor, ...query } = Object.fromEntries(new URLSearchParams(line.slice(line.indexOf('?') + 1)))
    if (cursor === undefined) return { query, after: null }
    const position = /^[\w-]+\.[\w-]+$/.test(cursor) ? cursors.decode(walk, cursor) : null
    return { query, after: position === null ? `not a cursor of this walk: ${cursor}` : { title: position.key, id: Number(position.id) } }
  })
  t.strictSame(asked, walked.map((_, page) => {
    const last = walked[page - 1]?.at(-1)
    return { query: WALK, after: last === undefined ? null : { title: last.title, id: last.id } }
  }), 'a request a page, the first without a cursor, each next one with the cursor of the Link of the page before')
}

/** A keep-alive connection from this address that has had its answer and stays open. */
function hold (t: Test, service: Service): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port: service.port, host: '127.0.0.1' })
    t.teardown(() => socket.destroy())
    let received = ''
    socket.setEncoding('latin1')
    socket.once('error', reject)
    socket.on('data', (chunk: string) => {
      received += chunk
      if (!received.includes('\r\n\r\n')) return
      if (received.startsWith('HTTP/1.1 200 ')) resolve(socket)
      else reject(new Error(`the held connection was answered ${received.slice(0, 40)}`))
    })
    socket.write('GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n')
  })
}

t.test('each example: a round, and a token that expired; the generated types', { skip: STORE_INDEPENDENT }, async (t) => {
  const { service, proxy, db, url } = await setUp(t)
  for (const example of EXAMPLES_TO_RUN) {
    t.test(`${example.name}: logs in, creates, lists, walks, searches, reads, updates, deletes`, async (t) => {
      const sentFrom = proxy.sent.length
      const logFrom = service.stdout.length
      const run = await example.run(t, url)
      const sent = requestsIn(proxy.sent.slice(sentFrom))
      if (!await checkRound(t, run, db, sent)) return
      const pages = (run.steps.walked as unknown[]).map(() => 'GET /books 200')
      t.strictSame(await requestLines(service, logFrom),
        ['POST /token 200', 'POST /book 201', 'GET /books 200', ...pages, 'GET /books 200', 'GET /book/:id 200', 'PUT /book/:id 200', 'DELETE /book/:id 200'].map((line) => line.replace(':id', String((run.steps.created as Book).id))),
        'one login, then each call once (the query strings are not logged)')
      t.strictSame(run.log, [], 'nothing repeated')
    })

    t.test(`${example.name}: given a token that expired, logs in again once and repeats the call`, async (t) => {
      const sentFrom = proxy.sent.length
      const logFrom = service.stdout.length
      const run = await example.run(t, url, expiredToken())
      const sent = requestsIn(proxy.sent.slice(sentFrom))
      if (!await checkRound(t, run, db, sent)) return
      t.strictSame((await requestLines(service, logFrom)).slice(0, 3), ['POST /book 401', 'POST /token 200', 'POST /book 201'],
        'the create refused 401, a login, the same create again')
      t.strictSame(sent.slice(0, 3).map(({ line }) => line), ['POST /book', 'POST /token', 'POST /book'], 'so on the wire too')
      t.not(sent[0]?.headers.get('authorization'), sent[2]?.headers.get('authorization'), 'the repeat carries the new token')
      t.match(run.log, [/^POST \/book: 401 Invalid token, logging in again$/], 'and the client says why')
    })
  }

  t.test('the committed client types are what npm run client:types makes of the service now', async (t) => {
    const committed = join(PROJECT_ROOT, CLIENT_TYPES)
    const script = (JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['client:types']!
    const output = join(temporaryDirectory(t), 'bookkeeping-api.d.ts')
    const command = script.replace(CLIENT_TYPES, output)
    t.not(command, script, `the script writes ${CLIENT_TYPES}`)
    const result = spawnSync('/bin/sh', ['-c', command], {
      cwd: PROJECT_ROOT,
      env: { PATH: `${join(PROJECT_ROOT, 'node_modules/.bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`, HOME: process.env.HOME ?? '/tmp', BOOKKEEPING_URL: service.url },
      encoding: 'utf8',
      // A bound for a hang: openapi-typescript, beside other test files on a slow machine, takes tens of seconds
      timeout: 90_000
    })
    t.equal(result.status, 0, `the generator ran\n${result.stderr}`)
    t.ok(readFileSync(output, 'utf8') === readFileSync(committed, 'utf8'),
      `${CLIENT_TYPES} is up to date (if not: npm run dev, then npm run client:types, and commit it)`)
  })
})

t.test('each example: an update and a delete with a stale If-Match are refused 412, an ApiError, and change nothing', { skip: STORE_INDEPENDENT }, async (t) => {
  const { service, proxy, url } = await setUp(t)
  const token = await service.token()
  const created = await service.request('POST', '/book', { token, body: BOOK })
  const id = (created.body as { data: Book }).data.id
  const stale = created.headers.get('etag') ?? ''
  t.equal((await service.request('PUT', `/book/${id}`, { token, body: { year: 1970 } })).status, 200, 'the book changed since its first ETag')
  for (const example of EXAMPLES_TO_RUN) {
    const sentFrom = proxy.sent.length
    const refusals = await example.writeIfMatch(t, url, id, stale)
    const refused = { status: 412, message: 'Precondition failed' }
    t.strictSame(refusals, [refused, refused], `${example.name}: each write an ApiError 412`)
    const writes = requestsIn(proxy.sent.slice(sentFrom)).filter(({ line }) => line !== 'POST /token')
    t.strictSame(writes.map(({ line, headers }) => `${line} If-Match: ${headers.get('if-match')}`),
      [`PUT /book/${id} If-Match: ${stale}`, `DELETE /book/${id} If-Match: ${stale}`], `${example.name}: with the tag on the wire`)
  }
  const book = await service.request('GET', `/book/${id}`, { token })
  t.strictSame((book.body as { data: Book }).data, { ...BOOK, id, year: 1970 }, 'the book is as it was')
})

t.test('each example: answered 429 with Retry-After, waits and goes on; gives up after 3 tries', { skip: STORE_INDEPENDENT, jobs: 4 }, async (t) => {
  // Four services at once, one per example and one for all three giving up: each wait is 5 s. Two connections per address: the
  // test holds both; once the client is refused it lets them go. (With one, a Python request
  // could still find the previous connection counted: urllib opens one per request, and the
  // service counts a connection until it has seen it close.)
  for (const example of EXAMPLES_TO_RUN) {
    t.test(example.name, async (t) => {
      const { service, proxy, db, url } = await setUp(t, { MAX_CONNECTIONS_PER_ADDRESS: '2' })
      const held = [await hold(t, service), await hold(t, service)]
      const running = example.run(t, url, freshToken())
      // The program's start comes first, which beside other test files can take many seconds
      await service.waitFor(() => service.stdout.includes('over MAX_CONNECTIONS_PER_ADDRESS'), 60_000, 'the client refused')
      for (const socket of held) socket.destroy()
      const run = await running
      const sent = requestsIn(proxy.sent)
      if (!await checkRound(t, run, db, sent)) return
      t.strictSame(sent.slice(0, 2).map(({ line }) => line), ['POST /book', 'POST /book'], 'the create sent twice')
      const lines = logLines(service, 0)
      const refused = lines.find(({ msg }) => msg.includes('over MAX_CONNECTIONS_PER_ADDRESS'))!
      const created = lines.find(({ method, url, statusCode }) => method === 'POST' && url === '/book' && statusCode === 201)
      const waited = (created?.time ?? 0) - refused.time
      t.comment(`created ${waited} ms after it was refused`)
      t.ok(waited >= 4900, `the create was repeated only after Retry-After's 5 s (${waited} ms)`)
      t.match(run.log, [/^POST \/book: 429 Too many connections from this address, waiting 5 s \(attempt 1 of 3\)$/], 'and the client says why')
    })
  }

  t.test('refused on every try, each example gives up after 3 tries, with the answer', async (t) => {
    const { service } = await setUp(t, { MAX_CONNECTIONS_PER_ADDRESS: '2' })
    await hold(t, service)
    await hold(t, service)
    await Promise.all(EXAMPLES_TO_RUN.map(async (example) => {
      const proxy = await TcpProxy.start(t, service.port)
      proxy.recordSent = true
      const started = performance.now()
      const run = await example.run(t, `http://127.0.0.1:${proxy.port}`, freshToken())
      const elapsed = Math.round(performance.now() - started)
      t.match(run.failure, /Too many connections from this address/, `${example.name}: failed with the service's answer`)
      t.strictSame(requestsIn(proxy.sent).map(({ line }) => line), ['POST /book', 'POST /book', 'POST /book'], `${example.name}: after 3 tries`)
      t.match(run.log, [/attempt 1 of 3\)$/, /attempt 2 of 3\)$/], `${example.name}: having waited twice`)
      t.ok(elapsed >= 9900, `${example.name}: 5 s each time (${elapsed} ms in all)`)
    }))
  })
})

/**
 * The export example of docs/api.md (docs/examples/export.py), run as a reader would: it reads
 * the CSV export with Python's `csv` module as it streams in, and gets every book back exactly as
 * stored, whatever its text holds; an error is the envelope's message, and a failure.
 */
t.test('the Python export example reads every book back as stored, and reports a refusal', { skip: STORE_INDEPENDENT }, async (t) => {
  const { service, db } = await setUp(t)
  const texts = ['a, b', 'say "hi"', 'line\nbreak', 'both\r\nends', 'cr\ronly', 'tab\there', '=1+2', '+SUM(A1)', '-2', '@cmd',
    '📚 עברית', ' spaced ', '"quoted"', 'back\\slash']
  await db.query(`INSERT INTO books (title, author, year)
    SELECT t.title, a.author, 1900 + t.n FROM unnest($1::text[]) WITH ORDINALITY AS t (title, n)
    JOIN unnest($1::text[]) WITH ORDINALITY AS a (author, n) ON a.n = (t.n % cardinality($1::text[])) + 1`, [texts])
  // Past 1,000 books: the export is streamed in pages
  await db.query("INSERT INTO books (title, author, year) SELECT 'Title ' || g, 'Author, ' || g, g FROM generate_series(1, 1200) g")
  const stored = (await db.query<{ id: number, title: string, author: string, year: number }>(
    'SELECT id::int, title, author, year FROM books ORDER BY id')).rows
  const url = `http://127.0.0.1:${service.port}`
  const script = join(EXAMPLES, 'export.py')

  const whole = await runProgram(t, 'python3', [script], url, {})
  t.equal(whole.failure, null, 'the export read to its end')
  t.strictSame(whole.stdout.trimEnd().split('\n').map((line) => JSON.parse(line)), stored, `every book as stored (${stored.length})`)
  t.match(whole.stderr, `export complete: ${stored.length} books`)

  const filtered = await runProgram(t, 'python3', [script], url, { BOOKKEEPING_QUERY: 'title=%22&sort=-year' })
  t.strictSame(filtered.stdout.trimEnd().split('\n').map((line) => JSON.parse(line)),
    stored.filter((book) => book.title.includes('"')).sort((a, b) => b.year - a.year || a.id - b.id), 'with the listing\'s parameters')

  const refused = await runProgram(t, 'python3', [script], url, { BOOKKEEPING_QUERY: 'limit=0' })
  t.match(refused.failure, /^exit 1/, 'a refusal fails')
  t.match(refused.stderr, 'export refused: 400 Invalid input')
})

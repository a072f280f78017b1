/**
 * Tracing on a real process (src/tracing-preload.ts, src/tracing-sdk.ts; docs/operations.md,
 * Tracing): the service started as `npm start` starts it, with OTEL_EXPORTER_OTLP_ENDPOINT
 * pointing at an OTLP/HTTP receiver this test runs, as a collector would. Over `http/json`,
 * checked in full: the server span of each request (named by its route, the HTTP attributes, an
 * incoming `traceparent` continued), a child span per statement (`db.system`, the text with its
 * placeholders), the batched read linked to every request it answered, the feed's polls and a
 * listing's later pages in spans of their own, the request's log line carrying the ids of its
 * span, and nothing secret anywhere in what was exported. Over `http/protobuf`: the spans arrive
 * and decode. With tracing off, no module of OpenTelemetry is loaded at all.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { createServer, request as httpRequest } from 'node:http'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { PASSWORD, SECRET, testEnv } from '../helper.js'
import { createDatabaseWithBooks, STORE_INDEPENDENT } from '../helpers/database.js'
import { expectStartupFailure, spawnService, startService, temporaryDirectory, type Service } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'

interface Exported { contentType: string, body: Buffer }

/** An OTLP/HTTP receiver on 127.0.0.1, a port of its own: every export it got, answered 200. */
async function receiver (t: Test): Promise<{ url: string, exports: Exported[] }> {
  const exports: Exported[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const contentType = req.headers['content-type'] ?? ''
      if (req.url === '/v1/traces') exports.push({ contentType, body: Buffer.concat(chunks) })
      res.writeHead(200, { 'content-type': contentType }).end(contentType.includes('json') ? '{}' : '')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, exports }
}

interface Span {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  links: Array<{ traceId: string, spanId: string }>
  status: { code?: number, message?: string }
}

/** The spans of OTLP/JSON exports, attributes as plain values. */
function jsonSpans (exports: Exported[]): Span[] {
  return exports.flatMap(({ body }) => (JSON.parse(body.toString()) as {
    resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Omit<Span, 'attributes'> & { attributes: Array<{ key: string, value: Record<string, unknown> }> }> }> }>
  }).resourceSpans.flatMap((resource) => resource.scopeSpans.flatMap((scope) => scope.spans.map((span) => ({
    ...span,
    parentSpanId: span.parentSpanId || undefined,
    attributes: Object.fromEntries(span.attributes.map(({ key, value }) => {
      const [kind, raw] = Object.entries(value)[0]!
      return [key, kind === 'intValue' ? Number(raw) : raw]
    }))
  })))))
}

/** The fields of one protobuf message: number, wire type, and the bytes or the varint. */
function protobufFields (buffer: Buffer): Array<{ field: number, value: Buffer | number }> {
  const fields: Array<{ field: number, value: Buffer | number }> = []
  let at = 0
  const varint = () => {
    let value = 0
    for (let shift = 0; ; shift += 7) {
      const byte = buffer[at++]!
      value += (byte & 0x7f) * 2 ** shift
      if (byte < 0x80) return value
    }
  }
  while (at < buffer.length) {
    const key = varint()
    const type = key & 7
    if (type === 0) fields.push({ field: key >>> 3, value: varint() })
    else if (type === 2) {
      const length = varint()
      fields.push({ field: key >>> 3, value: buffer.subarray(at, at + length) })
      at += length
    } else if (type === 1) at += 8
    else if (type === 5) at += 4
    else throw new Error(`wire type ${type}`)
  }
  return fields
}

/** Name, ids and kind of each span of OTLP/protobuf exports (opentelemetry/proto/trace/v1/trace.proto). */
function protobufSpans (exports: Exported[]) {
  const sub = (message: Buffer, field: number) => protobufFields(message).filter((f) => f.field === field).map((f) => f.value as Buffer)
  return exports.flatMap(({ body }) => sub(body, 1).flatMap((resourceSpans) => sub(resourceSpans, 2).flatMap((scopeSpans) => sub(scopeSpans, 2).map((span) => {
    const fields = protobufFields(span)
    const bytes = (field: number) => (fields.find((f) => f.field === field)?.value as Buffer | undefined)?.toString('hex')
    return { traceId: bytes(1), spanId: bytes(2), parentSpanId: bytes(4), name: (fields.find((f) => f.field === 5)!.value as Buffer).toString(), kind: fields.find((f) => f.field === 6)?.value }
  }))))
}

const hex = (bytes: number) => randomBytes(bytes).toString('hex')

/** A request with headers of its own, on a connection of its own; the answer's status and text. */
function send (service: Service, method: string, path: string, headers: Record<string, string>, body?: string) {
  return new Promise<{ status: number, text: string }>((resolve, reject) => {
    const req = httpRequest(`${service.url}${path}`, { method, headers, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', (chunk: string) => { text += chunk }).on('end', () => resolve({ status: res.statusCode!, text }))
    })
    req.on('error', reject).end(body)
  })
}

const SERVER = 2
/** `npm start`'s command line. */
const START: string = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')).scripts.start

t.test('http/json: request spans, statements, links, background work, log lines, and no secret', async (t) => {
  const collector = await receiver(t)
  // More books than a listing holds: GET /books streams its later pages
  const dbUrl = await createDatabaseWithBooks(t, 1600)
  const service = await startService(t, {
    ...testEnv(dbUrl),
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'bookkeeping-under-test',
    OTEL_BSP_SCHEDULE_DELAY: '100'
  })
  const token = await service.token()
  const auth = { authorization: token }
  const book = { title: `Tracing title ${hex(6)}`, author: `Tracing author ${hex(6)}`, year: 1965 }
  const key = hex(16)

  const created = { traceId: hex(16), parentId: hex(8) }
  const answer = await send(service, 'POST', '/book', {
    ...auth, 'content-type': 'application/json', 'idempotency-key': `"${key}"`, traceparent: `00-${created.traceId}-${created.parentId}-01`
  }, JSON.stringify(book))
  t.equal(answer.status, 201)
  const id = (JSON.parse(answer.text) as { data: { id: number } }).data.id

  // Reads at once: the ones that arrive while a batch is in PostgreSQL share the next
  const reads = Array.from({ length: 24 }, () => hex(16))
  await Promise.all(reads.map((traceId) => send(service, 'GET', `/book/${id}`, { ...auth, traceparent: `00-${traceId}-${hex(8)}-01` })))
  // The title searched for is in the query, which no span records
  t.equal((await send(service, 'GET', `/books?title=${encodeURIComponent(book.title)}`, auth)).status, 200)
  t.equal((await send(service, 'GET', '/books', auth)).status, 200, 'a listing of its later pages')
  // A body that is not JSON, with the password in it: a 400, whose error's message no span carries
  t.equal((await send(service, 'POST', '/token', { 'content-type': 'application/json' }, `{"username":"x","password":"${PASSWORD}"`)).status, 400)
  t.equal((await send(service, 'GET', '/book/999999999', auth)).status, 404)
  // The feed: its reader polls while it is open
  const feed = httpRequest(`${service.url}/books/changes`, { headers: auth, agent: false })
  feed.on('error', () => {}).end()

  const spans = () => jsonSpans(collector.exports)
  const named = (name: string) => spans().filter((span) => span.name === name)
  await waitUntil(() => named('GET /book/:id').filter((span) => reads.includes(span.traceId)).length === reads.length && named('changes poll').some((span) => span.parentSpanId === undefined) &&
    named('listing page').length > 0 && named('GET /books').length === 2, 20_000, 'the spans to arrive')
    .catch((err: Error) => {
      const counts = new Map<string, number>()
      for (const { name } of spans()) counts.set(name, (counts.get(name) ?? 0) + 1)
      throw new Error(`${err.message}; spans by name: ${[...counts].map(([name, count]) => `${name} ${count}`).join(', ')}`)
    })
  feed.destroy()

  t.ok(collector.exports.every(({ contentType }) => contentType === 'application/json'), 'OTLP/JSON')
  t.match(collector.exports[0]!.body.toString(), '"stringValue":"bookkeeping-under-test"', 'OTEL_SERVICE_NAME')

  const [post] = named('POST /book')
  t.match(post, {
    traceId: created.traceId,
    parentSpanId: created.parentId,
    kind: SERVER,
    attributes: { 'http.request.method': 'POST', 'http.route': '/book', 'url.path': '/book', 'url.scheme': 'http', 'network.protocol.version': '1.1', 'http.response.status_code': 201 }
  }, 'the server span continues the traceparent sent, named by its route, with the HTTP attributes')

  const childrenOf = (parent: Span) => spans().filter((span) => span.parentSpanId === parent.spanId)
  const statementsUnder = (parent: Span): Span[] => childrenOf(parent).flatMap((child) => [child, ...statementsUnder(child)])
    .filter((span) => span.attributes['db.system'] !== undefined)
  const statements = statementsUnder(post!)
  t.ok(statements.length > 0, 'the statements of the request are spans in its trace')
  for (const statement of statements) {
    t.equal(statement.traceId, created.traceId)
    t.equal(statement.attributes['db.system'], 'postgresql')
    t.equal(statement.attributes['db.system.name'], 'postgresql')
  }
  const insert = statements.find((span) => String(span.attributes['db.query.text']).includes('INSERT INTO books'))
  t.match(insert?.attributes['db.query.text'], /\$1/, 'the statement with its placeholders')

  const finds = named('books find')
  const gets = named('GET /book/:id').filter((span) => span.attributes['http.response.status_code'] === 200)
  t.strictSame(gets.map((span) => span.traceId).sort(), [...reads].sort(), 'each read continues its own traceparent')
  const linkedFrom = (get: Span) => finds.filter((find) => find.links.some((link) => link.spanId === get.spanId && link.traceId === get.traceId))
  t.strictSame(gets.filter((get) => linkedFrom(get).length !== 1).map((get) => get.spanId), [], 'each read is linked from the one batched statement that answered it')
  t.ok(finds.every((find) => statementsUnder(find).some((span) => /FROM books WHERE id = ANY\(\$1/.test(String(span.attributes['db.query.text'])))), 'each batch span holds its statement')
  t.ok(finds.some((find) => find.links.length > 1), 'a statement that answered several reads is linked to each')

  t.ok(named('changes poll').some((span) => span.parentSpanId === undefined && statementsUnder(span).length > 0), 'the feed\'s polls: traces of their own, with their statements')
  const listing = named('GET /books').find((span) => span.attributes['url.path'] === '/books' && childrenOf(span).some((child) => child.name === 'listing page'))
  t.ok(listing, 'a listing\'s later pages are spans of its request')
  t.ok(named('listing first pages').some((batch) => batch.links.some((link) => link.spanId === listing?.spanId)), 'its first page: a batched statement linked to it')
  t.ok(named('GET /books').every((span) => span.attributes['url.path'] === '/books'), 'the path without its query')

  t.match(named('POST /token').find((span) => span.attributes['http.response.status_code'] === 400), { status: { code: 0 } }, 'a 4xx: no error status, no message')
  t.ok(spans().every((span) => span.status.message === undefined || span.status.message === ''), 'no error message in any span')

  const line = service.logLines().find((line) => line.msg === 'request' && line.route === '/book' && line.method === 'POST')
  t.match(line, { trace_id: post!.traceId, span_id: post!.spanId }, 'the request\'s log line carries its trace and span ids')

  const exported = Buffer.concat(collector.exports.map(({ body }) => body)).toString()
  for (const [what, secret] of Object.entries({ token, PASSWORD, SECRET, key, title: book.title, 'title in a query': encodeURIComponent(book.title), author: book.author, 'Authorization header': 'authorization' })) {
    t.notOk(exported.toLowerCase().includes(secret.toLowerCase()), `no ${what} in what was exported`)
  }
})

t.test('http/protobuf: the spans arrive and decode, the last ones as the service stops', { skip: STORE_INDEPENDENT }, async (t) => {
  const collector = await receiver(t)
  const service = await startService(t, {
    ...testEnv(await createDatabaseWithBooks(t, 1)),
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    // Nothing leaves on its own while the test runs: the close sends it
    OTEL_BSP_SCHEDULE_DELAY: '600000'
  })
  const token = await service.token()
  const sent = { traceId: hex(16), parentId: hex(8) }
  t.equal((await send(service, 'GET', '/book/1', { authorization: token, traceparent: `00-${sent.traceId}-${sent.parentId}-01` })).status, 200)
  process.kill(service.serverPid, 'SIGTERM')
  t.strictSame(await service.waitForExit(), { code: 0, signal: null }, 'a clean stop')
  t.ok(collector.exports.every(({ contentType }) => contentType === 'application/x-protobuf'), 'OTLP/protobuf')
  t.match(protobufSpans(collector.exports).find((span) => span.name === 'GET /book/:id'), { traceId: sent.traceId, parentSpanId: sent.parentId, kind: SERVER })
  const exported = Buffer.concat(collector.exports.map(({ body }) => body)).toString('latin1')
  t.notOk(exported.includes(token) || exported.includes(PASSWORD), 'no token, no password')
})

t.test('off unless an endpoint is configured: no module of OpenTelemetry is loaded', { skip: STORE_INDEPENDENT }, async (t) => {
  // Preloaded before everything: at exit, the modules of OpenTelemetry's SDK, its
  // instrumentations and their loader hook that the process loaded. Not its API, a facade that
  // does nothing without an SDK, which prom-client loads whatever the configuration
  const probe = join(temporaryDirectory(t), 'loaded-telemetry.cjs')
  writeFileSync(probe, `process.on('exit', () => process.stderr.write('telemetry modules: ' + JSON.stringify(Object.keys(require.cache)
    .filter((file) => /node_modules\\/(@opentelemetry\\/(?!api\\/)|@fastify\\/otel\\/|import-in-the-middle\\/)/.test(file))) + '\\n'))\n`)
  const dbUrl = await createDatabaseWithBooks(t, 1)
  const run = async (env: Record<string, string>) => {
    const service = await spawnService(t, { ...testEnv(dbUrl), ...env }, `export NODE_OPTIONS='--require ${probe}'; ${START}`)
    await service.listening()
    await service.token()
    process.kill(service.serverPid, 'SIGTERM')
    await service.waitForExit()
    return { modules: JSON.parse(/telemetry modules: (.*)/.exec(service.stderr)![1]!) as string[], lines: service.logLines() }
  }
  const off = await run({})
  t.strictSame(off.modules, [], 'off: none')
  t.ok(off.lines.some((line) => line.msg === 'request'), 'its request lines')
  t.notOk(off.lines.some((line) => 'trace_id' in line || 'span_id' in line), 'off: the log lines carry no trace ids')
  const collector = await receiver(t)
  t.ok((await run({ OTEL_EXPORTER_OTLP_ENDPOINT: collector.url })).modules.some((file) => file.includes('/sdk-trace')), 'on: the probe sees them')
})

t.test('a protocol it has no exporter for, an endpoint that is no URL: the start-up fails with one line naming the variable', { skip: STORE_INDEPENDENT }, async (t) => {
  const env = testEnv(await createDatabaseWithBooks(t, 1))
  await expectStartupFailure(t, { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
    /^bookkeeping: start-up failed: tracing: OTEL_EXPORTER_OTLP_PROTOCOL="grpc" is not a protocol this service exports with; set it to http\/protobuf or http\/json$/)
  const credentials = 'user:s3cr3t-in-the-url'
  await expectStartupFailure(t, { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: `${credentials}@collector:4318` },
    /^bookkeeping: start-up failed: tracing: OTEL_EXPORTER_OTLP_ENDPOINT is not a URL; set it to the collector's OTLP\/HTTP address/, { secrets: [credentials] })
})

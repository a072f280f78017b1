/**
 * Property-based hostile traffic against one real service process (started exactly as
 * `npm start` starts it, so `npm run build` must have run). Random requests are written byte for
 * byte on fresh sockets: odd methods, request targets and HTTP versions, missing or repeated
 * headers, garbage and forged tokens, odd content types, and bodies that are deep, huge,
 * truncated, not UTF-8 or shaped like books with the wrong types. Whatever arrives, the answer
 * must be the envelope ({status, message, data}, status the HTTP status, data null on errors) with
 * a status and message docs/api.md lists, never a 5xx, never a success without a token
 * the service must accept, and the process must stay up. No request that could change a book is
 * sent with such a token, so the books table must be exactly what it was. The requests, their
 * arbitraries, the named cases and the checks of each answer: test/helpers/hostile-http/.
 */
import fc from 'fast-check'
import t from 'tap'
import { MAX_WAITING_PER_CONNECTION } from '../../src/connections.js'
import { testEnv } from '../helper.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { checkAnswer, documentedPairs } from '../helpers/hostile-http/answers.js'
import {
  bodyArb, bookishTextArb, contentTypeArb, inputRequestArb, loginTextArb, mostlyValidAuthArb, realTargetArb, requestArb
} from '../helpers/hostile-http/arbitraries.js'
import { bodyExamples, headAndHugeExamples, headerExamples, inputExamples, requestLineExamples } from '../helpers/hostile-http/examples.js'
import { makeHarmless } from '../helpers/hostile-http/harmless.js'
import { makeTokens, render, SEEDS, utf8, type HostSpec, type RequestSpec } from '../helpers/hostile-http/requests.js'
import { parseResponses, rawExchange, rawRequest } from '../helpers/raw-http.js'
import { startService } from '../helpers/service.js'
import { withTimeout } from '../helpers/wait.js'

/** How long one exchange may take; every request sent is complete, so the answer is prompt. */
const ANSWER_TIMEOUT = 4000
/** Per property; a service that is merely slow shows up as an interrupted run, not a pass. */
const PROPERTY_TIME_LIMIT = 40_000

t.test('hostile requests: always an envelope, never a 5xx, the process stays up, no book changes', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  for (const book of SEEDS) {
    const created = await service.request('POST', '/book', { token, body: book })
    t.equal(created.status, 201, `seeding ${book.title}: ${created.text}`)
  }
  const tokens = makeTokens(token)

  const db = await pgClient(t, dbUrl)
  const snapshot = async () => (await db.query('SELECT id, title, author, year FROM books ORDER BY id')).rows
  const before = await snapshot()
  t.equal(before.length, SEEDS.length, 'the seeded books are stored')
  const storedIds = before.map((row: { id: string }) => row.id)

  const documented = documentedPairs()
  t.ok([405, 413, 415].every((status) => documented.has(status)), 'the tables of docs/api.md were read')

  const histogram = new Map<number, number>()
  let sent = 0

  async function send (spec: RequestSpec) {
    const answer = await rawRequest(service.port, render(spec, tokens), { head: spec.method === 'HEAD', idleMs: ANSWER_TIMEOUT })
    sent++
    histogram.set(answer.status, (histogram.get(answer.status) ?? 0) + 1)
    checkAnswer(spec, answer, service, documented)
    // RFC 9110 section 9.3.2: a body would be read as the start of the next response
    if (spec.method === 'HEAD' && answer.body.length > 0) throw new Error(`a HEAD answered with a body: ${answer.status} ${JSON.stringify(answer.text.slice(0, 100))}`)
  }

  const stored = new Set(storedIds)
  const storedId = storedIds[0] ?? '1'
  const properties: Array<{ name: string, numRuns: number, examples: RequestSpec[], arbitrary: fc.Arbitrary<RequestSpec> }> = [
    {
      name: 'request lines: methods, targets, HTTP versions',
      numRuns: 100,
      examples: requestLineExamples(storedId),
      arbitrary: requestArb(storedIds, {
        host: fc.constant<HostSpec>('normal'),
        extra: fc.constant([]),
        body: fc.constant(null)
      })
    },
    {
      name: 'headers: Host, Authorization, Content-Type and extras on the real routes',
      numRuns: 100,
      examples: headerExamples(),
      arbitrary: requestArb(storedIds, {
        method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'HEAD'),
        target: realTargetArb(storedIds),
        targetEncoding: fc.constant<'utf8'>('utf8'),
        version: fc.constant('HTTP/1.1'),
        body: fc.option(fc.oneof(bookishTextArb, loginTextArb).map(utf8), { nil: null })
      })
    },
    {
      name: 'bodies: hostile JSON and content types on the real routes',
      numRuns: 100,
      examples: bodyExamples(storedId),
      arbitrary: requestArb(storedIds, {
        method: fc.constantFrom('POST', 'POST', 'PUT', 'PUT', 'DELETE', 'GET', 'PATCH'),
        target: realTargetArb(storedIds),
        targetEncoding: fc.constant<'utf8'>('utf8'),
        version: fc.constant('HTTP/1.1'),
        host: fc.constant<HostSpec>('normal'),
        auth: mostlyValidAuthArb,
        contentType: fc.oneof(
          { weight: 3, arbitrary: fc.constant('application/json') },
          { weight: 2, arbitrary: contentTypeArb }
        ),
        extra: fc.constant([]),
        body: bodyArb
      })
    },
    {
      name: 'input: lone surrogates, bytes not UTF-8, content codings, charsets, /docs/static/ traversal, tokens in queries',
      numRuns: 100,
      examples: inputExamples(storedId, token),
      arbitrary: inputRequestArb(storedIds, token)
    },
    {
      name: 'HEAD and huge bodies: no answer to a HEAD has a body, a body of megabytes gets its 413',
      numRuns: 50,
      examples: headAndHugeExamples(storedId),
      arbitrary: requestArb(storedIds, { method: fc.constant('HEAD') })
    },
    {
      name: 'everything at once',
      numRuns: 100,
      examples: [],
      arbitrary: requestArb(storedIds)
    }
  ]

  /**
   * Requests pipelined on one connection, then one that asks to close it: answered in order,
   * each as alone, and no more than the one in hand and those that may wait.
   */
  const CLOSING = 'GET /health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'
  async function sendPipelined (specs: RequestSpec[]) {
    const request = Buffer.concat([...specs.map((spec) => render(spec, tokens)), Buffer.from(CLOSING)])
    const { raw } = await rawExchange(service.port, request, ANSWER_TIMEOUT)
    const answers = parseResponses(raw, specs.map((spec) => spec.method === 'HEAD'))
    sent += specs.length
    if (answers.length > 1 + MAX_WAITING_PER_CONNECTION) throw new Error(`${answers.length} answers to ${specs.length} pipelined requests`)
    for (const [i, answer] of answers.entries()) {
      histogram.set(answer.status, (histogram.get(answer.status) ?? 0) + 1)
      checkAnswer(specs[i]!, answer, service, documented)
    }
  }
  await t.test('pipelined: up to 8 hostile requests on one connection', async (t) => {
    const details = await fc.check(fc.asyncProperty(fc.array(requestArb(storedIds, { body: fc.constant(null) }), { minLength: 1, maxLength: 8 }), sendPipelined), {
      numRuns: 50,
      interruptAfterTimeLimit: PROPERTY_TIME_LIMIT,
      markInterruptAsFailure: true
    })
    const failure = details.errorInstance instanceof Error ? `\n${details.errorInstance.message}` : ''
    t.notOk(details.failed, (fc.defaultReportMessage(details) ?? `${details.numRuns} runs, none failed`) + failure)
    t.equal(service.exit, null, 'the process is still running')
  })

  for (const { name, numRuns, examples, arbitrary } of properties) {
    await t.test(name, async (t) => {
      const details = await fc.check(fc.asyncProperty(arbitrary, send), {
        numRuns,
        examples: examples.map((spec): [RequestSpec] => [makeHarmless(spec, stored)]),
        interruptAfterTimeLimit: PROPERTY_TIME_LIMIT,
        markInterruptAsFailure: true
      })
      const failure = details.errorInstance instanceof Error ? `\n${details.errorInstance.message}` : ''
      t.notOk(details.failed, (fc.defaultReportMessage(details) ?? `${details.numRuns} runs, none failed`) + failure)
      t.equal(service.exit, null, 'the process is still running')
    })
  }

  t.comment(`${sent} requests; statuses: ${JSON.stringify(Object.fromEntries([...histogram].sort(([a], [b]) => a - b)))}`)
  t.equal(service.exit, null, 'the process is still running after all of them')
  for (const status of [400, 401, 404, 415]) {
    t.ok((histogram.get(status) ?? 0) > 0, `some requests were answered ${status}`)
  }

  const after = await snapshot()
  t.strictSame(after, before, 'the books table is exactly what it was')
  // Tokens went in query strings: the log holds paths only
  t.notOk(service.stdout.includes(token) || service.stderr.includes(token), 'the token is nowhere in the log')
  const list = await withTimeout(service.request('GET', '/books', { token }), 5000, 'GET /books')
  t.strictSame(list.body, {
    status: 200,
    message: 'Books retrieved successfully',
    data: before.map((row: { id: string, title: string, author: string, year: number }) => ({ ...row, id: Number(row.id) }))
  }, 'the service still answers, with the same books')
})

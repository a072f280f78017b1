/**
 * No answer to a HEAD has a body (RFC 9110 section 9.3.2): a body after the head would be read as
 * the start of the next response on the connection. Against the real process over raw sockets:
 * what Node's HTTP parser rejects (answered by the HTTP edge) and what Fastify answers (404, 401).
 */
import { connect } from 'node:net'
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService } from '../helpers/service.js'
import { withTimeout } from '../helpers/wait.js'

/** Writes `request` on one connection and reads everything until the service closes it. */
function exchange (port: number, request: Buffer): Promise<Buffer> {
  return withTimeout(new Promise((resolve) => {
    const chunks: Buffer[] = []
    const socket = connect({ port, host: '127.0.0.1' }, () => socket.write(request))
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', () => {})
    socket.once('close', () => resolve(Buffer.concat(chunks)))
  }), 10_000, 'an exchange on one connection')
}

interface Parsed { status: number, headers: Record<string, string>, body: string }

/**
 * The responses in `raw`, in order: a response to a HEAD (`heads` says which) is its head only,
 * any other has the body its Content-Length says. Whatever is left over is returned too.
 */
function parseAll (raw: Buffer, heads: boolean[]): { responses: Parsed[], rest: string } {
  const responses: Parsed[] = []
  let offset = 0
  for (const head of heads) {
    const end = raw.indexOf('\r\n\r\n', offset)
    if (end === -1) break
    const [statusLine = '', ...lines] = raw.subarray(offset, end).toString('latin1').split('\r\n')
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]))
    const length = head ? 0 : Number(headers['content-length'] ?? 0)
    offset = end + 4 + length
    responses.push({ status: Number(statusLine.split(' ')[1]), headers, body: raw.subarray(end + 4, offset).toString('utf8') })
  }
  return { responses, rest: raw.subarray(offset).toString('latin1') }
}

const NEXT = 'GET /health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'

t.test("HEAD requests Node's parser rejects are answered with a head and no body", { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const cases: Array<[string, Buffer, number]> = [
    ['a raw é in the target', Buffer.from('HEAD /\u00e9 HTTP/1.1\r\nHost: localhost\r\n\r\n', 'utf8'), 400],
    ['a header line without a colon', Buffer.from('HEAD /books HTTP/1.1\r\nHost: localhost\r\nNo colon here\r\n\r\n'), 400],
    ['20 KiB of headers', Buffer.from(`HEAD /books HTTP/1.1\r\nHost: localhost\r\nX-Filler: ${'a'.repeat(20 * 1024)}\r\n\r\n`), 431]
  ]
  for (const [name, request, status] of cases) {
    // A second request follows on the same connection: a client would read its answer next
    const raw = await exchange(service.port, Buffer.concat([request, Buffer.from(NEXT)]))
    const { responses, rest } = parseAll(raw, [true])
    t.equal(responses[0]?.status, status, `${name}: ${status}`)
    t.match(responses[0]?.headers['content-type'], /^application\/json/, `${name}: the head of the envelope`)
    t.equal(responses[0]?.headers.connection, 'close', `${name}: the connection is closed after it`)
    t.equal(rest, '', `${name}: no byte follows the head`)
  }
  t.equal(service.exit, null, 'the service is still running')
})

t.test('HEAD requests Fastify answers (404, 401) have no body, and the next response on the connection is intact', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const raw = await exchange(service.port, Buffer.from(
    'HEAD /no/such/path HTTP/1.1\r\nHost: localhost\r\n\r\n' +
    'HEAD /books HTTP/1.1\r\nHost: localhost\r\n\r\n' +
    'HEAD /books HTTP/1.1\r\nHost: localhost\r\nAuthorization: not-a-token\r\n\r\n' +
    NEXT))
  const { responses, rest } = parseAll(raw, [true, true, true, false])
  t.strictSame(responses.map(({ status }) => status), [404, 401, 401, 200], 'four answers in order')
  t.strictSame(JSON.parse(responses[3]?.body ?? 'null'), { status: 200, message: 'Service is live', data: null },
    'the GET after three HEADs reads its own envelope, not a HEAD\'s body')
  t.equal(rest, '', 'nothing else arrived')
})

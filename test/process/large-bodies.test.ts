/**
 * A client that writes a whole large body before it reads anything (RFC 9112 section 9.6): the
 * service answers 413 as soon as it knows, and must then keep reading (and discarding) until the
 * client is done, or the kernel resets the connection under the client and the answer is lost
 * (EPIPE or ECONNRESET instead of the 413). Against the real process, over real sockets.
 */
import { connect } from 'node:net'
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService } from '../helpers/service.js'
import { withTimeout } from '../helpers/wait.js'

const BODY_SIZE = 5 * 1024 * 1024
/** Enough rounds that the old close (destroy as soon as the 413 is written) failed every run. */
const ROUNDS = 15

type Framing = 'content-length' | 'chunked'

/** The request's bytes: POST /book with a 5 MB JSON body, framed by length or in 64 KiB chunks. */
function largeRequest (token: string, framing: Framing): Buffer {
  const body = Buffer.from(`{"title":"${'a'.repeat(BODY_SIZE - 40)}","author":"b","year":1}`)
  const head = `POST /book HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\nContent-Type: application/json\r\n`
  if (framing === 'content-length') return Buffer.concat([Buffer.from(`${head}Content-Length: ${body.length}\r\n\r\n`), body])
  const parts = [Buffer.from(`${head}Transfer-Encoding: chunked\r\n\r\n`)]
  for (let offset = 0; offset < body.length; offset += 65_536) {
    const chunk = body.subarray(offset, offset + 65_536)
    parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'))
  }
  parts.push(Buffer.from('0\r\n\r\n'))
  return Buffer.concat(parts)
}

/**
 * Writes `request` whole, without reading; once the kernel has taken the last byte, reads what
 * the service answered until it closes. The outcome: the bytes read, or the socket error that
 * came instead.
 */
function writeThenRead (port: number, request: Buffer): Promise<{ received: string, error: string | null }> {
  return withTimeout(new Promise((resolve) => {
    const chunks: Buffer[] = []
    let error: string | null = null
    const socket = connect({ port, host: '127.0.0.1' })
    // Paused: nothing is read while writing
    socket.pause()
    socket.on('error', (err: NodeJS.ErrnoException) => { error ??= err.code ?? err.message })
    socket.once('close', () => resolve({ received: Buffer.concat(chunks).toString('latin1'), error }))
    socket.write(request, (err) => {
      if (err) return
      socket.on('data', (chunk: Buffer) => chunks.push(chunk))
      socket.resume()
    })
  }), 20_000, 'a large request and its answer')
}

t.test('a 5 MB body written before reading always gets its 413 envelope, never a reset', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, testEnv(await createDatabase(t)))
  const token = await service.token()
  for (const framing of ['content-length', 'chunked'] as const) {
    const request = largeRequest(token, framing)
    const outcomes = new Map<string, number>()
    for (let round = 0; round < ROUNDS; round++) {
      const { received, error } = await writeThenRead(service.port, request)
      const body = received.slice(received.indexOf('\r\n\r\n') + 4)
      const outcome = received.startsWith('HTTP/1.1 413 ') && body === '{"status":413,"message":"Payload too large","data":null}'
        ? '413 envelope'
        : `${error ?? 'no error'}: ${JSON.stringify(received.slice(0, 40))}`
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1)
    }
    t.strictSame(Object.fromEntries(outcomes), { '413 envelope': ROUNDS }, `${framing}: every round read the 413 envelope`)
  }
  const books = await service.request('GET', '/books', { token })
  t.strictSame(books.body, { status: 200, message: 'Books retrieved successfully', data: [] }, 'nothing was stored')
  t.equal(service.exit, null, 'the service is still running')
})

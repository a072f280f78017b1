/**
 * The raw-socket answers of the HTTP edge: the exact bytes `endSocketWithEnvelope` writes, that
 * it always closes the socket, and which status `clientErrorHandler` picks for each parser error.
 * The socket is a fake Duplex (its client closes its side by `push(null)`); nothing listens and no database is needed.
 */
import { once } from 'node:events'
import type { Socket } from 'node:net'
import { Duplex } from 'node:stream'
import t, { type Test } from 'tap'
import { clientErrorHandler, endSocketWithEnvelope } from '../../plugins/app/http-edge.js'
import { Connections } from '../../src/connections.js'
import { METHODS } from '../../src/http.js'

/** What the answers close the sockets with; `clientErrorHandler` finds it on its `this`, the app. */
const connections = new Connections({ info () {}, warn () {} })
t.teardown(() => { connections.close() })
const app = { connections }

/** A Duplex that keeps everything handed to `write`, whether or not the stream could still take it. */
class FakeSocket extends Duplex {
  readonly written: string[] = []

  override _read () {}

  override _write (chunk: Buffer, encoding: BufferEncoding, callback: (error?: Error | null) => void) {
    callback()
  }

  override write (chunk: string, ...rest: any[]): boolean {
    this.written.push(chunk)
    return super.write(chunk, ...rest)
  }
}

/**
 * The answer is followed by our end of the connection, not by its destruction: the socket is
 * still read (lingering) until the client closes its side, and destroyed then.
 */
async function closesLingering (t: Test, socket: FakeSocket, label: string) {
  t.ok(socket.writableEnded && !socket.destroyed, `${label}: ended, still read`)
  socket.push(null)
  await once(socket, 'close')
  t.ok(socket.destroyed, `${label}: destroyed once the client closed its side`)
}

/** An ended socket: no longer writable, not destroyed yet. */
function endedSocket () {
  const socket = new FakeSocket()
  socket.end()
  return socket
}

const head = (status: string, length: number, extra = '') =>
  `HTTP/1.1 ${status}\r\n` +
  'Content-Type: application/json; charset=utf-8\r\n' +
  'X-Content-Type-Options: nosniff\r\n' +
  `Content-Length: ${length}\r\n${extra}` +
  'Connection: close\r\n\r\n'

const ANSWERS = {
  400: head('400 Bad Request', 50) + '{"status":400,"message":"Bad request","data":null}',
  405: head('405 Method Not Allowed', 57, 'Allow: GET, HEAD, POST, PUT, DELETE\r\n') + '{"status":405,"message":"Method not allowed","data":null}',
  408: head('408 Request Timeout', 54) + '{"status":408,"message":"Request timeout","data":null}',
  417: head('417 Expectation Failed', 57) + '{"status":417,"message":"Expectation failed","data":null}',
  431: head('431 Request Header Fields Too Large', 70) + '{"status":431,"message":"Request header fields too large","data":null}'
}

t.test('METHODS lists the methods the service has routes for, without OPTIONS', async (t) => {
  t.strictSame(METHODS, ['GET', 'HEAD', 'POST', 'PUT', 'DELETE'])
})

t.test('endSocketWithEnvelope writes a 405 with the given Allow header before Connection: close, byte for byte, and closes the socket lingering', async (t) => {
  const socket = new FakeSocket()
  endSocketWithEnvelope(connections, socket, 405, `Allow: ${METHODS.join(', ')}\r\n`)
  t.equal(socket.written.join(''), ANSWERS[405])
  await closesLingering(t, socket, 'the socket')
})

t.test('endSocketWithEnvelope writes a 417, 431, 408 and 400 in the envelope with their messages, byte for byte, and closes the socket lingering', async (t) => {
  for (const status of [417, 431, 408, 400] as const) {
    const socket = new FakeSocket()
    endSocketWithEnvelope(connections, socket, status)
    t.equal(socket.written.join(''), ANSWERS[status], `${status}`)
    await closesLingering(t, socket, `${status}`)
  }
})

t.test('endSocketWithEnvelope writes nothing to a socket that is no longer writable, and still closes it', async (t) => {
  const socket = endedSocket()
  endSocketWithEnvelope(connections, socket, 400)
  t.strictSame(socket.written, [])
  await closesLingering(t, socket, 'the socket')
})

t.test('clientErrorHandler answers HPE_HEADER_OVERFLOW with 431 and ERR_HTTP_REQUEST_TIMEOUT with 408, then closes the socket', async (t) => {
  for (const [code, status] of [['HPE_HEADER_OVERFLOW', 431], ['ERR_HTTP_REQUEST_TIMEOUT', 408]] as const) {
    const socket = new FakeSocket()
    clientErrorHandler.call(app, Object.assign(new Error(code), { code }), socket as unknown as Socket)
    t.equal(socket.written.join(''), ANSWERS[status], code)
    await closesLingering(t, socket, `${code}`)
  }
})

t.test('clientErrorHandler answers any other parser error, or one without a code, with 400, then closes the socket', async (t) => {
  for (const code of ['HPE_INVALID_METHOD', 'HPE_INVALID_HEADER_TOKEN', 'HPE_INVALID_CONSTANT', 'HPE_CHUNK_EXTENSIONS_OVERFLOW', 'ERR_HTTP_HEADERS_TIMEOUT', undefined]) {
    const socket = new FakeSocket()
    clientErrorHandler.call(app, Object.assign(new Error('parse error'), { code }), socket as unknown as Socket)
    t.equal(socket.written.join(''), ANSWERS[400], String(code))
    await closesLingering(t, socket, `${code}`)
  }
})

t.test('clientErrorHandler writes nothing after ECONNRESET, the client being gone', async (t) => {
  const socket = new FakeSocket()
  clientErrorHandler.call(app, Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }), socket as unknown as Socket)
  t.strictSame(socket.written, [])
})

t.test('clientErrorHandler writes nothing to a destroyed socket, whatever the error', async (t) => {
  for (const code of ['HPE_HEADER_OVERFLOW', 'ERR_HTTP_REQUEST_TIMEOUT', 'HPE_INVALID_METHOD']) {
    const socket = new FakeSocket()
    socket.destroy()
    clientErrorHandler.call(app, Object.assign(new Error(code), { code }), socket as unknown as Socket)
    t.strictSame(socket.written, [], code)
  }
})

t.test('clientErrorHandler writes nothing to a socket that is no longer writable', async (t) => {
  const socket = endedSocket()
  clientErrorHandler.call(app, Object.assign(new Error('parse error'), { code: 'HPE_INVALID_METHOD' }), socket as unknown as Socket)
  t.strictSame(socket.written, [])
  await closesLingering(t, socket, 'and still closes it')
})

t.test('endSocketWithEnvelope writes the head alone for a HEAD, with the Content-Length of the envelope', async (t) => {
  const socket = new FakeSocket()
  endSocketWithEnvelope(connections, socket, 400, '', { head: true })
  t.equal(socket.written.join(''), ANSWERS[400].slice(0, ANSWERS[400].indexOf('\r\n\r\n') + 4))
  await closesLingering(t, socket, 'the socket')
})

t.test('clientErrorHandler answers a HEAD, read from the bytes the parser saw, with the head alone', async (t) => {
  for (const [rawPacket, head] of [[Buffer.from('HEAD /\u00e9 HTTP/1.1\r\n'), true], [Buffer.from('GET /\u00e9 HTTP/1.1\r\n'), false], [Buffer.from('HEADX / HTTP/1.1\r\n'), false], [undefined, false]] as const) {
    const socket = new FakeSocket()
    clientErrorHandler.call(app, Object.assign(new Error('parse error'), { code: 'HPE_INVALID_URL', rawPacket }), socket as unknown as Socket)
    t.equal(socket.written.join('').endsWith('\r\n\r\n'), head, `${JSON.stringify(rawPacket?.toString())}: ${head ? 'no' : 'a'} body`)
    await closesLingering(t, socket, 'the socket')
  }
})

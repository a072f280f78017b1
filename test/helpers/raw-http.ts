/**
 * One HTTP exchange written byte for byte on a fresh socket and parsed without any HTTP client
 * library: for what a client library would refuse to send or would hide (no `Host`, CONNECT,
 * bad syntax, a chunked body's framing).
 */
import { connect } from 'node:net'
import { withTimeout } from './wait.js'

export interface RawResponse {
  status: number
  headers: Record<string, string>
  /** Without its chunked framing, if any */
  body: Buffer
  /** The body as UTF-8 */
  text: string
}

/** The body of a `Transfer-Encoding: chunked` response, without its framing. */
function dechunk (body: Buffer): Buffer {
  const parts: Buffer[] = []
  let offset = 0
  for (;;) {
    const lineEnd = body.indexOf('\r\n', offset)
    if (lineEnd === -1) throw new Error('truncated chunked body')
    const size = parseInt(body.subarray(offset, lineEnd).toString('latin1'), 16)
    if (Number.isNaN(size)) throw new Error('bad chunk size')
    if (size === 0) return Buffer.concat(parts)
    parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size))
    offset = lineEnd + 2 + size + 2
  }
}

/**
 * The final response in `raw` (interim 1xx answers skipped). `head`: the request was a HEAD, so
 * the response has no body whatever its headers say.
 */
function parseResponse (raw: Buffer, head = false): RawResponse {
  const shown = () => JSON.stringify(raw.subarray(0, 400).toString('latin1'))
  let offset = 0
  for (;;) {
    const headEnd = raw.indexOf('\r\n\r\n', offset)
    if (headEnd === -1) throw new Error(`no complete HTTP response, got ${raw.length} bytes: ${shown()}`)
    const [statusLine = '', ...lines] = raw.subarray(offset, headEnd).toString('latin1').split('\r\n')
    const match = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(statusLine)
    if (match === null) throw new Error(`bad status line ${JSON.stringify(statusLine)}: ${shown()}`)
    const status = Number(match[1])
    offset = headEnd + 4
    // An interim answer (100 Continue to an Expect) comes before the real one
    if (status >= 100 && status < 200) continue
    const headers: Record<string, string> = {}
    for (const line of lines) {
      const colon = line.indexOf(':')
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    let body = raw.subarray(offset)
    if (!head) {
      if (headers['transfer-encoding'] === 'chunked') body = dechunk(body)
      else if (headers['content-length'] !== undefined && Number(headers['content-length']) !== body.length) {
        throw new Error(`content-length ${headers['content-length']} but ${body.length} body bytes: ${shown()}`)
      }
    }
    return { status, headers, body, text: body.toString('utf8') }
  }
}

/**
 * The responses in `raw`, one after another, for pipelined requests (`heads[i]`: the i-th was a
 * HEAD, so its response has no body); a response cut short ends the list. Interim 1xx answers
 * are skipped. Bodies are framed by Content-Length, or chunked.
 */
export function parseResponses (raw: Buffer, heads: boolean[]): RawResponse[] {
  const responses: RawResponse[] = []
  let offset = 0
  while (responses.length < heads.length) {
    const headEnd = raw.indexOf('\r\n\r\n', offset)
    if (headEnd === -1) break
    const head = raw.subarray(offset, headEnd).toString('latin1')
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? NaN)
    if (Number.isNaN(status)) throw new Error(`bad status line at byte ${offset}: ${JSON.stringify(head.slice(0, 100))}`)
    let end = headEnd + 4
    if (status >= 200 && !heads[responses.length]) {
      const length = /\r\ncontent-length: *(\d+)/i.exec(head)?.[1]
      if (length !== undefined) end += Number(length)
      else if (/\r\ntransfer-encoding: *chunked/i.test(head)) end = raw.indexOf('\r\n0\r\n\r\n', headEnd) + 7
    }
    if (end > raw.length || end < headEnd) break
    if (status >= 200) responses.push(parseResponse(raw.subarray(offset, end), heads[responses.length]))
    offset = end
  }
  return responses
}

/**
 * Writes `request` on a fresh connection to 127.0.0.1:`port` and reads everything until the
 * server closes it: the bytes, and whether the connection was given up on after `idleMs` silent.
 */
export function rawExchange (port: number, request: string | Buffer, idleMs = 4000): Promise<{ raw: Buffer, idle: boolean }> {
  return withTimeout(new Promise((resolve) => {
    const chunks: Buffer[] = []
    // write, not end: Node's HTTP server closes a half-closed connection before a slow answer
    const socket = connect({ port, host: '127.0.0.1' }, () => { socket.write(request) })
    let idle = false
    socket.setTimeout(idleMs, () => {
      idle = true
      socket.destroy()
    })
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    // A reset once the server has answered (it destroys the socket on parser errors) is fine;
    // what counts is what arrived
    socket.on('error', () => {})
    socket.once('close', () => resolve({ raw: Buffer.concat(chunks), idle }))
  }), idleMs + 1000, `raw request ${JSON.stringify(request.toString().slice(0, 40))}`)
}

/**
 * One request by `rawExchange` (send `Connection: close` for requests the server parses), its
 * response parsed; on a connection given up on, what arrived so far.
 */
export async function rawRequest (
  port: number, request: string | Buffer, { head = false, idleMs = 4000 }: { head?: boolean, idleMs?: number } = {}
): Promise<RawResponse> {
  const { raw, idle } = await rawExchange(port, request, idleMs)
  try {
    return parseResponse(raw, head)
  } catch (err) {
    throw idle ? new Error(`(cut off after ${idleMs} ms idle) ${(err as Error).message}`) : err
  }
}

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
 * Writes `request` on a fresh connection to 127.0.0.1:`port` and reads everything until the
 * server closes it (send `Connection: close` for requests the server parses). A connection that
 * stays silent for `idleMs` is given up on, and what arrived so far is parsed.
 */
export function rawRequest (
  port: number, request: string | Buffer, { head = false, idleMs = 4000 }: { head?: boolean, idleMs?: number } = {}
): Promise<RawResponse> {
  return withTimeout(new Promise<RawResponse>((resolve, reject) => {
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
    socket.once('close', () => {
      try {
        resolve(parseResponse(Buffer.concat(chunks), head))
      } catch (err) {
        reject(idle ? new Error(`(cut off after ${idleMs} ms idle) ${(err as Error).message}`) : err)
      }
    })
  }), idleMs + 1000, `raw request ${JSON.stringify(request.toString().slice(0, 40))}`)
}

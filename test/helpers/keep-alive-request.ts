/**
 * One request on a keep-alive client's connection, for the tests that keep clients busy while
 * something fails or stops under them: the outcome is kept, never thrown, so a test can count
 * what was answered, how, when, and what failed.
 */
import { type Agent, type IncomingHttpHeaders, request as httpRequest } from 'node:http'

export interface Exchange {
  /** performance.now() when it was sent and when it ended. */
  sentAt: number
  endedAt: number
  status?: number
  headers?: IncomingHttpHeaders
  body?: string
  /** The error instead of an answer: ECONNRESET, socket hang up, timeout, ... */
  error?: string
}

/** Far longer than the service takes to answer (about 5 s at most, docs/operations.md). */
const TIMEOUT_MS = 10_000

/**
 * Sends `method` `path` to `url` through `agent`, with `token` (in Authorization), `body` as JSON
 * (an object, or a string sent as it is) and `headers` when given; gives up after `timeoutMs`.
 */
export function sendRequest (
  url: URL, agent: Agent,
  { method, path, token, body, headers = {}, timeoutMs = TIMEOUT_MS }:
  { method: string, path: string, token?: string, body?: object | string, headers?: Record<string, string>, timeoutMs?: number }
): Promise<Exchange> {
  return new Promise((resolve) => {
    const sentAt = performance.now()
    const payload = body === undefined || typeof body === 'string' ? body : JSON.stringify(body)
    const req = httpRequest({
      host: url.hostname,
      port: url.port,
      method,
      path,
      agent,
      headers: {
        ...(token === undefined ? {} : { authorization: token }),
        ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers
      }
    }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => resolve({ sentAt, endedAt: performance.now(), status: res.statusCode, headers: res.headers, body: text }))
      res.on('error', (err: NodeJS.ErrnoException) => resolve({ sentAt, endedAt: performance.now(), error: `response ${err.code ?? err.message}` }))
    })
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ sentAt, endedAt: performance.now(), error: err.code ?? err.message }))
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')))
    req.end(payload)
  })
}

/**
 * What every answer to a hostile request must be (test/process/hostile-http.test.ts): the
 * envelope, with a status and message docs/api.md lists, never a 5xx, never a success without a
 * token the service accepts, and the service still running.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { MAX_HEADER_FIELDS } from '../../../plugins/app/http-edge.js'
import { PROJECT_ROOT } from '../../../src/project-root.js'
import type { RawResponse } from '../raw-http.js'
import type { Service } from '../service.js'
import { fieldCount, isValidAuth, type RequestSpec } from './requests.js'

/** The (status, message) pairs the contract fixes for its endpoints and errors. */
const CONTRACT_PAIRS: Array<[number, string]> = [
  [200, 'Token generated successfully'], [200, 'Books retrieved successfully'],
  [200, 'Book retrieved successfully'], [200, 'Book updated successfully'],
  [200, 'Book deleted successfully'], [201, 'Book created successfully'],
  [400, 'Invalid input'], [400, 'Invalid request payload'], [401, 'Authorization token required'],
  [401, 'Invalid token'], [401, 'Invalid credentials'], [404, 'Book not found'],
  [500, 'Could not generate token']
]

/**
 * Every (status, message) pair the service may answer: the contract's, and the rows of the tables
 * of docs/api.md ("| 405 | `Method not allowed` | ... |"), which it says are complete.
 */
export function documentedPairs (): Map<number, Set<string>> {
  const api = readFileSync(join(PROJECT_ROOT, 'docs', 'api.md'), 'utf8')
  const rows = [...api.matchAll(/^\|\s*(\d{3})\s*\|\s*`([^`]+)`\s*\|/gm)]
    .map((match): [number, string] => [Number(match[1]), match[2] ?? ''])
  const pairs = new Map<number, Set<string>>()
  for (const [status, message] of [...CONTRACT_PAIRS, ...rows]) {
    pairs.set(status, (pairs.get(status) ?? new Set()).add(message))
  }
  return pairs
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value)

export function checkAnswer (spec: RequestSpec, answer: RawResponse, service: Service, documented: Map<number, Set<string>>) {
  const { status } = answer
  const head = spec.method === 'HEAD'
  const text = answer.body.toString('utf8')
  const context = `answered ${status} ${JSON.stringify(answer.headers)} ${JSON.stringify(text.slice(0, 300))}`
  if (service.exit !== null) throw new Error(`the service exited (${JSON.stringify(service.exit)}); ${context}`)
  // Versions this server does not speak: 505, whether Node's parser takes them (2.0) or not
  // (1.2), or the 400 of what was wrong before the version was looked at (a malformed target)
  if ((spec.version === 'HTTP/2.0' || spec.version === 'HTTP/1.2') && status !== 505 && status !== 400) {
    throw new Error(`neither 505 nor 400 to ${spec.version}: ${context}`)
  }
  if (status >= 500 && !(status === 505 && !/^HTTP\/1\.[01]$/.test(spec.version))) throw new Error(`a 5xx: ${context}`)
  if (status >= 200 && status < 300 && spec.host === 'twice') throw new Error(`a success with two Host fields: ${context}`)
  if (status >= 200 && status < 300 && fieldCount(spec) > MAX_HEADER_FIELDS) throw new Error(`a success with ${fieldCount(spec)} header fields: ${context}`)
  // 304, bodiless: a GET or HEAD of a book or a listing whose If-None-Match names what it would
  // answer (docs/api.md, Preconditions), which `If-None-Match: *` does for any book that exists
  if (status === 304) {
    const conditional = spec.extra.some(([name]) => name.toLowerCase() === 'if-none-match')
    if (!((spec.method === 'GET' || spec.method === 'HEAD') && conditional && isValidAuth(spec.auth))) {
      throw new Error(`a 304 to other than a GET or HEAD with If-None-Match and a valid token: ${context}`)
    }
    if (answer.body.length !== 0 || answer.headers.etag === undefined) throw new Error(`a 304 with a body or without an ETag: ${context}`)
    return
  }
  if (!documented.has(status)) throw new Error(`a status docs/api.md does not list: ${context}`)
  if (status >= 200 && status < 300 && !isValidAuth(spec.auth) && !(spec.method === 'POST' && text.includes('"Token generated successfully"'))) {
    throw new Error(`a success without a valid token: ${context}`)
  }
  if (head) return

  if (!/^application\/json(;|$)/.test(answer.headers['content-type'] ?? '')) throw new Error(`not a JSON content type: ${context}`)
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw new Error(`the body is not JSON: ${context}`)
  }
  if (!isPlainObject(body)) throw new Error(`the body is not an object: ${context}`)
  const keys = Object.keys(body).sort()
  if (keys.join() !== 'data,message,status') throw new Error(`envelope keys are ${JSON.stringify(keys)}: ${context}`)
  if (body.status !== status) throw new Error(`envelope status ${JSON.stringify(body.status)} is not the HTTP status: ${context}`)
  if (typeof body.message !== 'string') throw new Error(`message is not a string: ${context}`)
  if (!documented.get(status)?.has(body.message)) throw new Error(`a (status, message) pair docs/api.md does not list: ${context}`)
  if (status >= 400 && body.data !== null) throw new Error(`data is not null on an error: ${context}`)
}

/**
 * Which hostile requests could change a stored book: those are never sent with a token the
 * service accepts, so the books table must end exactly as it was seeded, whatever the service
 * does with what it accepts.
 */
import { YEAR_MAX, YEAR_MIN } from '../../../src/schemas/book-limits.js'
import { isValidAuth, renderBody, type RequestSpec } from './requests.js'

const MUTATING_METHODS = new Set(['POST', 'PUT', 'DELETE', 'PATCH'])

/**
 * True when the body, decoded as the service decodes it (UTF-8, a leading BOM dropped), is
 * certainly refused as a book or as a book patch: not JSON, not an object, or a book field of
 * the wrong type or out of range. Anything else might be stored.
 */
function certainlyNotABook (body: Buffer): boolean {
  let value: unknown
  try {
    // Bytes that are not UTF-8 are refused (docs/api.md, Bodies)
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body))
  } catch (err) {
    if (err instanceof SyntaxError || err instanceof TypeError) return true
    throw err
  }
  if (!everyStringWellFormed(value)) return true
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return true
  const fields = value as Record<string, unknown>
  for (const key of ['title', 'author']) {
    if (Object.hasOwn(fields, key) && (typeof fields[key] !== 'string' || fields[key] === '')) return true
  }
  if (Object.hasOwn(fields, 'year')) {
    const year = fields.year
    if (typeof year !== 'number' || !Number.isInteger(year) || year < YEAR_MIN || year > YEAR_MAX) return true
  }
  return false
}

/** A DELETE with a valid token only ever names, literally, an id that no book has. */
function namesNoStoredBook (target: string, storedIds: Set<string>): boolean {
  const match = /^\/book\/([1-9][0-9]{0,17})$/.exec(target)
  return match !== null && !storedIds.has(match[1] ?? '')
}

/** Whether no string of a parsed JSON value, keys included, holds a lone surrogate. Bodies nest deep: no recursion. */
function everyStringWellFormed (value: unknown): boolean {
  const wellFormed = (text: string) => !/\p{Surrogate}/u.test(text.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, ''))
  const pending = [value]
  while (pending.length > 0) {
    const next = pending.pop()
    if (typeof next === 'string') {
      if (!wellFormed(next)) return false
    } else if (next !== null && typeof next === 'object') {
      for (const [key, item] of Object.entries(next)) {
        if (!wellFormed(key)) return false
        pending.push(item)
      }
    }
  }
  return true
}

/** Content codings the service certainly refuses (415): it decodes none but `identity`. */
const REFUSED_CODINGS = new Set(['gzip', 'x-foo', 'br', 'deflate', 'identity, gzip', 'gzip, identity', 'X-FOO', 'compress'])

/** A body in a coding from REFUSED_CODINGS is 415 whatever it holds. */
function certainlyRefusedCoding (spec: RequestSpec): boolean {
  return spec.body !== null && renderBody(spec.body).length > 0 &&
    spec.extra.some(([name, value]) => name.toLowerCase() === 'content-encoding' && REFUSED_CODINGS.has(value))
}

/**
 * `spec` as sent: a token the service accepts stays only where no book can change (reads, a
 * DELETE of an id no book has, a body that is certainly refused); elsewhere it is swapped for a
 * tampered one. So every book stays as seeded, whatever the service does with what it accepts.
 */
export function makeHarmless (spec: RequestSpec, storedIds: Set<string>): RequestSpec {
  if (!isValidAuth(spec.auth) || !MUTATING_METHODS.has(spec.method)) return spec
  const harmless = spec.method === 'DELETE'
    ? namesNoStoredBook(spec.target, storedIds) && spec.targetEncoding === 'utf8'
    : certainlyNotABook(spec.body === null ? Buffer.alloc(0) : renderBody(spec.body)) || certainlyRefusedCoding(spec)
  return harmless ? spec : { ...spec, auth: 'tampered payload' }
}

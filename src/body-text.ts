/**
 * What the readers of a request body (plugins/app/json-body.ts for one book, the import's reader
 * for many) check alike before they read it: its coding, its charset, and, once parsed, that
 * its JSON strings are Unicode text.
 */
import { parse as parseContentType } from 'content-type'

declare global {
  interface String {
    /** Node 20 has it (ES2024); the compiler's target library is ES2022. */
    isWellFormed (): boolean
  }
}

/**
 * Whether `Content-Encoding` names no coding but `identity` (RFC 9110 section 8.4): the service
 * decodes none, and reading a coded body as JSON would be reading something else. Empty list
 * elements are allowed by the list syntax and name nothing.
 */
export function isIdentityCoding (header: string | undefined): boolean {
  if (header === undefined) return true
  return header.split(',').every((coding) => {
    const name = coding.trim().toLowerCase()
    return name === '' || name === 'identity'
  })
}

/**
 * Whether the `charset` parameter of `Content-Type`, if any, names UTF-8: by the labels of the
 * Encoding Standard (`utf-8`, `utf8`, `unicode-1-1-utf-8`, ..., any case, quoted or not), as
 * TextDecoder knows them. JSON is UTF-8 (RFC 8259 section 8.1); a body said to be in another
 * charset would be read as something it is not.
 */
export function isUtf8Charset (header: string | undefined): boolean {
  if (header === undefined) return true
  return isUtf8Label(parseContentType(header).parameters.charset)
}

/** Whether a `charset` parameter, if any, is a label of UTF-8 (see `isUtf8Charset`). */
export function isUtf8Label (charset: string | undefined): boolean {
  if (charset === undefined || charset.toLowerCase() === 'utf-8') return true
  try {
    return new TextDecoder(charset).encoding === 'utf-8'
  } catch {
    // Not a label of any encoding
    return false
  }
}

/** Whether every string of a parsed JSON value, keys included, is well-formed. No recursion: a body may nest deep. */
export function isWellFormedJson (value: unknown): boolean {
  const pending: unknown[] = [value]
  while (pending.length > 0) {
    const next = pending.pop()
    if (typeof next === 'string') {
      if (!next.isWellFormed()) return false
    } else if (Array.isArray(next)) {
      for (const item of next) pending.push(item)
    } else if (typeof next === 'object' && next !== null) {
      for (const [key, item] of Object.entries(next)) {
        if (!key.isWellFormed()) return false
        pending.push(item)
      }
    }
  }
  return true
}

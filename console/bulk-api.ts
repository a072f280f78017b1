/**
 * The bulk calls: a file of books sent to `POST /books` (and to its dry run, for the lines
 * refused), and the list exported as CSV by `GET /books` with `Accept: text/csv`.
 *
 * The upload goes through XMLHttpRequest, not fetch: fetch tells nothing of a request body's
 * progress, and the page shows a progress bar while a file of a hundred megabytes goes up. The
 * token and signing in again are those of every book call (`withToken`, api.ts).
 */
import { ApiFailure, failureOfAnswer, fetchOrFail, withToken, type Answer } from './api.js'

/** The media types a file of books is sent as, by its name (or, without a known ending, its type). */
const IMPORT_TYPES: Record<string, string> = {
  csv: 'text/csv',
  ndjson: 'application/x-ndjson',
  jsonl: 'application/x-ndjson'
}

/** The Content-Type of `file` for `POST /books`, or null when it is neither CSV nor NDJSON. */
export function importType (file: File): string | null {
  const ending = /\.([a-z]+)$/i.exec(file.name)?.[1]?.toLowerCase()
  if (ending !== undefined && ending in IMPORT_TYPES) return IMPORT_TYPES[ending]!
  return Object.values(IMPORT_TYPES).includes(file.type) ? file.type : null
}

/** Bytes of the body sent so far, of `total` (null when the browser cannot tell). */
export type UploadProgress = (sent: number, total: number | null) => void

/** A problem the dry run found: the line it starts on, the book's position (null for the header or the syntax), why. */
interface ImportProblem { line: number, book: number | null, error: string }

/** What `POST /books?dry_run=true` says of a file: nothing of it is stored. */
export interface ImportReport {
  books: number
  valid: boolean
  /** The first problems found (the service gives at most 100) */
  problems: ImportProblem[]
  /** Every problem found */
  problem_count: number
}

interface UploadOptions { type: string, progress: UploadProgress, signal: AbortSignal }

/**
 * `POST /books` with `Prefer: return=minimal`: all the books of the file are stored, or none.
 * Refused (a 4xx, a 503) or cut off, it throws the ApiFailure; a 400 is an invalid file, whose
 * lines refused `checkImport` reads.
 */
export async function importBooks (file: File, options: UploadOptions): Promise<Answer<{ count: number }>> {
  const response = await withToken((token) => upload('/books', file, token, options, { Prefer: 'return=minimal' }))
  if (response.status !== 201) throw await failureOfAnswer(response)
  return await response.json() as Answer<{ count: number }>
}

/** `POST /books?dry_run=true`: the file read and checked, nothing stored; the report. */
export async function checkImport (file: File, options: UploadOptions): Promise<Answer<ImportReport>> {
  const response = await withToken((token) => upload('/books?dry_run=true', file, token, options, {}))
  if (response.status !== 200) throw await failureOfAnswer(response)
  return await response.json() as Answer<ImportReport>
}

/**
 * One upload of `file` with XMLHttpRequest, its answer as a fetch `Response` (read as text: an
 * import's answer is a small envelope). No answer at all is an ApiFailure with status 0, as for
 * fetch; `signal` stops the upload (an AbortError).
 */
function upload (path: string, file: File, token: string, { type, progress, signal }: UploadOptions,
  headers: Record<string, string>): Promise<Response> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(new DOMException('The upload was stopped', 'AbortError'))
      return
    }
    const request = new XMLHttpRequest()
    request.open('POST', path)
    request.setRequestHeader('Authorization', token)
    request.setRequestHeader('Content-Type', type)
    request.setRequestHeader('Accept', 'application/json')
    for (const [name, value] of Object.entries(headers)) request.setRequestHeader(name, value)
    request.upload.addEventListener('progress', (event) => progress(event.loaded, event.lengthComputable ? event.total : null))
    request.addEventListener('load', () => {
      const body = request.status === 204 ? null : request.responseText
      resolve(new Response(body, { status: request.status, statusText: request.statusText, headers: headersOf(request) }))
    })
    request.addEventListener('error', () => reject(new ApiFailure(0, 'No answer from the service', null, null)))
    request.addEventListener('abort', () => reject(new DOMException('The upload was stopped', 'AbortError')))
    signal.addEventListener('abort', () => request.abort(), { once: true })
    progress(0, file.size)
    request.send(file)
  })
}

/** The answer's headers, as XMLHttpRequest gives them (`name: value` lines). */
function headersOf (request: XMLHttpRequest): Headers {
  const headers = new Headers()
  for (const line of request.getAllResponseHeaders().split('\r\n')) {
    const colon = line.indexOf(':')
    if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim())
  }
  return headers
}

/** The query of `GET /books` for an export: the list's order and filters, no limit, no cursor. */
export type ExportQuery = Record<string, string>

/**
 * `GET /books` with `Accept: text/csv`: the whole listing for `query`, the bytes as the service
 * wrote them. An answer cut off (the service or the network failed half-way) is a failure, never
 * a file.
 */
export async function exportCsv (query: ExportQuery): Promise<Blob> {
  const response = await withToken((token) => fetchOrFail(new Request(`/books?${new URLSearchParams(query).toString()}`, {
    headers: { Accept: 'text/csv', Authorization: token }
  })))
  if (!response.ok) throw await failureOfAnswer(response)
  try {
    return await response.blob()
  } catch {
    throw new ApiFailure(0, 'The export could not be read to its end', response.headers.get('X-Request-Id'), null)
  }
}

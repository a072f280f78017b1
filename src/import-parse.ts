/**
 * The body of an import (POST /books) read as it arrives, never held whole: CSV, NDJSON or a
 * JSON array, each book checked as POST /book checks one, given in input order as a book or a
 * problem with its line. The formats' own rules are in import-csv.ts, import-ndjson.ts and
 * import-json.ts; the rules every import shares (the bounds, the book count) are here.
 */
import { parse as parseContentType } from 'content-type'
import { isUtf8Label } from './body-text.js'
import { readCsv } from './import-csv.js'
import { readJson } from './import-json.js'
import { readNdjson } from './import-ndjson.js'
import type { ImportItem } from './import-items.js'

export type { ImportItem, ImportProblem } from './import-items.js'

export type ImportFormat = 'csv' | 'ndjson' | 'json'

export interface ImportBounds { maxBytes: number, maxBooks: number }

/** More bytes or more books than an import may hold. */
export class ImportTooLarge extends Error {
  override readonly name = 'ImportTooLarge'
  readonly statusCode = 413
  constructor (what: 'bytes' | 'books', bound: number) {
    super(`the import's ${what} are over the bound of ${bound}`)
  }
}

/**
 * The books and problems of an import body, in input order, in batches (those of a chunk of the
 * body). Throws ImportTooLarge as soon as the body goes over `maxBytes` (before reading what goes
 * over) or its books over `maxBooks`. Ends after a fatal problem, whatever the body still holds
 * (the caller may stop reading it).
 *
 * Batches, not items: a caller that takes a batch at once lets its books die young; an await per
 * item would keep a chunk's books alive long enough for the collector to move them into its old
 * generation, which grows by tens of MB between two of its collections.
 */
export async function * readImport (body: AsyncIterable<Buffer>, format: ImportFormat, bounds: ImportBounds): AsyncGenerator<ImportItem[]> {
  for await (const items of READERS[format](bounded(body, bounds.maxBytes))) {
    // The places only grow: the batch's last is its largest
    if (lastPlace(items) > bounds.maxBooks) throw new ImportTooLarge('books', bounds.maxBooks)
    if (items.length > 0) yield items
  }
}

/** The place among the input's books of the last item that is one book's, or 0. */
function lastPlace (items: ImportItem[]): number {
  for (let at = items.length - 1; at >= 0; at--) {
    const item = items[at]!
    const place = item.kind === 'book' ? item.index : item.problem.book
    if (place !== null) return place
  }
  return 0
}

const READERS: Record<ImportFormat, (body: AsyncIterable<Buffer>) => AsyncGenerator<ImportItem[]>> = {
  csv: readCsv,
  ndjson: readNdjson,
  json: readJson
}

async function * bounded (body: AsyncIterable<Buffer>, maxBytes: number): AsyncGenerator<Buffer> {
  let bytes = 0
  for await (const chunk of body) {
    bytes += chunk.length
    if (bytes > maxBytes) throw new ImportTooLarge('bytes', maxBytes)
    yield chunk
  }
}

const FORMATS: Record<string, ImportFormat> = {
  'text/csv': 'csv',
  'application/x-ndjson': 'ndjson',
  'application/json': 'json'
}

/**
 * The format of an import by its `Content-Type`, or null (415) for any other type, a charset
 * other than UTF-8 (by the labels of the Encoding Standard, as json-body reads them), or a CSV
 * said to have no header line (`header=absent`, RFC 7111's parameter): the header is required.
 */
export function importFormat (contentType: string | undefined): ImportFormat | null {
  if (contentType === undefined) return null
  let type: string
  let parameters: Record<string, string>
  try {
    ({ type, parameters } = parseContentType(contentType))
  } catch {
    // Not a media type at all
    return null
  }
  const format = FORMATS[type]
  if (format === undefined || !isUtf8Label(parameters.charset)) return null
  if (format === 'csv' && parameters.header !== undefined && parameters.header.toLowerCase() !== 'present') return null
  return format
}

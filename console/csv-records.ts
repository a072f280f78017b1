/**
 * The CSV of books the service exports (`GET /books` with `Accept: text/csv`) read back into
 * records: the header line, then each book with the exact text of its line, so that two exports
 * can be merged into one file whose lines are the service's own bytes.
 *
 * The service writes RFC 4180 as PostgreSQL's `COPY ... CSV` does: CRLF after each record, a
 * field in double quotes (a quote in it doubled) when it holds a comma, a quote, a CR or an LF,
 * or is empty. Anything else is not its export, and is refused rather than guessed at.
 */
import type { Book } from './book-list.js'

export interface CsvRecord {
  book: Book
  /** The record as it stands in the file, its CRLF included */
  text: string
}

export interface BooksCsv {
  /** The header line, its CRLF included */
  header: string
  records: CsvRecord[]
}

const HEADER = 'id,title,author,year\r\n'

export function readBooksCsv (text: string): BooksCsv {
  if (!text.startsWith(HEADER)) throw new Error('Not an export of books: the header line differs')
  const records: CsvRecord[] = []
  let at = HEADER.length
  while (at < text.length) {
    const start = at
    const fields: string[] = []
    for (;;) {
      const [value, next] = readField(text, at)
      fields.push(value)
      if (text.startsWith(',', next)) {
        at = next + 1
      } else if (text.startsWith('\r\n', next)) {
        at = next + 2
        break
      } else {
        throw new Error(`Not an export of books: a field ends without a comma or CRLF at character ${next}`)
      }
    }
    const [id, title, author, year] = fields
    if (fields.length !== 4 || !/^[0-9]+$/.test(id!) || !/^-?[0-9]+$/.test(year!)) {
      throw new Error(`Not an export of books: the record at character ${start}`)
    }
    records.push({ book: { id: Number(id), title: title!, author: author!, year: Number(year) }, text: text.slice(start, at) })
  }
  return { header: HEADER, records }
}

/** The field at `at`, quoted or not, and where it ends. */
function readField (text: string, at: number): [string, number] {
  if (text[at] !== '"') {
    let end = at
    while (end < text.length && text[end] !== ',' && text[end] !== '\r') end++
    return [text.slice(at, end), end]
  }
  let value = ''
  let from = at + 1
  for (;;) {
    const quote = text.indexOf('"', from)
    if (quote === -1) throw new Error('Not an export of books: a quote never closed')
    value += text.slice(from, quote)
    if (text[quote + 1] !== '"') return [value, quote + 1]
    value += '"'
    from = quote + 2
  }
}

/**
 * An import body as CSV (RFC 4180, strict): csv-parse without any of its relax options, fed the
 * body chunk by chunk as it arrives. A header line naming `title`, `author` and `year` in any
 * order, and perhaps `id` (ignored); CRLF or LF line ends, the last one optional; a UTF-8 BOM at
 * the very start skipped.
 *
 * What ends the reading (fatal: where the records end can no longer be known, or the header is
 * not one this reader can map): a header that is missing or names other, duplicate or too few
 * columns; a quote in a field that does not start with one, text after a closing quote, a quote
 * never closed; a record over RECORD_MAX_BYTES; bytes that are not UTF-8. What is one problem,
 * the reading going on: a record with another number of fields than the header (a book), a
 * blank line (not a book), a book that fails validation.
 *
 * A lone CR outside quotes is not a line end (only CRLF and LF are): it stays in its field.
 */
import { Parser, type CsvError } from 'csv-parse'
import { checkBook } from './import-book.js'
import type { ImportItem, ImportProblem } from './import-items.js'
import { Utf8Bytes } from './import-utf8.js'

/** The largest record, as POST /book's body limit (64 KiB) bounds one book. */
const RECORD_MAX_BYTES = 64 * 1024

const BOOK_COLUMNS = ['title', 'author', 'year'] as const
const IGNORED_COLUMNS = new Set(['id'])
const YEAR_TEXT = /^-?[0-9]+$/
const LF = 0x0a

const FATAL_TEXTS: Record<string, string> = {
  INVALID_OPENING_QUOTE: 'a quote inside a field that does not start with one',
  CSV_INVALID_CLOSING_QUOTE: 'text after a closing quote',
  CSV_QUOTE_NOT_CLOSED: 'a quote that is never closed',
  CSV_MAX_RECORD_SIZE: `a record over ${RECORD_MAX_BYTES / 1024} KiB`
}

/** Where title, author and year are in a record, by the header. */
interface ColumnPlaces { title: number, author: number, year: number }

/** A record csv-parse skipped for its number of fields, and how many records it had given before. */
interface SkippedRecord { record: string[], recordsBefore: number }

/** The items of a CSV body, in batches: those each chunk completes. */
export async function * readCsv (body: AsyncIterable<Buffer>): AsyncGenerator<ImportItem[]> {
  const feed = new CsvFeed()
  const utf8 = new Utf8Bytes()
  for await (const chunk of body) {
    const { bytes, bad } = utf8.take(chunk)
    const items = feed.write(bytes)
    if (bad && !feed.ended) items.push(...await feed.end({ line: utf8.line, book: null, error: 'bytes that are not UTF-8' }))
    yield items
    if (bad || feed.ended) return
  }
  if (utf8.cutOff()) yield await feed.end({ line: utf8.line, book: null, error: 'bytes that are not UTF-8 (a character cut off)' })
  else yield await feed.end()
}

/**
 * csv-parse, fed whole lines: the bytes after the last line end wait for the next chunk (up to
 * RECORD_MAX_BYTES of them, then they go on), so that where the body stops being readable,
 * every record complete before that line is given, whatever the chunks were. (csv-parse keeps
 * the last few bytes it was given until it sees what follows them.)
 */
class CsvFeed {
  readonly #records = new CsvRecords()
  readonly #skipped: SkippedRecord[] = []
  #fatal: CsvError | undefined
  readonly #parser: Parser
  #waiting: Buffer[] = []
  #waitingBytes = 0
  /** Whether csv-parse was given part of a line: ending it now would end that line's record. */
  #partLineFed = false

  constructor () {
    const parser = this.#parser = new Parser({
      bom: true,
      record_delimiter: ['\r\n', '\n'],
      max_record_size: RECORD_MAX_BYTES,
      // A record with another number of fields is reported and skipped; any other error ends
      // the reading: thrown from here, csv-parse stops and returns it
      skip_records_with_error: true,
      on_skip: (error) => {
        if (error?.code === 'CSV_RECORD_INCONSISTENT_FIELDS_LENGTH') {
          this.#skipped.push({ record: (error as unknown as { record: string[] }).record, recordsBefore: parser.info.records })
          return undefined
        }
        this.#fatal = error
        throw error
      }
    })
    parser.on('error', () => {
      // Each error is the one on_skip kept in #fatal, reported from there
    })
  }

  /** Whether a fatal problem was given: nothing more is read. */
  get ended (): boolean {
    return this.#records.ended
  }

  /** The items these bytes complete. */
  write (bytes: Buffer): ImportItem[] {
    const cut = bytes.lastIndexOf(LF) + 1
    if (cut === 0) {
      this.#wait(bytes)
      if (this.#waitingBytes <= RECORD_MAX_BYTES) return []
      this.#feedWaiting()
      this.#partLineFed = true
    } else {
      this.#feedWaiting()
      this.#parser.write(bytes.subarray(0, cut))
      this.#partLineFed = false
      if (cut < bytes.length) this.#wait(bytes.subarray(cut))
    }
    return this.#items()
  }

  /**
   * The items left at the body's end, or where it stops being readable (`stop`, then the last
   * item): the records complete before the line it is on.
   */
  async end (stop?: ImportProblem): Promise<ImportItem[]> {
    if (stop === undefined) this.#feedWaiting()
    else if (this.#partLineFed) return [...this.#items(), fatalItem(stop)]
    await new Promise<void>((resolve) => {
      this.#parser.once('finish', resolve)
      this.#parser.once('error', () => resolve())
      this.#parser.end()
    })
    if (stop !== undefined && this.#fatal?.code === 'CSV_QUOTE_NOT_CLOSED') {
      // Only ended where it stopped being readable: its quote might have closed further on
      this.#fatal = undefined
    }
    const items = this.#items()
    if (this.#records.ended) return items
    if (stop !== undefined) items.push(fatalItem(stop))
    else if (!this.#records.hasHeader) items.push(this.#records.fatal('no header line'))
    return items
  }

  #items (): ImportItem[] {
    const items = this.#records.drain(this.#parser, this.#skipped)
    if (this.#fatal !== undefined && !this.#records.ended) {
      items.push(this.#records.fatal(FATAL_TEXTS[this.#fatal.code] ?? this.#fatal.message))
    }
    return items
  }

  #wait (bytes: Buffer): void {
    this.#waiting.push(bytes)
    this.#waitingBytes += bytes.length
  }

  #feedWaiting (): void {
    for (const bytes of this.#waiting) this.#parser.write(bytes)
    this.#waiting = []
    this.#waitingBytes = 0
  }
}

function fatalItem (problem: ImportProblem): ImportItem {
  return { kind: 'problem', problem, fatal: true }
}

/** What the records read so far say: the header's places, the line the next record starts on, the books counted. */
class CsvRecords {
  #places: ColumnPlaces | undefined
  /** Whether a fatal problem was given: nothing more is read. */
  ended = false
  line = 1
  index = 0
  #records = 0
  #columns = 0

  get hasHeader (): boolean {
    return this.#places !== undefined
  }

  fatal (error: string): ImportItem {
    this.ended = true
    return { kind: 'problem', problem: { line: this.line, book: null, error }, fatal: true }
  }

  /** The records and skipped records csv-parse gave since the last drain, as items in their order. */
  drain (parser: Parser, skipped: SkippedRecord[]): ImportItem[] {
    const items: ImportItem[] = []
    let record: string[] | null
    let next = 0
    while (!this.ended && (record = parser.read() as string[] | null) !== null) {
      while (next < skipped.length && skipped[next]!.recordsBefore <= this.#records) {
        items.push(this.#skippedItem(skipped[next++]!.record))
      }
      this.#records++
      const item = this.#item(record)
      if (item !== undefined) items.push(item)
    }
    while (!this.ended && next < skipped.length) items.push(this.#skippedItem(skipped[next++]!.record))
    skipped.length = 0
    return items
  }

  #item (record: string[]): ImportItem | undefined {
    const line = this.line
    this.line += 1 + lineFeedsIn(record)
    if (this.#places === undefined) {
      const places = columnPlaces(record)
      if (typeof places === 'string') {
        this.line = line
        return this.fatal(places)
      }
      this.#places = places
      this.#columns = record.length
      return undefined
    }
    const index = ++this.index
    const year = record[this.#places.year]!
    const check = checkBook({
      title: record[this.#places.title],
      author: record[this.#places.author],
      year: YEAR_TEXT.test(year) ? Number(year) : year
    })
    if (check.error !== undefined) return { kind: 'problem', problem: { line, book: index, error: check.error }, fatal: false }
    return { kind: 'book', line, index, book: check.book }
  }

  #skippedItem (record: string[]): ImportItem {
    const line = this.line
    this.line += 1 + lineFeedsIn(record)
    if (record.length === 1 && record[0] === '') {
      return { kind: 'problem', problem: { line, book: null, error: 'blank line' }, fatal: false }
    }
    return {
      kind: 'problem',
      problem: { line, book: ++this.index, error: `${record.length} fields where the header has ${this.#columns}` },
      fatal: false
    }
  }
}

/** The places of the book's fields by the header, or why the header is refused. */
function columnPlaces (header: string[]): ColumnPlaces | string {
  if (header.length === 1 && header[0] === '') return 'no header line (the first line is blank)'
  const seen = new Map<string, number>()
  for (const [place, name] of header.entries()) {
    if (seen.has(name)) return `header: column ${JSON.stringify(name)} appears twice`
    if (!IGNORED_COLUMNS.has(name) && !(BOOK_COLUMNS as readonly string[]).includes(name)) {
      return `header: unknown column ${JSON.stringify(name)} (columns: title, author, year, and id ignored)`
    }
    seen.set(name, place)
  }
  const missing = BOOK_COLUMNS.filter((name) => !seen.has(name))
  if (missing.length > 0) return `header: no column ${missing.map((name) => JSON.stringify(name)).join(', ')}`
  return { title: seen.get('title')!, author: seen.get('author')!, year: seen.get('year')! }
}

/** Line feeds inside a record's (quoted) fields: each starts another physical line. */
function lineFeedsIn (record: string[]): number {
  let count = 0
  for (const field of record) {
    let at = field.indexOf('\n')
    while (at !== -1) {
      count++
      at = field.indexOf('\n', at + 1)
    }
  }
  return count
}

/**
 * An import body as NDJSON: one JSON object per line, LF or CRLF line ends, the last one
 * optional. Each line is its own problem or book: a blank line (not a book), a line that is not
 * JSON, or a book that POST /book would refuse; the reading goes on after each. It ends at bytes
 * that are not UTF-8, and skips the rest of a line over LINE_MAX_BYTES (one problem).
 */
import { checkJsonBook } from './import-book.js'
import type { ImportItem } from './import-items.js'
import { Utf8Bytes } from './import-utf8.js'

/** The longest line, as POST /book's body limit (64 KiB) bounds one book. */
const LINE_MAX_BYTES = 64 * 1024

/** The items of an NDJSON body, in batches: those each chunk completes. */
export async function * readNdjson (body: AsyncIterable<Buffer>): AsyncGenerator<ImportItem[]> {
  const utf8 = new Utf8Bytes()
  const lines = new NdjsonLines()
  for await (const chunk of body) {
    const { bytes, bad } = utf8.take(chunk)
    const items = lines.read(bytes.toString('utf8'), false)
    if (bad) items.push(notUtf8(utf8.line, 'bytes that are not UTF-8'))
    yield items
    if (bad) return
  }
  if (utf8.cutOff()) yield [notUtf8(utf8.line, 'bytes that are not UTF-8 (a character cut off)')]
  else yield lines.read('', true)
}

function notUtf8 (line: number, error: string): ImportItem {
  return { kind: 'problem', problem: { line, book: null, error }, fatal: true }
}

/** Whether a line is over LINE_MAX_BYTES in UTF-8 (a character takes 1 to 3 bytes per UTF-16 unit). */
function isOverLong (text: string): boolean {
  return text.length * 3 > LINE_MAX_BYTES && (text.length > LINE_MAX_BYTES || Buffer.byteLength(text) > LINE_MAX_BYTES)
}

class NdjsonLines {
  #line = 1
  #index = 0
  /** The start of a line whose end has not come yet. */
  #pending = ''
  /** Whether the body's first character is still to come (a BOM there is dropped, as POST /book drops it). */
  #atStart = true
  /** Whether the current line went over LINE_MAX_BYTES: its rest is skipped. */
  #skipping = false

  #overLong (line: number): ImportItem {
    return { kind: 'problem', problem: { line, book: ++this.#index, error: `a line over ${LINE_MAX_BYTES / 1024} KiB` }, fatal: false }
  }

  read (text: string, end: boolean): ImportItem[] {
    const items: ImportItem[] = []
    if (this.#atStart && text.length > 0) {
      this.#atStart = false
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    let from = 0
    let lf = text.indexOf('\n')
    while (lf !== -1) {
      const line = this.#pending === '' ? text.slice(from, lf) : this.#pending + text.slice(from, lf)
      this.#pending = ''
      const item = this.#lineItem(line)
      if (item !== undefined) items.push(item)
      from = lf + 1
      lf = text.indexOf('\n', from)
    }
    if (!this.#skipping) this.#pending += text.slice(from)
    if (isOverLong(this.#pending)) {
      // Reported now, its rest skipped as it comes: an endless line is never held
      this.#pending = ''
      this.#skipping = true
      items.push(this.#overLong(this.#line))
    }
    if (end && (this.#pending !== '' || this.#skipping)) {
      const line = this.#pending
      this.#pending = ''
      const item = this.#lineItem(line)
      if (item !== undefined) items.push(item)
    }
    return items
  }

  #lineItem (text: string): ImportItem | undefined {
    const line = this.#line++
    if (this.#skipping) {
      this.#skipping = false
      return undefined
    }
    if (isOverLong(text)) return this.#overLong(line)
    const json = text.endsWith('\r') ? text.slice(0, -1) : text
    if (json.trim() === '') {
      return { kind: 'problem', problem: { line, book: null, error: 'blank line' }, fatal: false }
    }
    const index = ++this.#index
    let value: unknown
    try {
      value = JSON.parse(json)
    } catch {
      return { kind: 'problem', problem: { line, book: index, error: 'not JSON' }, fatal: false }
    }
    const check = checkJsonBook(value, json)
    if (check.error !== undefined) return { kind: 'problem', problem: { line, book: index, error: check.error }, fatal: false }
    return { kind: 'book', line, index, book: check.book }
  }
}

/**
 * The books of one import between its body and its answer: a file that nobody else can open (it
 * is unlinked as soon as it is open, so nothing is left behind whatever ends the process), in
 * PostgreSQL's COPY text format, one line per book: `n\ttitle\tauthor\tyear\n`, `n` its 1-based
 * place in the input. The body is written to it as it arrives, so a slow client never holds a
 * transaction; the transaction reads it back in chunks for COPY, and the answer reads it once
 * more, in input order, beside the ids the books were given.
 */
import { randomBytes } from 'node:crypto'
import { open, unlink, type FileHandle } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { BookCreate } from './schemas/book.js'

/** One spooled book: its place in the input and its fields. */
export interface SpooledBook extends BookCreate {
  n: number
}

/** What is written at once: a write per book would cost a system call each. */
const WRITE_BYTES = 256 * 1024
/** What is read at once. */
const READ_BYTES = 1024 * 1024
const LF = 0x0a

const ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' }
const UNESCAPES: Record<string, string> = { '\\': '\\', t: '\t', n: '\n', r: '\r' }

/** A text as a field of COPY's text format: its backslashes, tabs, LFs and CRs escaped (NUL cannot be stored). */
function copyField (text: string): string {
  return text.replace(/[\\\t\n\r]/g, (character) => ESCAPES[character]!)
}

/** A field as COPY's text format writes it (and as `copyField` wrote it), back as the text. */
function textOf (field: string): string {
  return field.includes('\\') ? field.replace(/\\(.)/g, (_, character: string) => UNESCAPES[character] ?? character) : field
}

/** One line of the spool (without its LF) as the book it holds. */
export function spooledBook (line: string): SpooledBook {
  const [n, title, author, year] = line.split('\t')
  return { n: Number(n), title: textOf(title!), author: textOf(author!), year: Number(year) }
}

export class ImportSpool {
  /** Books written so far. */
  count = 0
  #pending: string[] = []
  #pendingBytes = 0
  #written = 0
  #closed = false

  private constructor (readonly file: FileHandle) {}

  /** A new, empty spool in the system's temporary directory, already unlinked. */
  static async open (): Promise<ImportSpool> {
    const path = join(tmpdir(), `bookkeeping-import-${randomBytes(12).toString('hex')}`)
    // `wx`: created here, never an existing file; readable back through the same descriptor
    const file = await open(path, 'wx+', 0o600)
    try {
      await unlink(path)
    } catch (err) {
      await file.close()
      throw err
    }
    return new ImportSpool(file)
  }

  /** Adds a book after the others; the file is written once enough has gathered. */
  async write ({ title, author, year }: BookCreate): Promise<void> {
    const line = `${++this.count}\t${copyField(title)}\t${copyField(author)}\t${year}\n`
    this.#pending.push(line)
    this.#pendingBytes += line.length
    if (this.#pendingBytes >= WRITE_BYTES) await this.flush()
  }

  /** Writes what is gathered; every book written is then in the file. */
  async flush (): Promise<void> {
    if (this.#pending.length === 0) return
    const bytes = Buffer.from(this.#pending.join(''), 'utf8')
    this.#pending = []
    this.#pendingBytes = 0
    await this.file.write(bytes, 0, bytes.length, this.#written)
    this.#written += bytes.length
  }

  /**
   * The spooled lines, in input order, in batches of up to `rows` lines, each line without its
   * LF. Reads only what was flushed: call `flush` first.
   */
  async * batches (rows: number): AsyncGenerator<string[]> {
    const buffer = Buffer.alloc(READ_BYTES)
    let batch: string[] = []
    let rest = Buffer.alloc(0)
    for (let position = 0; position < this.#written;) {
      const { bytesRead } = await this.file.read(buffer, 0, Math.min(READ_BYTES, this.#written - position), position)
      position += bytesRead
      const read = rest.length === 0 ? buffer.subarray(0, bytesRead) : Buffer.concat([rest, buffer.subarray(0, bytesRead)])
      let start = 0
      // An LF is never a part of a UTF-8 sequence, nor of a field (escaped): each one ends a line
      for (let end = read.indexOf(LF, start); end !== -1; end = read.indexOf(LF, start)) {
        batch.push(read.toString('utf8', start, end))
        start = end + 1
        if (batch.length === rows) {
          yield batch
          batch = []
        }
      }
      // Copied: the buffer is read into again
      rest = Buffer.from(read.subarray(start))
    }
    if (batch.length > 0) yield batch
  }

  /** `close`, for where nobody waits on it: a descriptor that fails to close is gone anyway. */
  discard (): void {
    this.close().catch(() => {})
  }

  /** Closes the file, which then goes with its descriptor; again is nothing. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.file.close()
  }
}

/**
 * The books of one import between its body and its answer: a file that nobody else can open (it
 * is unlinked as soon as it is open, so nothing is left behind whatever ends the process), in
 * PostgreSQL's COPY text format, one line per book: `n\ttitle\tauthor\tyear\n`, `n` its 1-based
 * place in the input. The books are written to it as the body is read, so a slow client never
 * holds a transaction; the transaction reads it back in chunks of lines for COPY, as they are, and
 * the answer reads it once more, in input order, beside the ids the books were given.
 */
import { randomBytes } from 'node:crypto'
import { open, unlink, type FileHandle } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { BookCreate } from './schemas/book.js'
import { TEXT_MAX_LENGTH } from './schemas/book-limits.js'

/** One spooled book: its place in the input and its fields. */
export interface SpooledBook extends BookCreate {
  n: number
}

/** What is written at once: a write per book would cost a system call each. */
const WRITE_BYTES = 256 * 1024
/** What is read at once for the answer's lines. */
const READ_BYTES = 1024 * 1024
/**
 * The longest line the spool can hold: a place, a year, three separators and the line end
 * (40 bytes are ample), and two texts of at most TEXT_MAX_LENGTH UTF-16 units, each unit at most
 * 3 bytes of UTF-8 (a pair of them makes 4; an escaped character 2).
 */
export const LINE_MAX_BYTES = 40 + 2 * TEXT_MAX_LENGTH * 3
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

/** The lines of a chunk of whole lines (`ImportSpool.chunks`), each without its LF. */
export function linesOf (chunk: Buffer): string[] {
  return chunk.toString('utf8', 0, chunk.length - 1).split('\n')
}

/**
 * A new file in the system's temporary directory that only the descriptor answered reaches: it
 * is unlinked at once, and goes when the descriptor closes.
 */
export async function openUnlinked (prefix: string): Promise<FileHandle> {
  const path = join(tmpdir(), `${prefix}-${randomBytes(12).toString('hex')}`)
  // `wx`: created here, never an existing file; readable back through the same descriptor
  const file = await open(path, 'wx+', 0o600)
  try {
    await unlink(path)
  } catch (err) {
    await file.close()
    throw err
  }
  return file
}

export class ImportSpool {
  /** Books written so far. */
  count = 0
  #pending: Buffer[] = []
  #pendingBytes = 0
  #written = 0
  #closed = false

  private constructor (readonly file: FileHandle) {}

  /** A new, empty spool in the system's temporary directory, already unlinked. */
  static async open (): Promise<ImportSpool> {
    return new ImportSpool(await openUnlinked('bookkeeping-import'))
  }

  /** Adds books after the others; the file is written once enough has gathered. */
  async write (books: BookCreate[]): Promise<void> {
    let lines = ''
    for (const { title, author, year } of books) {
      lines += `${++this.count}\t${copyField(title)}\t${copyField(author)}\t${year}\n`
    }
    // Bytes outside the heap at once: lines kept as strings until the write would outlive
    // the collector's young generation, and be copied into the old one
    const bytes = Buffer.from(lines, 'utf8')
    this.#pending.push(bytes)
    this.#pendingBytes += bytes.length
    if (this.#pendingBytes >= WRITE_BYTES) await this.flush()
  }

  /** Writes what is gathered; every book written is then in the file. */
  async flush (): Promise<void> {
    if (this.#pending.length === 0) return
    const bytes = this.#pending.length === 1 ? this.#pending[0]! : Buffer.concat(this.#pending, this.#pendingBytes)
    this.#pending = []
    this.#pendingBytes = 0
    await this.file.write(bytes, 0, bytes.length, this.#written)
    this.#written += bytes.length
  }

  /**
   * The spool's bytes from its start, in chunks of whole lines, each of up to `bytes` (at least
   * LINE_MAX_BYTES). Reads only what was flushed: call `flush` first.
   */
  async * chunks (bytes: number): AsyncGenerator<Buffer> {
    if (bytes < LINE_MAX_BYTES) throw new RangeError(`chunks of ${bytes} bytes may not hold a line (up to ${LINE_MAX_BYTES})`)
    for (let position = 0; position < this.#written;) {
      // A buffer per chunk: the reader may hold on to one it was given
      const buffer = Buffer.allocUnsafe(Math.min(bytes, this.#written - position))
      const { bytesRead } = await this.file.read(buffer, 0, buffer.length, position)
      // An LF is never a part of a UTF-8 sequence, nor of a field (escaped): each one ends a line
      const end = bytesRead === 0 ? 0 : buffer.lastIndexOf(LF, bytesRead - 1) + 1
      if (end === 0) throw new Error(`the import spool has no line end within ${bytesRead} bytes at ${position}`)
      position += end
      yield buffer.subarray(0, end)
    }
  }

  /**
   * The spooled lines, in input order, in batches of up to `rows` lines, each line without its
   * LF. Reads only what was flushed: call `flush` first.
   */
  async * batches (rows: number): AsyncGenerator<string[]> {
    let batch: string[] = []
    for await (const chunk of this.chunks(READ_BYTES)) {
      for (const line of linesOf(chunk)) {
        batch.push(line)
        if (batch.length === rows) {
          yield batch
          batch = []
        }
      }
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

/**
 * A page of books as `COPY (...) TO STDOUT CSV` writes them, as a query of node-postgres, on any
 * connection of the pool, pipelining included (where node-postgres refuses pg-copy-streams'
 * streams). node-postgres hands each CopyData message of the active query to its
 * `handleCopyData`, which its own `Query` leaves empty; this one keeps the rows. Everything else
 * (the callback, errors, the read timeout) is node-postgres's own handling of a query.
 * test/app/copy-out.test.ts fails on a release of node-postgres that stops calling it.
 *
 * PostgreSQL sends a COPY's output one row per CopyData message (the protocol's rule), each
 * ended by LF, whatever LFs its quoted fields hold: each row's end is written as CRLF here
 * (RFC 4180), at no cost beyond the copy of its bytes. The rows stay bytes, sent as they are:
 * as text they would be decoded from UTF-8 here only to be encoded again for the socket.
 */
import pg from 'pg'

/** What node-postgres passes to `handleCopyData`: a view of its read buffer, reused once the handler returns. */
interface CopyDataMessage {
  chunk: Buffer
}

export interface CopiedRows {
  /** The rows, each ended by CRLF (UTF-8). */
  text: Buffer
  count: number
  /** The first field of the last row (the id a page ends with); null without rows. */
  last: string | null
  /** With `startsAfter`, the first field of the row read before them (not among them); else null. */
  after: string | null
}

const LF = 0x0a
const CR = 0x0d
const COMMA = 0x2c
const ROOM_PER_ROW = 64

/** A row's first field: an id, which COPY writes as digits. */
const firstField = (bytes: Buffer, start: number) => bytes.toString('latin1', start, bytes.indexOf(COMMA, start))

export class CopyOut extends pg.Query {
  /** The statement's rows, once it has ended; rejected with its failure. */
  readonly copied: Promise<CopiedRows>
  // Private (#): the instance holds node-postgres's own fields (`rows`, `text`...), which a name of ours must not shadow
  #bytes: Buffer
  #length = 0
  #count = 0
  #lastStart = 0
  #after: string | null = null
  /** Whether the next row is the one that only says where the others start after. */
  #leading: boolean
  #malformed = false

  /**
   * `startsAfter`: the first row only says where the others start after. `rows`: how many are
   * expected, for which room is taken at once (ROOM_PER_ROW each, a little more than most books
   * take), so that a page is mostly one allocation; longer rows take more.
   */
  constructor (statement: string, { startsAfter = false, rows = 1000 } = {}) {
    super(statement)
    this.#bytes = Buffer.allocUnsafe(rows * ROOM_PER_ROW)
    this.#leading = startsAfter
    this.copied = new Promise((resolve, reject) => {
      // node-postgres calls a query back once, after its end or its failure
      const self = this as unknown as { callback: (err?: Error | null) => void }
      self.callback = (err) => {
        if (err !== undefined && err !== null) reject(err)
        else if (this.#malformed) reject(new Error('a row of COPY\'s output did not end with a line end'))
        else resolve(this.#result())
      }
    })
  }

  handleCopyData ({ chunk }: CopyDataMessage): void {
    if (chunk[chunk.length - 1] !== LF) this.#malformed = true
    if (this.#leading) {
      this.#leading = false
      this.#after = firstField(chunk, 0)
      return
    }
    if (this.#length + chunk.length + 1 > this.#bytes.length) {
      const grown = Buffer.allocUnsafe(Math.max(2 * this.#bytes.length, this.#length + chunk.length + 1))
      this.#bytes.copy(grown, 0, 0, this.#length)
      this.#bytes = grown
    }
    this.#lastStart = this.#length
    // The row with its LF, which then becomes CR, LF
    this.#bytes.set(chunk, this.#length)
    this.#length += chunk.length
    this.#bytes[this.#length - 1] = CR
    this.#bytes[this.#length++] = LF
    this.#count++
  }

  #result (): CopiedRows {
    const bytes = this.#bytes
    const count = this.#count
    const rows = bytes.subarray(0, this.#length)
    return {
      // A page far smaller than its room (the last of an export, rows shorter than most) gets a
      // buffer of its own size: a listing that stops reading holds its pages, never their room
      text: 2 * rows.length < bytes.length ? Buffer.from(rows) : rows,
      count,
      last: count === 0 ? null : firstField(bytes, this.#lastStart),
      after: this.#after
    }
  }
}

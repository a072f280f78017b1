/**
 * An import's body as it arrived, in a file of its own (unlinked as soon as it is open, so
 * nothing is left behind whatever ends the process). The body is taken at the pace its client
 * sends it, not at the pace its books are read and checked: its deadline grows with what it
 * sends (src/request-deadline.ts), and a client whose books take seconds of CPU to read would
 * otherwise be held back by the reading. Held on disk, never in memory; read back in chunks once
 * it has all arrived.
 */
import type { FileHandle } from 'node:fs/promises'
import { openUnlinked } from './import-spool.js'
import { ImportTooLarge } from './import-parse.js'

/**
 * What is read back at once: the books of a chunk are read, checked and spooled before the
 * collector's next young-generation pass, so that they never reach its old generation.
 */
const READ_BYTES = 32 * 1024

export class ReceivedBody {
  #closed = false

  private constructor (readonly file: FileHandle, readonly bytes: number) {}

  /**
   * The whole of `body`, written as it comes. Throws ImportTooLarge once it goes over
   * `maxBytes` (what goes over is not written), and what the body throws (a client that left
   * before its end); the file is then closed.
   */
  static async receive (body: AsyncIterable<Buffer>, maxBytes: number): Promise<ReceivedBody> {
    const file = await openUnlinked('bookkeeping-import-body')
    let bytes = 0
    try {
      for await (const chunk of body) {
        if (bytes + chunk.length > maxBytes) throw new ImportTooLarge('bytes', maxBytes)
        await file.write(chunk, 0, chunk.length, bytes)
        bytes += chunk.length
      }
    } catch (err) {
      await file.close()
      throw err
    }
    return new ReceivedBody(file, bytes)
  }

  /** The body again, from its start, in chunks. */
  async * chunks (): AsyncGenerator<Buffer> {
    for (let position = 0; position < this.bytes;) {
      // A buffer per chunk: the reader may hold on to a chunk it was given
      const buffer = Buffer.allocUnsafe(Math.min(READ_BYTES, this.bytes - position))
      const { bytesRead } = await this.file.read(buffer, 0, buffer.length, position)
      if (bytesRead === 0) return
      position += bytesRead
      yield buffer.subarray(0, bytesRead)
    }
  }

  /** Closes the file, which then goes with its descriptor; again is nothing. */
  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.file.close()
  }

  /** `close`, for where nobody waits on it: a descriptor that fails to close is gone anyway. */
  discard (): void {
    this.close().catch(() => {})
  }
}

/**
 * The lingering close of the connections' owner (src/connections.ts): the sockets it closes so,
 * each found by its record, and the one meter that cuts off those whose client sends too much.
 *
 * Lingering close: every connection the server ends after a response (`Connection: close`: a
 * 413, a refused connection, the drain of a shutdown, HTTP/1.0) and every one the HTTP edge
 * answers on the raw socket is closed by `closeLingering`: Node's own close after such a
 * response (end, then destroy as soon as the answer is written) is what resets a client still
 * writing its body.
 */
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'

/** How long a connection the server has ended is still read, its bytes discarded. */
const LINGER_MS = 5000
/** How much of it is read at most: a client sending faster than that is cut off sooner. */
const LINGER_MAX_BYTES = 8 * 1024 * 1024
/** How often the bytes read while lingering are looked at. */
const LINGER_CHECK_MS = 100

/** What a connection's record keeps while it closes lingering. */
export interface Lingering {
  readonly socket: Duplex
  /** The `bytesRead` past which it is cut off. */
  lingerLimit: number | undefined
  lingerTimer: NodeJS.Timeout | undefined
}

function bytesRead (socket: Duplex): number {
  return (socket as Partial<Socket>).bytesRead ?? 0
}

export class LingeringClose {
  readonly #lingering = new Set<Lingering>()
  /** One meter for all lingering connections, running while there are any. */
  #meter: NodeJS.Timeout | undefined

  /**
   * Closes `record`'s socket without resetting it under a client that is still sending (RFC 9112
   * section 9.6): the answer already written goes out followed by our FIN, then what the client
   * still sends (the rest of a body too large, a request answered before it was read) is read
   * and discarded until the client closes its side, for LINGER_MS and LINGER_MAX_BYTES at most.
   * Closing at once instead would make the kernel answer those bytes with a reset, which can
   * destroy the answer before the client has read it (an EPIPE or ECONNRESET instead of the 413).
   */
  begin (record: Lingering) {
    const { socket } = record
    record.lingerLimit = bytesRead(socket) + LINGER_MAX_BYTES
    this.#lingering.add(record)
    this.#meter ??= setInterval(() => this.#measure(), LINGER_CHECK_MS).unref()
    socket.end()
    record.lingerTimer = setTimeout(() => socket.destroy(), LINGER_MS)
    socket.on('error', () => {})
    socket.once('end', () => socket.destroy())
    // No 'data' listener: it would take the socket from Node's HTTP parser, which reads on and
    // discards a body nobody reads; resuming restarts reading wherever it was paused (a body not
    // read yet), and without a listener the bytes of a socket no parser reads are dropped
    socket.resume()
  }

  /** `record`'s socket has closed: its timer stops, and the meter with the last one. */
  closed (record: Lingering) {
    clearTimeout(record.lingerTimer)
    if (this.#lingering.delete(record) && this.#lingering.size === 0) {
      clearInterval(this.#meter)
      this.#meter = undefined
    }
  }

  #measure () {
    for (const record of this.#lingering) {
      if (bytesRead(record.socket) > record.lingerLimit!) record.socket.destroy()
    }
  }
}

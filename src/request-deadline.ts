/**
 * The request timeout, kept by the app for each request rather than by Node for the whole
 * server: a request must have arrived whole REQUEST_TIMEOUT_MS after its headers, else the
 * server's `clientError` handler answers it 408 and closes the connection, as Node's own
 * `requestTimeout` would (src/http.ts turns that one off). Node offers one such timeout per
 * server; an import of a large catalogue needs longer than any other request, so a route may
 * let a body it has admitted take longer for as long as it keeps coming (`allowSlowBody`).
 *
 * A body let so may take REQUEST_TIMEOUT_MS, plus a second for every `minBytesPerSecond` bytes
 * received, as Apache's `RequestReadTimeout body=10,MinRate=...` counts: a client that sends
 * at that rate or faster is never cut, one that stops or trickles is cut about
 * REQUEST_TIMEOUT_MS after its sending fell behind. Checked every CHECK_MS, as Node checks its
 * own timeouts (`connectionsCheckingInterval`).
 */
import type { IncomingMessage } from 'node:http'

/** How long after its headers a request must have arrived whole. */
const REQUEST_TIMEOUT_MS = 10_000
/** How often the requests still arriving are looked at. */
const CHECK_MS = 1000

/** A request still arriving: when its headers came, and, once let be slow, its rate. */
interface Arriving {
  req: IncomingMessage
  startedAt: number
  /** The socket's `bytesRead` when the body was let be slow; none before. */
  bytesAtSlow?: number
  minBytesPerSecond?: number
}

/**
 * When the request `arriving` is out of time, given its socket has read `bytesRead` bytes in
 * all: REQUEST_TIMEOUT_MS after its headers, plus a second for every `minBytesPerSecond` bytes
 * received since it was let be slow.
 */
function deadlineOf ({ startedAt, bytesAtSlow, minBytesPerSecond }: Omit<Arriving, 'req'>, bytesRead: number): number {
  const earned = bytesAtSlow === undefined || minBytesPerSecond === undefined ? 0 : 1000 * (bytesRead - bytesAtSlow) / minBytesPerSecond
  return startedAt + REQUEST_TIMEOUT_MS + earned
}

export class RequestDeadlines {
  /** The requests of each socket that may still be arriving: Node parses one at a time. */
  readonly #arriving = new Map<object, Arriving>()
  readonly #expired: (req: IncomingMessage) => void
  #timer: NodeJS.Timeout | undefined

  /** `expired`: answers a request out of time (the server's `clientError` handler, with Node's error). */
  constructor (expired: (req: IncomingMessage) => void) {
    this.#expired = expired
  }

  /** `req`'s headers have arrived: from now, its body has REQUEST_TIMEOUT_MS. */
  begin (req: IncomingMessage) {
    this.#arriving.set(req.socket, { req, startedAt: performance.now() })
    this.#timer ??= setInterval(() => this.#check(), CHECK_MS).unref()
  }

  /**
   * Lets `req`'s body take longer for as long as it comes at `minBytesPerSecond` or faster
   * (counted from now); nothing once it has arrived.
   */
  allowSlowBody (req: IncomingMessage, minBytesPerSecond: number) {
    const arriving = this.#arriving.get(req.socket)
    if (arriving?.req !== req) return
    arriving.bytesAtSlow = req.socket.bytesRead
    arriving.minBytesPerSecond = minBytesPerSecond
  }

  /** Stops the checks. */
  close () {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#arriving.clear()
  }

  #check () {
    const now = performance.now()
    for (const [socket, arriving] of this.#arriving) {
      const { req } = arriving
      if (req.complete || req.socket.destroyed) {
        this.#arriving.delete(socket)
      } else if (now >= deadlineOf(arriving, req.socket.bytesRead)) {
        this.#arriving.delete(socket)
        this.#expired(req)
      }
    }
    if (this.#arriving.size === 0) {
      clearInterval(this.#timer)
      this.#timer = undefined
    }
  }
}

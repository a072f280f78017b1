/**
 * A TCP proxy between the service and PostgreSQL, to break the network under a running service
 * with real sockets: `cut()` (connections reset, new ones refused), `blackhole()` (every byte
 * swallowed, nothing refused), `restore()`, `retarget()` (to another server), and
 * `terminateAsReady()` (each new session ended by the server as it starts). Between a
 * client and the service, `sent` shows what clients wrote on the wire (with `recordSent` on). Everything it opened
 * is closed when the test ends.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'
import type { Test } from 'tap'
import { withTimeout } from './wait.js'

export type ProxyMode = 'forward' | 'cut' | 'blackhole' | 'terminate-as-ready' | 'closed'

/** How long the proxy may take to listen or to close its sockets. */
const SOCKET_TIMEOUT = 5000

/** One accepted connection and, unless it was accepted while blackholed, its upstream. */
interface Link {
  downstream: Socket
  upstream: Socket | null
  /**
   * Bytes or a FIN were swallowed, or the upstream went away, while blackholed: the stream no
   * longer carries the protocol and cannot be forwarded again (TCP never drops bytes silently).
   */
  broken: boolean
  /** What PostgreSQL sent before its first ReadyForQuery, held while the link ends the session there. */
  startup: Buffer | null
}

/**
 * The ErrorResponse with which PostgreSQL ends a session that `pg_terminate_backend` ended:
 * severity FATAL, SQLSTATE 57P01 (admin_shutdown), then it closes the connection.
 */
const TERMINATED = errorResponse({ S: 'FATAL', V: 'FATAL', C: '57P01', M: 'terminating connection due to administrator command' })

function errorResponse (fields: Record<string, string>): Buffer {
  const body = Buffer.concat([...Object.entries(fields).map(([code, text]) => Buffer.from(`${code}${text}\0`)), Buffer.from([0])])
  const header = Buffer.alloc(5)
  header.write('E', 0, 'latin1')
  header.writeInt32BE(4 + body.length, 1)
  return Buffer.concat([header, body])
}

/** The end of the first ReadyForQuery ('Z') message in `bytes`, a stream of whole or partial messages; -1 while none is complete. */
function endOfReadyForQuery (bytes: Buffer): number {
  for (let at = 0; at + 5 <= bytes.length;) {
    const end = at + 1 + bytes.readInt32BE(at + 1)
    if (end > bytes.length) return -1
    if (bytes[at] === 0x5a) return end
    at = end
  }
  return -1
}

export class TcpProxy {
  mode: ProxyMode = 'forward'
  /** Connections accepted so far, and bytes swallowed while blackholed, for the reports. */
  accepted = 0
  droppedBytes = 0
  readonly #links = new Set<Link>()
  readonly #sockets = new Set<Socket>()
  readonly #server: Server
  /** Whether to keep what clients send, for `sent` (off: a proxy in front of PostgreSQL would hoard it) */
  recordSent = false
  readonly #sent: Buffer[] = []

  private constructor (readonly port: number, readonly targetHost: string, public targetPort: number, server: Server) {
    this.#server = server
  }

  /** A proxy on 127.0.0.1, on a port the system picks, forwarding to `targetPort`; closed when `t` ends. */
  static async start (t: Test, targetPort = 5432, targetHost = '127.0.0.1'): Promise<TcpProxy> {
    const server = createServer({ allowHalfOpen: true })
    await listen(server, 0)
    const address = server.address()
    if (address === null || typeof address === 'string') throw new Error('the proxy has no port')
    const proxy = new TcpProxy(address.port, targetHost, targetPort, server)
    server.on('connection', (socket) => proxy.#accept(socket))
    t.teardown(() => proxy.close())
    return proxy
  }

  /** Sockets the proxy opened or accepted that are not closed yet, on either side. */
  get openSockets (): number {
    return this.#sockets.size
  }

  /** Every byte the proxy's clients sent and it forwarded while `recordSent` was on, as Latin-1 text. */
  get sent (): string {
    return Buffer.concat(this.#sent).toString('latin1')
  }

  get listening (): boolean {
    return this.#server.listening
  }

  /** Destroys every open connection in both directions and refuses new ones (nothing listens). */
  async cut (): Promise<void> {
    this.#assertOpen()
    this.mode = 'cut'
    await this.#shutDown()
  }

  /**
   * Keeps every socket open but swallows all bytes (and FINs) in both directions; new
   * connections are accepted and never forwarded. Like a network that drops packets.
   */
  async blackhole (): Promise<void> {
    this.#assertOpen()
    this.mode = 'blackhole'
    // A socket paused for backpressure would hold bytes back instead of swallowing them
    for (const { downstream, upstream } of this.#links) {
      downstream.resume()
      upstream?.resume()
    }
    if (!this.listening) await listen(this.#server, this.port)
  }

  /**
   * Forwards again, listening on the same port. Connections that cannot carry the protocol any
   * more (bytes swallowed, or accepted without an upstream) are destroyed, as the network would
   * eventually reset them; untouched ones carry on.
   */
  async restore (): Promise<void> {
    this.#assertOpen()
    await this.#destroyLinks((link) => link.broken || link.upstream === null)
    this.mode = 'forward'
    if (!this.listening) await listen(this.#server, this.port)
  }

  /**
   * Resets every open connection and forwards new ones to `targetPort` from now on: as when the
   * address the service connects to comes to lead to another server (a moved virtual address,
   * a balancer sending to a standby).
   */
  async retarget (targetPort: number): Promise<void> {
    this.#assertOpen()
    await this.#destroyLinks(() => true)
    this.targetPort = targetPort
  }

  /**
   * Resets every open connection; each new one is forwarded until PostgreSQL says it is ready
   * for its first query, and its client then gets that ReadyForQuery and the FATAL error of a
   * terminated backend in one write, and the end of the connection: as when a session is
   * terminated the moment it has started. `restore()` forwards again.
   */
  async terminateAsReady (): Promise<void> {
    this.#assertOpen()
    await this.#destroyLinks(() => true)
    this.mode = 'terminate-as-ready'
    if (!this.listening) await listen(this.#server, this.port)
  }

  /** Stops listening and destroys every socket. */
  async close (): Promise<void> {
    if (this.mode === 'closed') return
    this.mode = 'closed'
    await this.#shutDown()
  }

  #assertOpen () {
    if (this.mode === 'closed') throw new Error('the proxy is closed')
  }

  #track (socket: Socket) {
    this.#sockets.add(socket)
    socket.on('error', () => {})
    socket.once('close', () => this.#sockets.delete(socket))
  }

  #accept (downstream: Socket) {
    this.accepted++
    this.#track(downstream)
    if (this.mode === 'cut' || this.mode === 'closed') {
      // Accepted just before the listener closed
      downstream.destroy()
      return
    }
    const link: Link = { downstream, upstream: null, broken: false, startup: this.mode === 'terminate-as-ready' ? Buffer.alloc(0) : null }
    this.#links.add(link)
    downstream.once('close', () => {
      // The service closed it: whatever the mode, no reason to keep a backend busy
      link.upstream?.destroy()
      this.#links.delete(link)
    })
    if (this.mode === 'forward' || this.mode === 'terminate-as-ready') {
      const upstream = connect({ host: this.targetHost, port: this.targetPort, allowHalfOpen: true })
      link.upstream = upstream
      this.#track(upstream)
      upstream.once('close', () => {
        // PostgreSQL closed it. A blackhole would swallow the news; otherwise pass it on.
        if (this.mode === 'blackhole') link.broken = true
        else downstream.destroy()
      })
      this.#pipe(link, downstream, upstream)
      this.#pipe(link, upstream, downstream)
    } else {
      downstream.on('data', (chunk: Buffer) => this.#swallow(link, chunk))
    }
  }

  /**
   * Carries `from`'s bytes and FIN to `to` while forwarding, swallows them while blackholed; a
   * link accepted to end its session as it starts forwards the client's start-up and holds
   * PostgreSQL's (`#endAtReady`), and swallows what comes after.
   */
  #pipe (link: Link, from: Socket, to: Socket) {
    from.on('data', (chunk: Buffer) => {
      if (link.startup !== null && from === link.upstream) return this.#endAtReady(link, chunk)
      if ((this.mode !== 'forward' && link.startup === null) || link.broken) {
        this.#swallow(link, chunk)
        return
      }
      if (this.recordSent && from === link.downstream) this.#sent.push(chunk)
      if (!to.write(chunk)) {
        from.pause()
        to.once('drain', () => { if (!from.destroyed) from.resume() })
      }
    })
    from.once('end', () => {
      if (this.mode === 'forward' && !link.broken) to.end()
      else link.broken = true
    })
  }

  /** Holds PostgreSQL's start-up messages until its first ReadyForQuery, then ends the session there. */
  #endAtReady (link: Link, chunk: Buffer) {
    const held = Buffer.concat([link.startup!, chunk])
    const end = endOfReadyForQuery(held)
    if (end === -1) {
      link.startup = held
      return
    }
    link.startup = null
    link.broken = true
    // One write, so that the client reads both in one go; the backend goes once it is sent
    link.downstream.end(Buffer.concat([held.subarray(0, end), TERMINATED]), () => link.upstream?.destroy())
  }

  #swallow (link: Link, chunk: Buffer) {
    link.broken = true
    this.droppedBytes += chunk.length
  }

  async #destroyLinks (which: (link: Link) => boolean): Promise<void> {
    const doomed: Socket[] = []
    for (const link of [...this.#links]) {
      if (!which(link)) continue
      this.#links.delete(link)
      doomed.push(link.downstream)
      if (link.upstream !== null) doomed.push(link.upstream)
    }
    await destroy(doomed)
  }

  /** Stops listening at once (new connections are refused), then destroys every socket. */
  async #shutDown (): Promise<void> {
    // The listener's 'close' also waits for the accepted sockets, destroyed right after
    const closed = this.listening
      ? new Promise<void>((resolve) => this.#server.close(() => resolve()))
      : Promise.resolve()
    await this.#destroyLinks(() => true)
    // Whatever is left (a socket accepted while being cut): nothing may outlive a cut
    await destroy([...this.#sockets])
    await withTimeout(closed, SOCKET_TIMEOUT, 'the proxy to stop listening')
  }
}

/** Destroys `sockets` and waits until each has closed. */
async function destroy (sockets: Socket[]): Promise<void> {
  const closing = sockets.filter((socket) => !socket.closed).map((socket) => {
    const closed = new Promise((resolve) => socket.once('close', resolve))
    socket.destroy()
    return closed
  })
  await withTimeout(Promise.all(closing), SOCKET_TIMEOUT, `the proxy to close ${closing.length} socket(s)`)
}

function listen (server: Server, port: number): Promise<void> {
  return withTimeout(new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(new Error(`the proxy cannot listen on 127.0.0.1:${port}: ${err.message}`))
    server.once('error', onError)
    server.listen(port, '127.0.0.1', () => {
      server.off('error', onError)
      resolve()
    })
  }), SOCKET_TIMEOUT, `the proxy to listen on port ${port}`)
}

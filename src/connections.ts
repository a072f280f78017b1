/**
 * Every client connection of the app's HTTP servers, one record each, kept by one owner: its
 * address's count against the bounds, its requests in flight and their turn, its send timeout
 * while a shutdown drains, its lingering close. `attach` installs it on a server (the public one,
 * plugins/app/connections.ts; the admin listener's, plugins/app/admin-listener.ts), the same way
 * on both: one `connection` listener, the server's request listener wrapped, one `close`
 * listener per socket and per response. The bounds on a server's connections, their counts and
 * the shedding of idle ones are src/connection-bounds.ts, which the owner keeps for each server;
 * the lingering close is src/lingering-close.ts, on the same records.
 *
 * Pipelining: Node's HTTP server reads a connection on as long as no answer is waiting to be
 * written, and hands every request it parses to the app at once (it answers them in order). A
 * request that waits on the database (a listing) has written nothing yet, so a client that
 * pipelined thousands of them and read nothing would have them all read from the database and
 * held in memory. Here a connection has one request in hand at a time: the next reaches the app once
 * the answer before it has been handed to the kernel, and while a request waits the socket is
 * not read. Node still parses what it has already read (64 KB at once): up to
 * MAX_WAITING_PER_CONNECTION of those wait their turn, as Node's request and response objects
 * only (Fastify has made nothing for them yet). A connection that had more is ended once the
 * answers to those have gone out, and the requests after them never reach the app: the client
 * sends them again on a new connection, as RFC 9112 section 9.3.2 has a client do with the
 * requests a connection closed before answering. A connection that ends otherwise (the client
 * left, a send timeout, an answer with `Connection: close`) drops whatever waited on it, and
 * what Node still parses from it never reaches the app.
 *
 * Send timeout (`sendTimeoutMs`, SEND_TIMEOUT_MS on the public server): Node's socket timeout,
 * which destroys a connection that has no activity for that long, so that a client that asks
 * for a long listing and stops reading does not keep its connection, its place in the kernel's
 * buffers and the pages held for it for ever. While a write is pending, Node counts every byte the kernel takes
 * as activity, so a client that reads slowly but steadily is never cut. Between requests of a
 * keep-alive connection Node uses `keepAliveTimeout` instead, and restores this one when the
 * next request arrives. While a request is received, the headers timeout (5 s) and its own
 * deadline (src/request-deadline.ts, kept here for each request) come first; a handler waits for the database at most DATABASE_CALL_BOUND_MS (5 s), which
 * the setting's minimum stays well above. Once `drain` is called, a connection with bytes waiting for its client
 * is cut off after DRAIN_SEND_TIMEOUT_MS instead: the close would otherwise wait on it, and on
 * the pipelined requests behind it, until the grace of `-g` ran out.

 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { BoundedConnections, RefusalLog, addressKey, type ConnectionBounds, type Log, type RefusedStatus } from './connection-bounds.js'
import { LingeringClose, type Lingering } from './lingering-close.js'
import { onServerEnd } from './node-internals.js'
import { RequestDeadlines } from './request-deadline.js'

/**
 * Requests of one connection that may wait behind the one it has in hand. Small: what a
 * connection that reads nothing costs is mostly the answers the kernel's buffers still take.
 */
export const MAX_WAITING_PER_CONNECTION = 4
/**
 * How long a connection that had too many stays open after its last answer, for its client to
 * read it, unless the client closes first. It is not read meanwhile: Node would parse what it
 * reads into yet more requests.
 */
const OVERFLOW_END_MS = 5000

/**
 * While a shutdown drains: how long a client may take none of its answer before it is cut off.
 * Node looks twice before it cuts (a write that was in progress when the timer started counts as
 * progress once), so the cut comes 1 to 2 s after the client's last byte.
 */
export const DRAIN_SEND_TIMEOUT_MS = 1000
/** How often the drain looks for answers that wait on their client. */
const DRAIN_CHECK_MS = 250

/** What `attach` applies to one server's connections. */
export interface ListenerOptions {
  bounds: ConnectionBounds
  /** Node's socket timeout for them, cut shorter while draining; none without it. */
  sendTimeoutMs?: number
  /** Whether idle keep-alive connections are shed sooner while many are open. */
  shedIdle?: boolean
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void

/** One server's connections as a whole: its options, its counts against its bounds. */
interface Listener {
  options: ListenerOptions
  bounded: BoundedConnections
  deadlines: RequestDeadlines
}

/** One connection: all the state the app keeps about it. */
class Connection implements Lingering {
  /** Requests parsed and not yet answered; -1 before the first (not idle: Node's headers timeout covers it). */
  requests = -1
  /** The response to the request in hand: from reaching the app to its answer. */
  inHand: ServerResponse | undefined
  /** The requests after it, each handed to the app in turn. */
  waiting: Array<() => void> = []
  /** More came than may wait: those in hand and waiting are answered, then the connection ends. */
  overflowed = false
  overflowTimer: NodeJS.Timeout | undefined
  /** Whether the drain has cut its send timeout to DRAIN_SEND_TIMEOUT_MS. */
  shortened = false
  /** While it closes lingering: the `bytesRead` past which it is cut off. */
  lingerLimit: number | undefined
  lingerTimer: NodeJS.Timeout | undefined

  /**
   * `address`: its client's `addressKey`; `listener`: the server that accepted it, none for a
   * socket only closed lingering (a test's); `refused`: over a bound, answered so, not counted.
   */
  constructor (readonly socket: Duplex, readonly address = '', readonly listener?: Listener, readonly refused?: RefusedStatus) {}
}

export class Connections {
  readonly #log: Log
  readonly #refusals: RefusalLog
  /** Each socket's record, found by its socket for as long as anything holds the socket. */
  readonly #records = new WeakMap<Duplex, Connection>()
  /** The records of the sockets not closed yet. */
  readonly #open = new Set<Connection>()
  readonly #lingering = new LingeringClose()
  readonly #listeners: Listener[] = []
  #draining: NodeJS.Timeout | undefined
  #cutOff = 0

  constructor (log: Log) {
    this.#log = log
    this.#refusals = new RefusalLog(log)
  }

  /**
   * Takes over `server`'s connections with `options`: counts and bounds them, hands their
   * requests to the server's request listener (the handler given to `createServer`) in turn,
   * closes them lingering, and with `sendTimeoutMs`, times out what their clients do not take.
   */
  attach (server: Server, options: ListenerOptions) {
    const handlers = server.listeners('request') as Handler[]
    if (handlers.length !== 1) throw new Error(`a server with one request listener, not ${handlers.length}`)
    const [handler] = handlers as [Handler]
    const listener: Listener = {
      options,
      bounded: new BoundedConnections(server, options.bounds, options.shedIdle === true, this.#log, this.#refusals, () => this.#idle(listener)),
      // Answered by the server's `clientError` handler, with the error Node's own timeout gives it
      deadlines: new RequestDeadlines((req) => server.emit('clientError', Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), req.socket))
    }
    this.#listeners.push(listener)
    server.removeListener('request', handler)
    server.on('request', (req: IncomingMessage, res: ServerResponse) => this.#request(listener, handler, req, res))
    if (options.sendTimeoutMs !== undefined) server.setTimeout(options.sendTimeoutMs)
    server.on('connection', (socket: Socket) => this.#accept(listener, socket))
  }

  /** 429 or 503 when `socket` came over a bound. */
  refusedStatus (socket: Duplex): RefusedStatus | undefined {
    return this.#records.get(socket)?.refused
  }

  /** Whether `socket` is being closed by `closeLingering`: whatever else happens on it is moot. */
  isLingering (socket: Duplex): boolean {
    return this.#records.get(socket)?.lingerLimit !== undefined
  }

  /** How long `socket`'s client could take none of its answer before it was cut off. */
  sendTimeoutOf (socket: Duplex): number | undefined {
    const record = this.#records.get(socket)
    return record?.shortened === true ? DRAIN_SEND_TIMEOUT_MS : record?.listener?.options.sendTimeoutMs
  }

  /**
   * Closes a connection the server is done with without resetting it under a client that is
   * still sending (LingeringClose's `begin`); once only.
   */
  closeLingering (socket: Duplex) {
    if (socket.destroyed) return
    const record = this.#records.get(socket) ?? this.#track(new Connection(socket))
    if (record.lingerLimit !== undefined) return
    this.#lingering.begin(record)
  }

  /**
   * From now on, a connection with a send timeout whose answer waits on its client gets
   * DRAIN_SEND_TIMEOUT_MS instead. Only such a socket: Node counts the bytes the kernel takes as
   * activity, so a client that reads on is not cut, and a request that waits on the database
   * (nothing to write yet) keeps its timeout. Each socket once: setting the timeout again would
   * restart it.
   */
  drain () {
    const shorten = () => {
      for (const record of this.#open) {
        const socket = record.socket as Socket
        if (record.listener?.options.sendTimeoutMs !== undefined && socket.writableLength > 0 && !record.shortened) {
          record.shortened = true
          socket.setTimeout(DRAIN_SEND_TIMEOUT_MS)
          socket.once('timeout', () => this.#cutOff++)
        }
      }
    }
    shorten()
    this.#draining ??= setInterval(shorten, DRAIN_CHECK_MS).unref()
  }

  /** Lets `req`'s body take longer than the request timeout while it comes fast enough (src/request-deadline.ts). */
  allowSlowBody (req: IncomingMessage, minBytesPerSecond: number) {
    this.#records.get(req.socket)?.listener?.deadlines.allowSlowBody(req, minBytesPerSecond)
  }

  /** Stops the timers; how many connections the drain cut off. */
  close (): number {
    this.#refusals.close()
    for (const { deadlines } of this.#listeners) deadlines.close()
    clearInterval(this.#draining)
    return this.#cutOff
  }

  #track (record: Connection): Connection {
    const { socket } = record
    this.#records.set(socket, record)
    this.#open.add(record)
    socket.once('close', () => this.#closed(record))
    return record
  }

  #accept (listener: Listener, socket: Socket) {
    const address = addressKey(socket.remoteAddress)
    const refused = listener.bounded.admit(address)
    const record = this.#track(new Connection(socket, address, listener, refused))
    onServerEnd(socket, () => this.closeLingering(socket))
    // Node resumes the reading after every request it parses and every answer; while requests
    // wait, it stays paused. Node's own listener (which restarts the reading) has run by now.
    socket.on('resume', () => {
      if (record.waiting.length > 0 || record.overflowed) socket.pause()
    })
  }

  /** The sockets of `listener`'s counted connections that wait for their next request. */
  * #idle (listener: Listener): Iterable<Socket> {
    for (const record of this.#open) {
      if (record.listener === listener && record.refused === undefined && record.requests === 0) yield record.socket as Socket
    }
  }

  #closed (record: Connection) {
    this.#open.delete(record)
    record.waiting = []
    clearTimeout(record.overflowTimer)
    this.#lingering.closed(record)
    if (record.listener === undefined || record.refused !== undefined) return
    record.listener.bounded.release(record.address)
  }

  #request (listener: Listener, handler: Handler, req: IncomingMessage, res: ServerResponse) {
    const { socket } = req
    const record = this.#records.get(socket)
    /* c8 ignore next: Node emits `connection`, which makes the record, before any request */
    if (record === undefined) return handler(req, res)
    record.requests = Math.max(record.requests, 0) + 1
    listener.deadlines.begin(req)
    // `on`, not `once`: a response closes once, and `once` wraps and removes on every request
    res.on('close', () => this.#answered(record, res))
    // Parsed from what a connection that is closing still sends (after an answer that said
    // `Connection: close`, while it is read and discarded): nobody can read an answer to it
    if (record.overflowed || !socket.writable) return
    if (record.inHand === undefined) return this.#handle(record, handler, req, res)
    socket.pause()
    if (record.waiting.length < MAX_WAITING_PER_CONNECTION) {
      record.waiting.push(() => this.#handle(record, handler, req, res))
    } else {
      record.overflowed = true
    }
  }

  #handle (record: Connection, handler: Handler, req: IncomingMessage, res: ServerResponse) {
    record.inHand = res
    handler(req, res)
  }

  /** A response has closed; if it was the one in hand, the next request reaches the app. */
  #answered (record: Connection, res: ServerResponse) {
    record.requests--
    if (record.inHand !== res) return
    record.inHand = undefined
    const { socket } = record
    if (!socket.writable) {
      record.waiting = []
      return
    }
    record.waiting.shift()?.()
    if (record.overflowed) {
      // The client reads what it was sent, then the end; the connection is gone OVERFLOW_END_MS later
      if (record.inHand === undefined) {
        socket.end()
        record.overflowTimer = setTimeout(() => socket.destroy(), OVERFLOW_END_MS).unref()
      }
    } else if (record.waiting.length === 0 && socket.isPaused()) {
      socket.resume()
    }
  }
}

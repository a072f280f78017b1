/**
 * Every client connection of the app's HTTP servers, one record each, kept by one owner: its
 * address's count against the bounds, its requests in flight and their turn, its send timeout
 * while a shutdown drains, its lingering close. `attach` installs it on a server (the public one,
 * plugins/app/connections.ts; the admin listener's, plugins/app/admin-listener.ts), the same way
 * on both: one `connection` listener, the server's request listener wrapped, one `close`
 * listener per socket and per response.
 *
 * Bounds (below the process's file-descriptor limit, so that no flood of idle connections leaves
 * nothing for anyone else): at most `max` open (503) and at most `maxPerAddress` from one client
 * address, the socket's peer (429). A connection over a bound is marked refused and not
 * counted; the app answers it once its first request has arrived (or in place of the 408 when
 * none does), with `Retry-After` and `Connection: close`. Node itself drops, as it accepts them,
 * the connections beyond `hardCap`. The log says so once per client address and minute.
 *
 * Shedding (`shedIdle`): from HIGH_WATER_FRACTION of `max` open on, a keep-alive connection is
 * closed after IDLE_SHED_MS idle instead of the keep-alive timeout, and says so in its
 * `Keep-Alive` header; "idle" is Node's own: from the end of a response to the first byte of the
 * next request.
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
 * next request arrives. While a request is received, the headers and request timeouts (5 s,
 * 10 s) come first; a handler waits for the database at most DATABASE_CALL_BOUND_MS (5 s), which
 * the setting's minimum stays well above. Once `drain` is called, a connection with bytes waiting for its client
 * is cut off after DRAIN_SEND_TIMEOUT_MS instead: the close would otherwise wait on it, and on
 * the pipelined requests behind it, until the grace of `-g` ran out.
 *
 * Lingering close: every connection the server ends after a response (`Connection: close`: a
 * 413, a refused connection, the drain of a shutdown, HTTP/1.0) and every one the HTTP edge
 * answers on the raw socket is closed by `closeLingering`: Node's own close after such a
 * response (end, then destroy as soon as the answer is written) is what resets a client still
 * writing its body.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { normalizeIP } from '@fastify/rate-limit'
import { Message } from './envelope.js'
import { onServerEnd } from './node-internals.js'

/** From this share of `max` open on, idle keep-alive connections are shed sooner. */
const HIGH_WATER_FRACTION = 0.5
/** Shedding stops below this share again, so that it does not flap at the mark. */
const LOW_WATER_FRACTION = 0.4
/** While shedding: how long a keep-alive connection may stay idle (instead of 72 s). */
const IDLE_SHED_MS = 5000
/** What the answer to a connection over a bound says the client should wait. */
export const RETRY_AFTER_S = 5
/** A refused address is logged at most once in this window. */
const LOG_WINDOW_MS = 60_000

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

/** How long a connection the server has ended is still read, its bytes discarded. */
const LINGER_MS = 5000
/** How much of it is read at most: a client sending faster than that is cut off sooner. */
const LINGER_MAX_BYTES = 8 * 1024 * 1024
/** How often the bytes read while lingering are looked at. */
const LINGER_CHECK_MS = 100

/** The status a connection over a bound is answered with, then closed. */
export type RefusedStatus = 429 | 503

export function refusedMessage (status: RefusedStatus) {
  return status === 429 ? Message.TooManyConnectionsFromAddress : Message.TooManyConnections
}

/**
 * What one client is, for the bound per address: an IPv4 address (also when mapped into IPv6),
 * or the /64 an IPv6 address is in, since one client usually has a whole /64 to pick from. The
 * same reading as the attempt limit of POST /token (@fastify/rate-limit's own).
 */
export function addressKey (address: string | undefined): string {
  return address === undefined ? '' : normalizeIP(address)
}

/** The bounds on one server's connections, and the names its log lines give them. */
interface ConnectionBounds {
  max: number
  maxPerAddress: number
  /** Beyond this many, Node drops a connection as it accepts it. */
  hardCap: number
  names: { max: string, maxPerAddress: string }
}

/** What `attach` applies to one server's connections. */
export interface ListenerOptions {
  bounds: ConnectionBounds
  /** Node's socket timeout for them, cut shorter while draining; none without it. */
  sendTimeoutMs?: number
  /** Whether idle keep-alive connections are shed sooner while many are open. */
  shedIdle?: boolean
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void
/** Where the log lines go: the app's logger. */
interface Log {
  info: (fields: object, message: string) => void
  warn: (fields: object, message: string) => void
}

/** One server's connections as a whole: its options, its counts, whether it sheds. */
interface Listener {
  server: Server
  options: ListenerOptions
  /** Connections counted against the bounds. */
  open: number
  perAddress: Map<string, number>
  shedding: boolean
  keepAliveTimeout: number
}

/** One connection: all the state the app keeps about it. */
class Connection {
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

function bytesRead (socket: Duplex): number {
  return (socket as Partial<Socket>).bytesRead ?? 0
}

export class Connections {
  readonly #log: Log
  /** Each socket's record, found by its socket for as long as anything holds the socket. */
  readonly #records = new WeakMap<Duplex, Connection>()
  /** The records of the sockets not closed yet. */
  readonly #open = new Set<Connection>()
  readonly #lingering = new Set<Connection>()
  /** One meter for all lingering connections, running while there are any. */
  #meter: NodeJS.Timeout | undefined
  #logged = new Set<string>()
  readonly #logWindow: NodeJS.Timeout
  #draining: NodeJS.Timeout | undefined
  #cutOff = 0

  constructor (log: Log) {
    this.#log = log
    this.#logWindow = setInterval(() => { this.#logged = new Set() }, LOG_WINDOW_MS).unref()
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
      server, options, open: 0, perAddress: new Map(), shedding: false, keepAliveTimeout: server.keepAliveTimeout
    }
    server.removeListener('request', handler)
    server.on('request', (req: IncomingMessage, res: ServerResponse) => this.#request(listener, handler, req, res))
    server.maxConnections = options.bounds.hardCap
    if (options.sendTimeoutMs !== undefined) server.setTimeout(options.sendTimeoutMs)
    server.on('connection', (socket: Socket) => this.#accept(listener, socket))
    server.on('drop', (data?: { remoteAddress?: string }) => {
      this.#logOnce(addressKey(data?.remoteAddress), `drop ${options.bounds.names.max}`, { bound: options.bounds.hardCap },
        'connection dropped unanswered: the process holds as many as its file descriptors allow')
    })
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
   * still sending (RFC 9112 section 9.6): the answer already written goes out followed by our
   * FIN, then what the client still sends (the rest of a body too large, a request answered
   * before it was read) is read and discarded until the client closes its side, for LINGER_MS
   * and LINGER_MAX_BYTES at most. Closing at once instead would make the kernel answer those
   * bytes with a reset, which can destroy the answer before the client has read it (an EPIPE or
   * ECONNRESET instead of the 413).
   */
  closeLingering (socket: Duplex) {
    if (socket.destroyed) return
    const record = this.#records.get(socket) ?? this.#track(new Connection(socket))
    if (record.lingerLimit !== undefined) return
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

  /** Stops the timers; how many connections the drain cut off. */
  close (): number {
    clearInterval(this.#logWindow)
    clearInterval(this.#draining)
    return this.#cutOff
  }

  #logOnce (address: string, kind: string, fields: object, message: string) {
    const key = `${kind} ${address}`
    if (this.#logged.has(key)) return
    this.#logged.add(key)
    this.#log.warn({ address, ...fields }, message)
  }

  #track (record: Connection): Connection {
    const { socket } = record
    this.#records.set(socket, record)
    this.#open.add(record)
    socket.once('close', () => this.#closed(record))
    return record
  }

  #accept (listener: Listener, socket: Socket) {
    const { bounds } = listener.options
    const address = addressKey(socket.remoteAddress)
    const held = listener.perAddress.get(address) ?? 0
    const refused = listener.open >= bounds.max ? 503 : held >= bounds.maxPerAddress ? 429 : undefined
    const record = this.#track(new Connection(socket, address, listener, refused))
    onServerEnd(socket, () => this.closeLingering(socket))
    // Node resumes the reading after every request it parses and every answer; while requests
    // wait, it stays paused. Node's own listener (which restarts the reading) has run by now.
    socket.on('resume', () => {
      if (record.waiting.length > 0 || record.overflowed) socket.pause()
    })
    if (refused === 503) {
      this.#logOnce(address, `total ${bounds.names.max}`, { open: listener.open, bound: bounds.max }, `connection over ${bounds.names.max}: answered 503 and closed`)
      return
    }
    if (refused === 429) {
      this.#logOnce(address, `address ${bounds.names.max}`, { held, bound: bounds.maxPerAddress }, `connection over ${bounds.names.maxPerAddress}: answered 429 and closed`)
      return
    }
    listener.open++
    listener.perAddress.set(address, held + 1)
    if (listener.options.shedIdle === true && !listener.shedding && listener.open > Math.floor(bounds.max * HIGH_WATER_FRACTION)) {
      this.#startShedding(listener)
    }
  }

  #closed (record: Connection) {
    this.#open.delete(record)
    record.waiting = []
    clearTimeout(record.overflowTimer)
    clearTimeout(record.lingerTimer)
    if (this.#lingering.delete(record) && this.#lingering.size === 0) {
      clearInterval(this.#meter)
      this.#meter = undefined
    }
    const { listener } = record
    if (listener === undefined || record.refused !== undefined) return
    listener.open--
    const left = (listener.perAddress.get(record.address) ?? 1) - 1
    if (left === 0) listener.perAddress.delete(record.address)
    else listener.perAddress.set(record.address, left)
    if (listener.shedding && listener.open < Math.floor(listener.options.bounds.max * LOW_WATER_FRACTION)) {
      this.#stopShedding(listener)
    }
  }

  #startShedding (listener: Listener) {
    listener.shedding = true
    listener.server.keepAliveTimeout = IDLE_SHED_MS
    // Those idle already were promised the long timeout: their timer restarts with the short one
    for (const record of this.#open) {
      if (record.listener === listener && record.refused === undefined && record.requests === 0) {
        (record.socket as Socket).setTimeout(IDLE_SHED_MS)
      }
    }
    const highWater = Math.floor(listener.options.bounds.max * HIGH_WATER_FRACTION)
    this.#log.warn({ open: listener.open, highWater, idleMs: IDLE_SHED_MS }, 'many connections open: idle keep-alive connections are closed sooner')
  }

  #stopShedding (listener: Listener) {
    listener.shedding = false
    listener.server.keepAliveTimeout = listener.keepAliveTimeout
    const lowWater = Math.floor(listener.options.bounds.max * LOW_WATER_FRACTION)
    this.#log.info({ open: listener.open, lowWater }, 'connections back to normal: idle keep-alive connections kept as usual')
  }

  #measure () {
    for (const record of this.#lingering) {
      if (bytesRead(record.socket) > record.lingerLimit!) record.socket.destroy()
    }
  }

  #request (listener: Listener, handler: Handler, req: IncomingMessage, res: ServerResponse) {
    const { socket } = req
    const record = this.#records.get(socket)
    /* c8 ignore next: Node emits `connection`, which makes the record, before any request */
    if (record === undefined) return handler(req, res)
    record.requests = Math.max(record.requests, 0) + 1
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

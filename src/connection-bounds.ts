/**
 * The bounds on one server's connections, which the connections' owner (src/connections.ts)
 * keeps for each server it is attached to: which client a connection counts for, how many are
 * open in all and from each client, which bound a new one came over and what its answer says,
 * the shedding of idle ones while many are open, and the log lines about them.
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
 */
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import { normalizeIP } from '@fastify/rate-limit'
import { Message } from './envelope.js'

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
export interface ConnectionBounds {
  max: number
  maxPerAddress: number
  /** Beyond this many, Node drops a connection as it accepts it. */
  hardCap: number
  names: { max: string, maxPerAddress: string }
}

/** Where the log lines go: the app's logger. */
export interface Log {
  info: (fields: object, message: string) => void
  warn: (fields: object, message: string) => void
}

/** The warnings about connections over a bound, each kind once per client address and minute. */
export class RefusalLog {
  readonly #log: Log
  #logged = new Set<string>()
  readonly #window: NodeJS.Timeout

  constructor (log: Log) {
    this.#log = log
    this.#window = setInterval(() => { this.#logged = new Set() }, LOG_WINDOW_MS).unref()
  }

  once (address: string, kind: string, fields: object, message: string) {
    const key = `${kind} ${address}`
    if (this.#logged.has(key)) return
    this.#logged.add(key)
    this.#log.warn({ address, ...fields }, message)
  }

  close () {
    clearInterval(this.#window)
  }
}

/** One server's connections counted against its bounds, and whether its idle ones are shed. */
export class BoundedConnections {
  readonly #server: Server
  readonly #bounds: ConnectionBounds
  readonly #shedIdle: boolean
  readonly #log: Log
  readonly #refusals: RefusalLog
  readonly #idle: () => Iterable<Socket>
  /** Connections counted against the bounds. */
  #open = 0
  readonly #perAddress = new Map<string, number>()
  #shedding = false
  readonly #keepAliveTimeout: number

  /**
   * Bounds `server`'s connections; `shedIdle`: whether its idle keep-alive connections are shed
   * sooner while many are open, `idle` listing the sockets of its counted connections that wait
   * for their next request.
   */
  constructor (server: Server, bounds: ConnectionBounds, shedIdle: boolean, log: Log, refusals: RefusalLog, idle: () => Iterable<Socket>) {
    this.#server = server
    this.#bounds = bounds
    this.#shedIdle = shedIdle
    this.#log = log
    this.#refusals = refusals
    this.#idle = idle
    this.#keepAliveTimeout = server.keepAliveTimeout
    server.maxConnections = bounds.hardCap
    server.on('drop', (data?: { remoteAddress?: string }) => {
      refusals.once(addressKey(data?.remoteAddress), `drop ${bounds.names.max}`, { bound: bounds.hardCap },
        'connection dropped unanswered: the process holds as many as its file descriptors allow')
    })
  }

  /** Counts a new connection from `address`, or (not counting it) says which bound it came over. */
  admit (address: string): RefusedStatus | undefined {
    const bounds = this.#bounds
    const held = this.#perAddress.get(address) ?? 0
    if (this.#open >= bounds.max) {
      this.#refusals.once(address, `total ${bounds.names.max}`, { open: this.#open, bound: bounds.max }, `connection over ${bounds.names.max}: answered 503 and closed`)
      return 503
    }
    if (held >= bounds.maxPerAddress) {
      this.#refusals.once(address, `address ${bounds.names.max}`, { held, bound: bounds.maxPerAddress }, `connection over ${bounds.names.maxPerAddress}: answered 429 and closed`)
      return 429
    }
    this.#open++
    this.#perAddress.set(address, held + 1)
    if (this.#shedIdle && !this.#shedding && this.#open > Math.floor(bounds.max * HIGH_WATER_FRACTION)) {
      this.#startShedding()
    }
    return undefined
  }

  /** A counted connection from `address` has closed. */
  release (address: string) {
    this.#open--
    const left = (this.#perAddress.get(address) ?? 1) - 1
    if (left === 0) this.#perAddress.delete(address)
    else this.#perAddress.set(address, left)
    if (this.#shedding && this.#open < Math.floor(this.#bounds.max * LOW_WATER_FRACTION)) {
      this.#stopShedding()
    }
  }

  #startShedding () {
    this.#shedding = true
    this.#server.keepAliveTimeout = IDLE_SHED_MS
    // Those idle already were promised the long timeout: their timer restarts with the short one
    for (const socket of this.#idle()) socket.setTimeout(IDLE_SHED_MS)
    const highWater = Math.floor(this.#bounds.max * HIGH_WATER_FRACTION)
    this.#log.warn({ open: this.#open, highWater, idleMs: IDLE_SHED_MS }, 'many connections open: idle keep-alive connections are closed sooner')
  }

  #stopShedding () {
    this.#shedding = false
    this.#server.keepAliveTimeout = this.#keepAliveTimeout
    const lowWater = Math.floor(this.#bounds.max * LOW_WATER_FRACTION)
    this.#log.info({ open: this.#open, lowWater }, 'connections back to normal: idle keep-alive connections kept as usual')
  }
}

/**
 * Adds bounds on the client connections the process holds, below its file-descriptor limit, so
 * that no flood of idle connections leaves nothing for anyone else: listeners on the server's
 * `connection`, `drop` and `request` events that count connections and their requests,
 * `server.maxConnections` set to CONNECTION_HARD_CAP, an `onRequest` hook that answers a
 * connection over a bound, an `onClose` hook that stops the timer of its log, and
 * `fastify.limitConnections`, which bounds another server's connections the same way (the admin
 * listener's, with bounds of its own).
 *
 * - at most MAX_CONNECTIONS open (`503 Too many connections`), and at most
 *   MAX_CONNECTIONS_PER_ADDRESS from one client address, the socket's peer (`429 Too many
 *   connections from this address`). A connection over a bound is answered once its first request
 *   has arrived (or in place of the 408 when none does), with `Retry-After` and
 *   `Connection: close`, and closed lingering; it is not counted against the bounds.
 * - Node itself drops, as it accepts them, the connections beyond CONNECTION_HARD_CAP (all of
 *   them, answered or not), so the process never runs out of descriptors.
 * - from HIGH_WATER_FRACTION of MAX_CONNECTIONS open on, a keep-alive connection is closed after
 *   IDLE_SHED_MS idle instead of the keep-alive timeout, and says so in its `Keep-Alive` header;
 *   "idle" is Node's own: from the end of a response to the first byte of the next request.
 *
 * The log says so once per client address and minute, not once per connection.
 */
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import { normalizeIP } from '@fastify/rate-limit'
import fp from 'fastify-plugin'
import { CONNECTION_HARD_CAP } from '../../src/config.js'
import { Message, failure } from '../../src/envelope.js'
import { logRequestAtDebug } from '../../src/request-log.js'

/** From this share of MAX_CONNECTIONS open on, idle keep-alive connections are shed sooner. */
export const HIGH_WATER_FRACTION = 0.5
/** Shedding stops below this share again, so that it does not flap at the mark. */
export const LOW_WATER_FRACTION = 0.4
/** While shedding: how long a keep-alive connection may stay idle (instead of 72 s). */
export const IDLE_SHED_MS = 5000
/** What the answer to a connection over a bound says the client should wait. */
export const RETRY_AFTER_S = 5
/** A refused address is logged at most once in this window. */
const LOG_WINDOW_MS = 60_000

/** The status a connection over a bound is answered with, then closed. */
export type RefusedStatus = 429 | 503

const refused = new WeakMap<Socket, RefusedStatus>()

/** 429 or 503 when `socket` came over a bound (the HTTP edge answers its parser errors so too). */
export function refusedStatus (socket: Socket): RefusedStatus | undefined {
  return refused.get(socket)
}

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

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Bounds the connections of `server` (the admin listener's) as the public server's are:
     * over a bound, answered 429 or 503 and closed, beyond the hard cap dropped.
     */
    limitConnections: (server: Server, bounds: ConnectionBounds) => void
  }
}

export default fp(async function connectionLimits (fastify) {
  const { config, log, server } = fastify
  const max = config.MAX_CONNECTIONS
  const maxPerAddress = config.MAX_CONNECTIONS_PER_ADDRESS
  if (maxPerAddress > max) {
    throw new Error(`MAX_CONNECTIONS_PER_ADDRESS (${maxPerAddress}) must not be more than MAX_CONNECTIONS (${max})`)
  }
  const highWater = Math.floor(max * HIGH_WATER_FRACTION)
  const lowWater = Math.floor(max * LOW_WATER_FRACTION)
  const keepAliveTimeout = server.keepAliveTimeout

  let logged = new Set<string>()
  const logWindow = setInterval(() => { logged = new Set() }, LOG_WINDOW_MS).unref()
  fastify.addHook('onClose', async () => clearInterval(logWindow))

  function logOnce (address: string, kind: string, fields: object, message: string) {
    const key = `${kind} ${address}`
    if (logged.has(key)) return
    logged.add(key)
    log.warn({ address, ...fields }, message)
  }

  /**
   * Counts `target`'s connections against `bounds`, marks those over a bound as refused (the
   * `onRequest` hook below answers them), and hands each counted one to `counted`.
   */
  function limitConnections (target: Server, bounds: ConnectionBounds, counted?: (socket: Socket) => void) {
    let open = 0
    const perAddress = new Map<string, number>()
    target.maxConnections = bounds.hardCap
    target.on('connection', (socket: Socket) => {
      const address = addressKey(socket.remoteAddress)
      const held = perAddress.get(address) ?? 0
      const status = open >= bounds.max ? 503 : held >= bounds.maxPerAddress ? 429 : undefined
      if (status !== undefined) {
        refused.set(socket, status)
        if (status === 503) {
          logOnce(address, `total ${bounds.names.max}`, { open, bound: bounds.max }, `connection over ${bounds.names.max}: answered 503 and closed`)
        } else {
          logOnce(address, `address ${bounds.names.max}`, { held, bound: bounds.maxPerAddress }, `connection over ${bounds.names.maxPerAddress}: answered 429 and closed`)
        }
        return
      }
      open++
      perAddress.set(address, held + 1)
      socket.once('close', () => {
        open--
        const left = (perAddress.get(address) ?? 1) - 1
        if (left === 0) perAddress.delete(address)
        else perAddress.set(address, left)
      })
      counted?.(socket)
    })
    target.on('drop', (data?: { remoteAddress?: string }) => {
      logOnce(addressKey(data?.remoteAddress), `drop ${bounds.names.max}`, { bound: bounds.hardCap },
        'connection dropped unanswered: the process holds as many as its file descriptors allow')
    })
  }
  fastify.decorate('limitConnections', (target: Server, bounds: ConnectionBounds) => limitConnections(target, bounds))

  /** Requests in flight per counted connection (one entry per open one); 0 after a response: idle */
  const inFlight = new Map<Socket, number>()
  let shedding = false

  function startShedding () {
    shedding = true
    server.keepAliveTimeout = IDLE_SHED_MS
    // Those idle already were promised the long timeout: their timer restarts with the short one
    for (const [socket, requests] of inFlight) {
      if (requests === 0) socket.setTimeout(IDLE_SHED_MS)
    }
    log.warn({ open: inFlight.size, highWater, idleMs: IDLE_SHED_MS }, 'many connections open: idle keep-alive connections are closed sooner')
  }

  function stopShedding () {
    shedding = false
    server.keepAliveTimeout = keepAliveTimeout
    log.info({ open: inFlight.size, lowWater }, 'connections back to normal: idle keep-alive connections kept as usual')
  }

  limitConnections(server, {
    max,
    maxPerAddress,
    hardCap: CONNECTION_HARD_CAP,
    names: { max: 'MAX_CONNECTIONS', maxPerAddress: 'MAX_CONNECTIONS_PER_ADDRESS' }
  }, (socket) => {
    inFlight.set(socket, -1)
    if (!shedding && inFlight.size > highWater) startShedding()
    socket.once('close', () => {
      inFlight.delete(socket)
      if (shedding && inFlight.size < lowWater) stopShedding()
    })
  })

  // A connection never answered yet (-1) is not idle: Node's 5 s headers timeout covers it
  server.on('request', (request, response) => {
    const socket = request.socket
    const requests = inFlight.get(socket)
    if (requests === undefined) return
    inFlight.set(socket, Math.max(requests, 0) + 1)
    // `on`, not `once`: a response closes once, and `once` wraps and removes on every request
    response.on('close', () => {
      const left = inFlight.get(socket)
      if (left !== undefined) inFlight.set(socket, left - 1)
    })
  })

  fastify.addHook('onRequest', function (request, reply, done) {
    const status = refused.get(request.raw.socket)
    if (status === undefined) return done()
    // The log line that matters is the one per address above, not one per request
    logRequestAtDebug(request)
    reply.code(status).header('retry-after', String(RETRY_AFTER_S)).header('connection', 'close')
      .send(failure(status, refusedMessage(status)))
  })
}, { name: 'connection-limits', dependencies: ['env', 'lingering-close'] })

/**
 * Adds `fastify.connections`, the one owner of every client connection's state
 * (src/connections.ts), attached to the public server with MAX_CONNECTIONS,
 * MAX_CONNECTIONS_PER_ADDRESS, the hard cap, SEND_TIMEOUT_MS and the shedding of idle
 * connections; `fastify.isClosing` and `fastify.beginShutdown`, the state "the server is
 * shutting down" for whatever must act on it (readiness answers 503 from then on,
 * routes/health.ts); and the hooks that answer for them:
 *
 * - `onRequest`: a connection over a bound is answered 429 or 503 with `Retry-After` and
 *   `Connection: close` (then closed lingering), before any other hook;
 * - `onTimeout`: logs, once, each request the send timeout cuts off;
 * - `preClose`: the drain. It stops accepting but leaves the open connections alone:
 *   `http.Server.close()` (what Fastify's `close()` calls) would also close every idle keep-alive
 *   connection at once, racing a client that is sending its next request on it at that moment
 *   (the client sees a reset). Answers that wait on their client get the drain's short send
 *   timeout, and only what is still idle after IDLE_CONNECTION_GRACE_MS is left to Fastify's
 *   close;
 * - `onSend`: while draining, every response says `Connection: close` (requests in flight
 *   included), so each client ends its own connection after its answer. After a signal the
 *   listener closes before any such answer goes out, so no client is reconnecting while it
 *   closes (a connection waiting to be accepted then would be reset);
 * - `onClose`: stops the timers and logs, once, how many connections the drain cut off.
 */
import fp from 'fastify-plugin'
import { CONNECTION_HARD_CAP } from '../../src/config.js'
import { RETRY_AFTER_S, refusedMessage } from '../../src/connection-bounds.js'
import { Connections, DRAIN_SEND_TIMEOUT_MS } from '../../src/connections.js'
import { failure } from '../../src/envelope.js'
import { stopAccepting } from '../../src/node-internals.js'
import { logRequestAtDebug, logStalledResponse } from '../../src/request-log.js'

/**
 * How long, once the server has stopped accepting, a keep-alive connection that carries no
 * request is left open for its client. A client that keeps using its connection sends its next
 * request well within this, gets its answer with `Connection: close` and reconnects elsewhere; a
 * connection that stayed idle all along is then closed, so a client that parked one and never
 * comes back holds the exit back by this long at most (instead of the 72 s keep-alive timeout).
 */
export const IDLE_CONNECTION_GRACE_MS = 2000

declare module 'fastify' {
  interface FastifyInstance {
    /** Every client connection of the public server and the admin listener (src/connections.ts). */
    connections: Connections
    /** Whether shutdown has begun (a signal, `close()`): the one such state of the app. */
    isClosing: () => boolean
    /**
     * Shutdown asked for by a signal (src/signals.ts): readiness answers 503 from now on, while
     * every other request, on new connections too, is served as before for SHUTDOWN_DELAY_MS, so
     * a load balancer takes the instance out before it stops accepting; then it stops accepting.
     * Resolves when the instance may be closed. `close()` alone closes without this delay.
     */
    beginShutdown: (signal: string) => Promise<void>
  }
}

export default fp(async function connectionsPlugin (fastify) {
  const { config, log, server } = fastify
  const max = config.MAX_CONNECTIONS
  const maxPerAddress = config.MAX_CONNECTIONS_PER_ADDRESS
  if (maxPerAddress > max) {
    throw new Error(`MAX_CONNECTIONS_PER_ADDRESS (${maxPerAddress}) must not be more than MAX_CONNECTIONS (${max})`)
  }
  const connections = new Connections(log)
  connections.attach(server, {
    bounds: { max, maxPerAddress, hardCap: CONNECTION_HARD_CAP, names: { max: 'MAX_CONNECTIONS', maxPerAddress: 'MAX_CONNECTIONS_PER_ADDRESS' } },
    sendTimeoutMs: config.SEND_TIMEOUT_MS,
    shedIdle: true
  })
  fastify.decorate('connections', connections)

  let state: 'serving' | 'leaving' | 'draining' = 'serving'
  let drainingSince = 0
  let drained: Promise<unknown> = Promise.resolve()

  function drain () {
    if (state === 'draining') return
    state = 'draining'
    drainingSince = performance.now()
    if (!server.listening) return
    log.info('server closing: accepting no more connections, finishing the requests in flight')
    // Resolves once the last connection has ended
    drained = new Promise<void>((resolve) => stopAccepting(server, resolve))
  }

  fastify.decorate('isClosing', () => state !== 'serving')

  fastify.decorate('beginShutdown', async function (signal: string) {
    if (state !== 'serving') return
    state = 'leaving'
    const delayMs = config.SHUTDOWN_DELAY_MS
    log.info({ signal, delayMs }, 'shutdown begins: not ready, still serving until the delay is over')
    await new Promise((resolve) => setTimeout(resolve, delayMs))
    drain()
  })

  fastify.addHook('onRequest', function (request, reply, done) {
    const status = connections.refusedStatus(request.raw.socket)
    if (status === undefined) return done()
    // The log line that matters is the one per address (src/connection-bounds.ts), not one per request
    logRequestAtDebug(request)
    reply.code(status).header('retry-after', String(RETRY_AFTER_S)).header('connection', 'close')
      .send(failure(status, refusedMessage(status)))
  })

  // Runs after Node has destroyed the socket (its listener comes first)
  fastify.addHook('onTimeout', function (request, reply, done) {
    logStalledResponse(request, reply, connections.sendTimeoutOf(request.raw.socket) ?? config.SEND_TIMEOUT_MS)
    done()
  })

  fastify.addHook('preClose', async function () {
    // The short send timeout first, so that the waits below are not for clients that read nothing
    connections.drain()
    drain()
    let timer: NodeJS.Timeout | undefined
    const idleGraceOver = new Promise((resolve) => {
      timer = setTimeout(resolve, IDLE_CONNECTION_GRACE_MS - (performance.now() - drainingSince))
    })
    // Fastify's close then ends the connections still idle, and waits for those in use
    await Promise.race([drained, idleGraceOver])
    clearTimeout(timer)
  })

  fastify.addHook('onSend', function (request, reply, payload, done) {
    if (state === 'draining' && request.raw.httpVersionMajor === 1) reply.header('connection', 'close')
    done(null, payload)
  })

  fastify.addHook('onClose', function (instance, done) {
    const cutOff = connections.close()
    // One line for all: a response in progress was logged by the onTimeout hook too
    if (cutOff > 0) log.warn({ connections: cutOff, drainSendTimeoutMs: DRAIN_SEND_TIMEOUT_MS }, 'connections cut off while draining: their clients took none of their answers')
    done()
  })
}, { name: 'connections', dependencies: ['env'] })

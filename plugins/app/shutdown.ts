/**
 * Adds `fastify.isClosing` and `fastify.beginShutdown`, the state "the server is shutting down"
 * for whatever must act on it (readiness answers 503 from then on, routes/health.ts), and a
 * shutdown that drops no request: a `preClose` hook that stops accepting and gives idle
 * connections their grace, and an `onSend` hook that says `Connection: close` while draining.
 *
 * It stops accepting but leaves the open connections alone: `http.Server.close()` (what
 * Fastify's `close()` calls) would also close every idle keep-alive connection at once, racing a
 * client that is sending its next request on it at that moment (the client sees a reset).
 * Instead every response from then on says `Connection: close` (requests in flight included),
 * so each client ends its own connection after its answer, and only what is still idle after
 * `IDLE_CONNECTION_GRACE_MS` is left to Fastify's close. After a signal the listener closes
 * before any such answer goes out, so no client is reconnecting while it closes (a connection
 * waiting to be accepted then would be reset).
 */
import { Server as NetServer } from 'node:net'
import fp from 'fastify-plugin'

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

export default fp(async function shutdown (fastify) {
  const { config, log, server } = fastify
  let state: 'serving' | 'leaving' | 'draining' = 'serving'
  let drainingSince = 0
  let drained: Promise<unknown> = Promise.resolve()

  function stopAccepting () {
    if (state === 'draining') return
    state = 'draining'
    drainingSince = performance.now()
    if (!server.listening) return
    log.info('server closing: accepting no more connections, finishing the requests in flight')
    // The listener only (net.Server's close, not http.Server's); resolves once the last
    // connection has ended
    drained = new Promise((resolve) => NetServer.prototype.close.call(server, resolve))
  }

  fastify.decorate('isClosing', () => state !== 'serving')

  fastify.decorate('beginShutdown', async function (signal: string) {
    if (state !== 'serving') return
    state = 'leaving'
    const delayMs = config.SHUTDOWN_DELAY_MS
    log.info({ signal, delayMs }, 'shutdown begins: not ready, still serving until the delay is over')
    await new Promise((resolve) => setTimeout(resolve, delayMs))
    stopAccepting()
  })

  fastify.addHook('preClose', async function () {
    stopAccepting()
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
}, { name: 'shutdown', dependencies: ['env'] })

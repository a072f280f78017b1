/**
 * Adds the server's socket timeout, `SEND_TIMEOUT_MS`, and an `onTimeout` hook that logs, once,
 * each request it cuts off: a response whose client takes none of it for that long has its
 * socket destroyed. Without this, a client that asks for a long listing and stops reading keeps
 * its connection, its place in the kernel's buffers and the pages the service holds for it, for
 * ever. Once a shutdown drains the connections (a `preClose` hook), a response whose client
 * takes none of it is cut off after DRAIN_SEND_TIMEOUT_MS instead: the close would otherwise
 * wait on it, and on the pipelined requests behind it, until the grace of `-g` ran out. An
 * `onClose` hook stops that watch and logs, once, how many it cut.
 *
 * The mechanism is Node's socket timeout (`server.timeout`, what Fastify's `connectionTimeout`
 * sets): Node destroys a connection that has no activity for that long. While a write is pending,
 * Node counts every byte the kernel takes as activity (`Socket#_onTimeout` compares the write
 * queue with its last size), so a client that reads slowly but steadily is never cut. Between
 * requests of a keep-alive connection Node uses `keepAliveTimeout` (72 s, src/app.ts) instead,
 * and restores this one when the next request arrives. Set here rather than in the server
 * options because it comes from the configuration. While a request is received, the headers
 * and request timeouts (5 s, 10 s) come first; a handler waits for the database at most
 * DATABASE_CALL_BOUND_MS (5 s), which the setting's minimum stays well above.
 */
import type { Socket } from 'node:net'
import fp from 'fastify-plugin'
import { logStalledResponse } from '../../src/request-log.js'

/**
 * While a shutdown drains: how long a client may take none of its answer before it is cut off.
 * Node looks twice before it cuts (a write that was in progress when the timer started counts as
 * progress once), so the cut comes 1 to 2 s after the client's last byte.
 */
export const DRAIN_SEND_TIMEOUT_MS = 1000
/** How often the drain looks for answers that wait on their client. */
const DRAIN_CHECK_MS = 250

export default fp(async function sendTimeout (fastify) {
  const { SEND_TIMEOUT_MS } = fastify.config
  const { server } = fastify
  server.setTimeout(SEND_TIMEOUT_MS)
  const open = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    open.add(socket)
    socket.once('close', () => open.delete(socket))
  })

  // Only a socket with bytes waiting for its client gets the short timeout: Node counts the bytes
  // the kernel takes as activity, so a client that reads on is not cut, and a request that waits
  // on the database (nothing to write yet) keeps SEND_TIMEOUT_MS. Each socket once: setting the
  // timeout again would restart it.
  const shortened = new WeakSet<Socket>()
  let draining: NodeJS.Timeout | undefined
  let cutOff = 0
  fastify.addHook('preClose', function (done) {
    const shorten = () => {
      for (const socket of open) {
        if (socket.writableLength > 0 && !shortened.has(socket)) {
          shortened.add(socket)
          socket.setTimeout(DRAIN_SEND_TIMEOUT_MS)
          socket.once('timeout', () => cutOff++)
        }
      }
    }
    shorten()
    draining = setInterval(shorten, DRAIN_CHECK_MS).unref()
    done()
  })
  fastify.addHook('onClose', function (instance, done) {
    clearInterval(draining)
    // One line for all: a response in progress was logged by the hook below too
    if (cutOff > 0) fastify.log.warn({ connections: cutOff, drainSendTimeoutMs: DRAIN_SEND_TIMEOUT_MS }, 'connections cut off while draining: their clients took none of their answers')
    done()
  })
  // Runs after Node has destroyed the socket (its listener comes first)
  fastify.addHook('onTimeout', function (request, reply, done) {
    logStalledResponse(request, reply, shortened.has(request.raw.socket) ? DRAIN_SEND_TIMEOUT_MS : SEND_TIMEOUT_MS)
    done()
  })
}, { name: 'send-timeout', dependencies: ['env'] })

/**
 * Adds the server's socket timeout, `SEND_TIMEOUT_MS`, and an `onTimeout` hook that logs, once,
 * each request it cuts off: a response whose client takes none of it for that long has its
 * socket destroyed. Without this, a client that asks for a long listing and stops reading keeps
 * its connection, its place in the kernel's buffers and the pages the service holds for it, for
 * ever.
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
import fp from 'fastify-plugin'
import { logStalledResponse } from '../../src/request-log.js'

export default fp(async function sendTimeout (fastify) {
  const { SEND_TIMEOUT_MS } = fastify.config
  fastify.server.setTimeout(SEND_TIMEOUT_MS)
  // Runs after Node has destroyed the socket (its listener comes first)
  fastify.addHook('onTimeout', function (request, reply, done) {
    logStalledResponse(request, reply, SEND_TIMEOUT_MS)
    done()
  })
}, { name: 'send-timeout', dependencies: ['env'] })

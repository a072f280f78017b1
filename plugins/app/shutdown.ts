import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyInstance {
    /** Whether shutdown has begun (SIGTERM, `close()`): the one such state of the app. */
    isClosing: () => boolean
  }
}

/**
 * The state "the server is closing", for whatever must act on it (readiness answers 503 from
 * then on, routes/health.ts), and what shutdown itself needs: the server stops accepting and
 * closes idle keep-alive connections, but a connection busy with a request when shutdown starts
 * would stay open after its response until the keep-alive timeout, holding the exit back. Such
 * responses say `Connection: close`, so the client reconnects elsewhere and the socket ends as
 * soon as the response is sent.
 */
export default fp(async function shutdown (fastify) {
  let closing = false
  fastify.decorate('isClosing', () => closing)
  fastify.addHook('preClose', function (done) {
    closing = true
    done()
  })
  fastify.addHook('onSend', function (request, reply, payload, done) {
    if (closing && request.raw.httpVersionMajor === 1) reply.header('connection', 'close')
    done(null, payload)
  })
}, { name: 'shutdown' })

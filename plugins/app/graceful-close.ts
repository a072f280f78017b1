import fp from 'fastify-plugin'

/**
 * On shutdown the server stops accepting and closes idle keep-alive connections, but a
 * connection busy with a request when shutdown starts would stay open after its response until
 * the keep-alive timeout, holding the exit back. Such responses say `Connection: close`, so the
 * client reconnects elsewhere and the socket ends as soon as the response is sent.
 */
export default fp(async function gracefulClose (fastify) {
  let closing = false
  fastify.addHook('preClose', async function () {
    closing = true
  })
  fastify.addHook('onSend', function (request, reply, payload, done) {
    if (closing && request.raw.httpVersionMajor === 1) reply.header('connection', 'close')
    done(null, payload)
  })
}, { name: 'graceful-close' })

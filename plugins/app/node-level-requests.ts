import fp from 'fastify-plugin'
import { Message } from '../../src/envelope.js'
import { ApiError, endSocketWithEnvelope } from '../../src/errors.js'

/**
 * Node's HTTP server answers a few requests itself, outside the envelope, unless someone else
 * does: CONNECT (it drops the socket), an `Expect` other than `100-continue` (an empty 417) and
 * an HTTP/1.1 request without `Host` (an empty 400; its check is turned off in the server
 * options so that this one answers instead).
 */
export default fp(async function nodeLevelRequests (fastify) {
  fastify.server.on('connect', (request, socket) => {
    endSocketWithEnvelope(socket, 405, 'Allow: GET, HEAD, POST, PUT, DELETE\r\n')
  })
  fastify.server.on('checkExpectation', (request, response) => {
    endSocketWithEnvelope(response.socket!, 417)
  })
  fastify.addHook('onRequest', function (request, reply, done) {
    // RFC 9112 section 3.2: a server must answer 400 to an HTTP/1.1 request without Host
    done(request.headers.host === undefined && request.raw.httpVersion === '1.1'
      ? new ApiError(400, Message.BadRequest)
      : undefined)
  })
}, { name: 'node-level-requests' })

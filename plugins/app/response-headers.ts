/**
 * Adds an `onSend` hook that sets the headers of every response (`setResponseHeaders`, below).
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'

/**
 * Headers on every response: `nosniff`, since the bodies are JSON and must never be taken for
 * anything else, and the request id that the log line of this request carries, so a client's
 * report can be matched to the log. Exported for the one response that skips the hooks
 * (plugins/app/http-edge.ts).
 */
export function setResponseHeaders (request: FastifyRequest, reply: FastifyReply) {
  reply.header('x-content-type-options', 'nosniff')
  reply.header('x-request-id', request.id)
}

export default fp(async function responseHeaders (fastify) {
  // Callback style: this runs on every response, and an async hook costs a promise each time
  fastify.addHook('onSend', function (request, reply, payload, done) {
    setResponseHeaders(request, reply)
    done(null, payload)
  })
}, { name: 'response-headers', dependencies: ['connections'] })

import { LogController, type FastifyReply, type FastifyRequest } from 'fastify'

/**
 * One log line per request, written when the response has gone out (or could not go out in
 * full): request id (`reqId`), method, matched route, URL, status and time in milliseconds. It
 * replaces Fastify's two lines (incoming, completed), which say less; headers and bodies are
 * never logged. It also covers what skips the hooks, like an undecodable URL.
 */
export class RequestLogController extends LogController {
  override incomingRequest () {}

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    if (error) request.log.warn({ ...fields(request, reply), err: error }, 'request failed in transit')
    else request.log.info(fields(request, reply), 'request')
  }

  /** A streamed body (a long GET /books) that ended before its last byte. */
  override streamError (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply) {
    if (error.code === 'ERR_STREAM_PREMATURE_CLOSE') {
      request.log.info(fields(request, reply), 'request ended by the client')
    } else {
      request.log.error({ ...fields(request, reply), err: error }, 'response cut off after its status was sent')
    }
  }
}

function fields (request: FastifyRequest, reply: FastifyReply) {
  return {
    method: request.method,
    route: request.routeOptions.url ?? null,
    url: request.url,
    statusCode: reply.statusCode,
    responseTime: Math.round(reply.elapsedTime * 100) / 100
  }
}

import { LogController, type FastifyReply, type FastifyRequest } from 'fastify'

/**
 * One log line per request, written when the response has gone out (or the connection failed
 * under it): request id (`reqId`), method, matched route, URL, status and time in
 * milliseconds. It replaces Fastify's two lines (incoming, completed), which say less; headers
 * and bodies are never logged. It also covers what skips the hooks, like an undecodable URL.
 */
export class RequestLogController extends LogController {
  override incomingRequest () {}

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    const line = {
      method: request.method,
      route: request.routeOptions.url ?? null,
      url: request.url,
      statusCode: reply.statusCode,
      responseTime: Math.round(reply.elapsedTime * 100) / 100
    }
    if (error) request.log.warn({ ...line, err: error }, 'request failed in transit')
    else request.log.info(line, 'request')
  }
}

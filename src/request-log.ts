import { LogController, type FastifyReply, type FastifyRequest } from 'fastify'
import { ListingOverBudget } from './listing.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The level of this route's request line, `info` unless given. The health checks, polled
     * every second or so by machines, use `debug`: at `info` they would drown the other lines.
     */
    requestLogLevel?: 'debug' | 'info'
  }
}

const atDebug = new WeakSet<FastifyRequest>()

/**
 * Writes this request's line at `debug`: for answers that are logged otherwise already, once for
 * many (a connection over a bound, src/connection-bounds.ts).
 */
export function logRequestAtDebug (request: FastifyRequest) {
  atDebug.add(request)
}

/**
 * One log line per request, written when the response has gone out (or could not go out in
 * full): request id (`reqId`), method, matched route, path, status and time in milliseconds. It
 * replaces Fastify's two lines (incoming, completed), which say less; headers, bodies and query
 * strings are never logged. It also covers what skips the hooks, like an undecodable URL.
 */
class RequestLogController extends LogController {
  override incomingRequest () {}

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply) {
    // routeOptions builds a new object on each read: read it once
    const route = request.routeOptions
    if (error) {
      request.log.warn({ ...fields(request, reply, route), err: error }, 'request failed in transit')
      return
    }
    const level = atDebug.has(request) ? 'debug' : route.config?.requestLogLevel ?? 'info'
    request.log[level](fields(request, reply, route), 'request')
  }

  /** A streamed body (a long GET /books) that ended before its last byte. */
  override streamError (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply) {
    // Cut off by the send timeout: logged as such already
    if (stalled.has(request)) return
    if (error.code === 'ERR_STREAM_PREMATURE_CLOSE') {
      request.log.info(fields(request, reply), 'request ended by the client')
    } else if (error instanceof ListingOverBudget) {
      // What the client asked for costs too much: no fault of the service
      request.log.warn({ ...fields(request, reply), budgetMs: error.budgetMs }, 'listing cut off: a page ran past LISTING_BUDGET_MS')
    } else {
      request.log.error({ ...fields(request, reply), err: error }, 'response cut off after its status was sent')
    }
  }
}

/** Requests whose connection the send timeout cut (src/connections.ts). */
const stalled = new WeakSet<FastifyRequest>()

/**
 * The one line of a response cut off because its client took none of it for `sendTimeoutMs`;
 * the broken stream that follows is then not logged again as ended by the client.
 */
export function logStalledResponse (request: FastifyRequest, reply: FastifyReply, sendTimeoutMs: number) {
  stalled.add(request)
  request.log.warn({ ...fields(request, reply), sendTimeoutMs }, 'response cut off: the client took none of it')
}

/** The one controller: it keeps no state, and the HTTP edge writes its lines too. */
export const requestLog = new RequestLogController()

/**
 * The request target without its query string: no route reads a query, and a client may put
 * anything there, a token (`?token=...`) among it, which must not reach the log.
 */
function pathOf (url: string): string {
  const query = url.indexOf('?')
  return query === -1 ? url : url.slice(0, query)
}

function fields (request: FastifyRequest, reply: FastifyReply, route = request.routeOptions) {
  return {
    method: request.method,
    route: route.url ?? null,
    url: pathOf(request.url),
    statusCode: reply.statusCode,
    responseTime: Math.round(reply.elapsedTime * 100) / 100
  }
}

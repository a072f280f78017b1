/**
 * Adds, in the envelope, everything about requests that Node's HTTP layer answers itself or that
 * no route matches:
 *
 * - listeners on the server's `connect` and `checkExpectation` events;
 * - an `onRequest` hook that answers 400 to an HTTP/1.1 request without `Host` or to one with
 *   two, 431 to one with more than MAX_HEADER_FIELDS fields, and 505 to a request line of
 *   another HTTP version than 1.x;
 * - the not-found handler: 405 with `Allow` when the path has routes for other methods, else 404;
 * - for the server options of src/app.ts, `clientErrorHandler` and `frameworkErrors` (below).
 *
 * Node answers a few requests outside the envelope unless someone else does: CONNECT (it drops
 * the socket), an `Expect` other than `100-continue` (an empty 417) and an HTTP/1.1 request
 * without `Host` (an empty 400; its check is turned off in the server options so that the hook
 * here answers instead).
 */
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Message, failure, statusMessage, type MessageText } from '../../src/envelope.js'
import { RETRY_AFTER_S, refusedMessage } from '../../src/connection-bounds.js'
import type { Connections } from '../../src/connections.js'
import { ApiError, errorHandler } from '../../src/errors.js'
import { fieldCount, METHODS } from '../../src/http.js'
import { requestLog } from '../../src/request-log.js'
import { setResponseHeaders } from './response-headers.js'

/**
 * Answers in the envelope on the raw socket, then closes it lingering (`connections`): for
 * requests Node's HTTP server handles itself, before or instead of Fastify. `head`: the request
 * was a HEAD, so the answer has no body (RFC 9110 section 9.3.2); a body would be read as the
 * start of the next response on the connection.
 */
export function endSocketWithEnvelope (
  connections: Pick<Connections, 'closeLingering'>, socket: Duplex, status: number, headers = '',
  { head = false, message = statusMessage(status) }: { head?: boolean, message?: MessageText } = {}
) {
  const body = JSON.stringify(failure(status, message))
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\n' +
      'X-Content-Type-Options: nosniff\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n${headers}` +
      `Connection: close\r\n\r\n${head ? '' : body}`)
  }
  connections.closeLingering(socket)
}

/**
 * Whether the request the parser failed on is a HEAD. The parser may have failed before it had
 * the method, so it is read from the bytes it was given (`rawPacket`, present on parse errors;
 * a timeout has none, and is answered as to a GET).
 */
function isHead (error: NodeJS.ErrnoException & { rawPacket?: unknown }): boolean {
  return Buffer.isBuffer(error.rawPacket) && error.rawPacket.subarray(0, 5).toString('latin1') === 'HEAD '
}

/**
 * The `clientErrorHandler` server option: requests Node's HTTP parser rejects (oversized
 * headers, bad syntax, timeouts). A server option, not a hook: Fastify installs it when the
 * server is created, bound to the instance (`this`), whose `connections` know the socket. A
 * connection over a bound (src/connection-bounds.ts) gets its 429 or 503 instead; one being closed
 * already gets nothing more.
 */
export function clientErrorHandler (this: Pick<FastifyInstance, 'connections'>, error: NodeJS.ErrnoException & { rawPacket?: unknown }, socket: Socket) {
  const { connections } = this
  if (error.code === 'ECONNRESET' || socket.destroyed || connections.isLingering(socket)) return
  const head = isHead(error)
  const refused = connections.refusedStatus(socket)
  if (refused !== undefined) {
    endSocketWithEnvelope(connections, socket, refused, `Retry-After: ${RETRY_AFTER_S}\r\n`, { head, message: refusedMessage(refused) })
    return
  }
  const status = error.code === 'HPE_HEADER_OVERFLOW'
    ? 431
    : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : error.code === 'HPE_INVALID_VERSION' ? 505 : 400
  endSocketWithEnvelope(connections, socket, status, '', { head })
}

/**
 * The `frameworkErrors` server option: a URL the router cannot decode. Such a request skips
 * every hook and response listener, so the headers, the log line and the metrics are done here.
 * `request.server` is the root instance, where the app's decorators are (src/app.ts).
 */
export function frameworkErrors (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  setResponseHeaders(request, reply)
  errorHandler(error, request, reply)
  requestLog.requestCompleted(null, request, reply)
  request.server.metrics.observe(request, reply)
}

/**
 * The most header fields a request may have, as Apache's `LimitRequestFields` and HAProxy's
 * `tune.http.maxhdr` allow (about 100); browsers send 10 to 20. Node's parser reads up to 1,000
 * (`maxHeadersCount`) and drops the rest without a word: a request with more than this is
 * answered 431, so no check ever works on a shortened list.
 */
export const MAX_HEADER_FIELDS = 100

export default fp(async function httpEdge (fastify) {
  const { connections } = fastify
  fastify.server.on('connect', (request, socket) => {
    // The version first, as for every other method (the onRequest hook below)
    if (request.httpVersionMajor !== 1) endSocketWithEnvelope(connections, socket, 505)
    else endSocketWithEnvelope(connections, socket, 405, `Allow: ${METHODS.join(', ')}\r\n`)
  })
  fastify.server.on('checkExpectation', (request, response) => {
    endSocketWithEnvelope(connections, response.socket!, 417, '', { head: request.method === 'HEAD' })
  })

  fastify.addHook('onRequest', function (request, reply, done) {
    const { httpVersionMajor, httpVersion, rawHeaders } = request.raw
    // Node's parser takes `HTTP/2.0` in a request line and serves it as 1.1, while it refuses
    // `HTTP/1.2` (clientErrorHandler): both are versions this server does not speak
    if (httpVersionMajor !== 1) {
      // What else such a client sends on this connection would not be HTTP/1.1 either
      reply.header('connection', 'close')
      return done(new ApiError(505, Message.HttpVersionNotSupported))
    }
    // Past this, Node may have dropped fields, and a check of the headers (a second
    // Authorization, a second Host) would see a shortened list
    if (rawHeaders.length > 2 * MAX_HEADER_FIELDS) return done(new ApiError(431, Message.HeadersTooLarge))
    // RFC 9112 section 3.2: a server must answer 400 to an HTTP/1.1 request without Host, and
    // to any request with more than one (Node keeps the first)
    const hosts = request.headers.host === undefined ? 0 : fieldCount(rawHeaders, 'host')
    done((hosts === 0 && httpVersion === '1.1') || hosts > 1 ? new ApiError(400, Message.BadRequest) : undefined)
  })

  fastify.setNotFoundHandler(function (request, reply) {
    const [path = ''] = request.url.split('?', 1)
    // Only the routes of the listener the request came through (plugins/app/admin-listener.ts)
    const constraints = fastify.listenerConstraints(request.raw)
    const allowed = METHODS.filter((method) => fastify.findRoute({ method, url: path, constraints }) !== null)
    // A route of this very method that found nothing (a missing file under /docs/static/*) is a 404
    if (allowed.length > 0 && !allowed.includes(request.method as typeof METHODS[number])) {
      return reply.code(405).header('allow', allowed.join(', ')).send(failure(405, Message.MethodNotAllowed))
    }
    return reply.code(404).send(failure(404, Message.RouteNotFound))
  })
}, { name: 'http-edge', dependencies: ['connections', 'admin-listener'] })

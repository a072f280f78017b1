import { randomUUID } from 'node:crypto'
import type { Server } from 'node:http'
import type { FastifyHttpOptions, FastifyInstance } from 'fastify'
import cors from '../plugins/external/cors.js'
import * as env from '../plugins/external/env.js'
import * as jwt from '../plugins/external/jwt.js'
import * as rateLimit from '../plugins/external/rate-limit.js'
import * as swaggerUi from '../plugins/external/swagger-ui.js'
import swagger from '../plugins/external/swagger.js'
import postgres from '../plugins/external/postgres.js'
import authenticate from '../plugins/app/authenticate.js'
import booksRepository from '../plugins/app/books-repository.js'
import gracefulClose from '../plugins/app/graceful-close.js'
import metrics, { metricsOf } from '../plugins/app/metrics.js'
import migrate from '../plugins/app/migrate.js'
import nodeLevelRequests from '../plugins/app/node-level-requests.js'
import responseHeaders, { setResponseHeaders } from '../plugins/app/response-headers.js'
import books from '../routes/books.js'
import health from '../routes/health.js'
import metricsRoute from '../routes/metrics.js'
import token from '../routes/token.js'
import { Message, failure } from './envelope.js'
import { clientErrorHandler, errorHandler } from './errors.js'
import { RequestLogController } from './request-log.js'

// No OPTIONS: no route of ours has it, and with CORS on, the preflight route matches every path
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'] as const

const requestLog = new RequestLogController()

/**
 * Server options. `fastify start -o` applies them, and the tests build the app through the
 * same fastify-cli helper, so both run with exactly these.
 */
export const options: FastifyHttpOptions<Server> = {
  // A book is a few hundred bytes; 64 KiB leaves ample room and caps what a client can make us parse
  bodyLimit: 64 * 1024,
  // Fastify sets no limit by default: a client trickling its body would hold a socket forever
  requestTimeout: 10_000,
  // Above the 60 s idle timeout of common load balancers, so they close first (Fastify's default)
  keepAliveTimeout: 72_000,
  http: {
    headersTimeout: 5_000,
    // How often Node enforces the two timeouts above; its default of 30 s would blur them
    connectionsCheckingInterval: 1_000,
    // plugins/app/node-level-requests.ts answers a missing Host in the envelope instead
    requireHostHeader: false
  },
  // The spec's fields have fixed types: "1999" must not become 1999, nor null become ""
  ajv: { customOptions: { coerceTypes: false } },
  // Fastify's own 503 while closing is not an envelope; in-flight requests finish instead
  return503OnClosing: false,
  // The embedded database (DB_URL=pglite:...) creates its cluster on first start: several
  // seconds, more on a busy machine, where fastify-cli would give up on a plugin after 10 s
  pluginTimeout: 60_000,
  clientErrorHandler,
  // A URL the router cannot decode skips every hook and response listener: set the headers,
  // write the log line and count the request here
  frameworkErrors (error, request, reply) {
    setResponseHeaders(request, reply)
    errorHandler(error, request, reply)
    requestLog.requestCompleted(null, request, reply)
    metricsOf(request.server.server)?.observe(request, reply)
  },
  logController: requestLog,
  // An over-long id is still just an id no book has (404), not a 414
  routerOptions: { maxParamLength: 16 * 1024 },
  genReqId: () => randomUUID(),
  logger: {
    // Nothing logs headers, bodies or configuration today; this keeps a future line from leaking
    // them. Exact paths only: wildcards made redaction a fifth of the CPU time of a request
    redact: {
      paths: [
        'req.headers.authorization', 'headers.authorization', 'password', 'token',
        'body.password', 'body.token', 'config.SECRET_TOKEN', 'config.AUTH_PASSWORD', 'config.DB_URL'
      ],
      censor: '[redacted]'
    }
  }
}

export default async function app (fastify: FastifyInstance) {
  // Order matters: configuration first; then what applies to every response; then the
  // database (migrated before anything queries it), then the token machinery, then the routes
  // that use all of them
  await fastify.register(env.default, env.autoConfig)
  await fastify.register(gracefulClose)
  await fastify.register(responseHeaders)
  await fastify.register(cors)
  await fastify.register(nodeLevelRequests)
  await fastify.register(postgres)
  await fastify.register(migrate)
  await fastify.register(metrics)
  await fastify.register(jwt.default, jwt.autoConfig)
  await fastify.register(rateLimit.default, rateLimit.autoConfig)
  await fastify.register(authenticate)
  await fastify.register(booksRepository)

  // Bodies are JSON only; anything else is 415 rather than a string that fails validation
  fastify.removeContentTypeParser('text/plain')

  fastify.setErrorHandler(errorHandler)
  fastify.setNotFoundHandler(function (request, reply) {
    const [path = ''] = request.url.split('?', 1)
    const allowed = METHODS.filter((method) => fastify.findRoute({ method, url: path }) !== null)
    // A route of this very method that found nothing (a missing file under /docs/static/*) is a 404
    if (allowed.length > 0 && !allowed.includes(request.method as typeof METHODS[number])) {
      return reply.code(405).header('allow', allowed.join(', ')).send(failure(405, Message.MethodNotAllowed))
    }
    return reply.code(404).send(failure(404, Message.RouteNotFound))
  })

  // The OpenAPI document collects the routes registered after it; /docs comes after the
  // handlers above, so its missing files are answered like any unknown path
  await fastify.register(swagger)
  await fastify.register(swaggerUi.default, swaggerUi.autoConfig)
  await fastify.register(health)
  await fastify.register(metricsRoute)
  await fastify.register(token)
  await fastify.register(books)
}

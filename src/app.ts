import { randomUUID } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { FastifyHttpOptions, FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import cors from '../plugins/external/cors.js'
import env, { type EnvOptions } from '../plugins/external/env.js'
import jwt from '../plugins/external/jwt.js'
import postgres from '../plugins/external/postgres.js'
import rateLimit from '../plugins/external/rate-limit.js'
import swaggerUi from '../plugins/external/swagger-ui.js'
import swagger from '../plugins/external/swagger.js'
import adminListener from '../plugins/app/admin-listener.js'
import apiLimit from '../plugins/app/api-limit.js'
import authenticate from '../plugins/app/authenticate.js'
import consolePages from '../plugins/app/console.js'
import connections from '../plugins/app/connections.js'
import booksRepository from '../plugins/app/books-repository.js'
import changeLog from '../plugins/app/change-log.js'
import idempotencyKeys from '../plugins/app/idempotency-keys.js'
import idempotencyKeysSweep from '../plugins/app/idempotency-keys-sweep.js'
import importsRepository from '../plugins/app/imports-repository.js'
import changesFeed from '../plugins/app/changes-feed.js'
import loginAttempts from '../plugins/app/login-attempts.js'
import httpEdge, { clientErrorHandler, frameworkErrors } from '../plugins/app/http-edge.js'
import jsonBody from '../plugins/app/json-body.js'
import listingsRepository from '../plugins/app/listings-repository.js'
import searchWords from '../plugins/app/search-words.js'
import metrics from '../plugins/app/metrics.js'
import migrate from '../plugins/app/migrate.js'
import readBudget from '../plugins/app/read-budget.js'
import responseHeaders from '../plugins/app/response-headers.js'
import books from '../routes/books.js'
import changes from '../routes/changes.js'
import health from '../routes/health.js'
import importRoute from '../routes/import.js'
import listing from '../routes/listing.js'
import metricsRoute from '../routes/metrics.js'
import token from '../routes/token.js'
import { errorHandler } from './errors.js'
import { HTTP_SERVER_OPTIONS } from './http.js'
import { requestLog } from './request-log.js'
import { markListening } from './start-up.js'
import { NO_TRACING } from './tracing.js'

/** The largest request body accepted; a book is a few hundred bytes. */
export const BODY_LIMIT = 64 * 1024

/**
 * Server options. `fastify start -o` applies them, and the tests build the app through the
 * same fastify-cli helper, so both run with exactly these.
 */
export const options: FastifyHttpOptions<Server> = {
  // Ample room for a book, and a cap on what a client can make us parse
  bodyLimit: BODY_LIMIT,
  // The HTTP server Fastify would make, with the options of both listeners; the connections
  // plugin takes over its connections and its request listener (src/connections.ts)
  serverFactory: (handler) => createServer(HTTP_SERVER_OPTIONS, handler),
  // The contract's fields have fixed types: "1999" must not become 1999, nor null become ""
  ajv: { customOptions: { coerceTypes: false } },
  // Fastify's own 503 while closing is not an envelope; in-flight requests finish instead
  return503OnClosing: false,
  // No bound on a plugin's start: the embedded database (DB_URL=pglite:...) creates its cluster
  // on first start, several seconds, more on a busy machine, and a migration that builds an
  // index on ten million books takes minutes (src/db/migrate.ts), where fastify-cli would
  // give up on a plugin after 10 s. Each step bounds its own waits
  pluginTimeout: 0,
  // What Node's parser rejects and what the router cannot decode never reach a hook: the HTTP
  // edge answers both (plugins/app/http-edge.ts)
  clientErrorHandler,
  frameworkErrors,
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
        'body.password', 'body.token', 'config.SECRET_TOKEN', 'config.SECRET_TOKEN_ACCEPTED', 'config.AUTH_PASSWORD', 'config.DB_URL'
      ],
      censor: '[redacted]'
    }
  }
}

/**
 * What fastify-cli passes the app: the server options above (`-o`), and for a test's build its
 * own `environment` to read the configuration from.
 */
export type AppOptions = EnvOptions

async function app (fastify: FastifyInstance, { environment }: AppOptions) {
  // Order matters: the configuration first; then the connections, whose answer to one over a
  // bound comes before any other hook (the plugins after them name them in `dependencies`);
  // then what applies to every response, in the order its headers are written; then the
  // database (migrated before anything queries it), the token machinery, and the routes that
  // use all of them
  await fastify.register(env, { environment })
  // With tracing on, the instance has had its own since it was created (src/tracing-sdk.ts)
  if (!fastify.hasDecorator('tracing')) fastify.decorate('tracing', NO_TRACING)
  // What fails from now on is no longer a start-up failure (src/start-failure.ts)
  fastify.addHook('onListen', async () => markListening())
  await fastify.register(connections)
  await fastify.register(responseHeaders)
  await fastify.register(cors)
  await fastify.register(adminListener)
  await fastify.register(httpEdge)
  await fastify.register(postgres)
  await fastify.register(migrate)
  await fastify.register(metrics)
  await fastify.register(jwt)
  await fastify.register(rateLimit)
  await fastify.register(loginAttempts)
  await fastify.register(apiLimit)
  await fastify.register(authenticate)
  await fastify.register(readBudget)
  await fastify.register(booksRepository)
  await fastify.register(searchWords)
  await fastify.register(listingsRepository)
  await fastify.register(changeLog)
  await fastify.register(idempotencyKeys)
  await fastify.register(idempotencyKeysSweep)
  await fastify.register(importsRepository)
  await fastify.register(changesFeed)

  // Bodies are JSON only; anything else is 415 rather than a string that fails validation
  fastify.removeContentTypeParser('text/plain')
  await fastify.register(jsonBody)
  fastify.setErrorHandler(errorHandler)

  // The OpenAPI document collects the routes registered after it
  await fastify.register(swagger)
  await fastify.register(swaggerUi)
  await fastify.register(consolePages)
  await fastify.register(health)
  await fastify.register(metricsRoute)
  await fastify.register(token)
  await fastify.register(books)
  await fastify.register(listing)
  await fastify.register(importRoute)
  await fastify.register(changes)
}

/**
 * The root plugin, not encapsulated (fastify-plugin): what it and its plugins decorate (`config`,
 * `pg`, `booksRepository`, `metrics`, ...) is visible on the instance fastify-cli creates, to
 * the server options' handlers (`request.server`) and to tests.
 */
export default fp(app, { name: 'bookkeeping' })

/**
 * Adds `fastify.apiLimit`: with API_RATE_LIMIT set, the `onRequest` hook that limits the requests
 * of each client address to the book routes and the feed (src/book-routes.ts, and routes/changes.ts
 * add it to their own, first), else null and nothing changes. It is a limit of the rate-limit
 * plugin (`fastify.createRateLimit`), counted where the `POST /token` attempts are: in Redis with
 * REDIS_URL, one script per request (a single round trip), shared by every instance; in the
 * process without it, or while Redis does not answer. The address is the one `POST /token`
 * counts (`request.ip`, from `X-Forwarded-For` behind a trusted proxy; IPv6 by /64). Every answer
 * of those routes carries `RateLimit-Policy` and `RateLimit`; past the limit the answer is 429 in
 * the envelope with `Retry-After`, before authentication, before the body is read and before any
 * query.
 */
import { normalizeIP } from '@fastify/rate-limit'
import type { FastifyInstance, onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { Message } from '../../src/envelope.js'
import { ApiError } from '../../src/errors.js'
import { limitItem, policyItem } from '../../src/rate-limit-fields.js'

declare module 'fastify' {
  interface FastifyInstance {
    apiLimit: ReturnType<typeof createApiLimit>
  }
}

/** The window of API_RATE_LIMIT. */
const WINDOW_MS = 60_000
/** The policy's name in `RateLimit-Policy` and `RateLimit`. */
export const API_POLICY = 'api'

function createApiLimit (fastify: FastifyInstance): onRequestHookHandler | null {
  const max = fastify.config.API_RATE_LIMIT
  if (max === 0) return null
  // One count per address for every limited route together, under `api-<address>`
  const limit = fastify.createRateLimit({
    keyGenerator: (request) => `${API_POLICY}-${normalizeIP(request.ip)}`,
    max,
    timeWindow: WINDOW_MS
  })
  const policy = policyItem(API_POLICY, max, WINDOW_MS / 1000)

  // Callback style, being on every book request: an async hook costs a promise more each time
  return function apiLimit (request, reply, done) {
    limit(request).then((result) => {
      /* c8 ignore next 4: no allow list, so never allowed without being counted */
      if (result.isAllowed) {
        done()
        return
      }
      reply.header('ratelimit-policy', policy)
      reply.header('ratelimit', limitItem(API_POLICY, result.remaining, result.ttlInSeconds))
      if (!result.isExceeded) {
        done()
        return
      }
      reply.header('retry-after', result.ttlInSeconds)
      done(new ApiError(429, Message.TooManyRequests))
    }, done)
  }
}

export default fp(async function apiLimit (fastify) {
  fastify.decorate('apiLimit', createApiLimit(fastify))
}, { name: 'api-limit', dependencies: ['env', 'rate-limit'] })

import fastifyRateLimit from '@fastify/rate-limit'
import fp from 'fastify-plugin'
import { Message } from '../../src/envelope.js'
import { ApiError } from '../../src/errors.js'

/**
 * Attempt limits per client address, applied only to the routes that ask for one in their
 * `config.rateLimit` (POST /token, against password guessing). The counters live in this
 * process: behind a load balancer each instance counts for itself. Over the limit: 429 in the
 * envelope, with `Retry-After`.
 *
 * @see https://github.com/fastify/fastify-rate-limit
 */
export default fp(async function rateLimit (fastify) {
  await fastify.register(fastifyRateLimit, {
    global: false,
    errorResponseBuilder: () => new ApiError(429, Message.TooManyRequests)
  })
}, { name: 'rate-limit' })

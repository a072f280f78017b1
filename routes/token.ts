import { hash, timingSafeEqual } from 'node:crypto'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply } from 'fastify'
import { Message, SuccessSchema, envelope, failureSchemas } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import { limitItem, policyItem } from '../src/rate-limit-fields.js'
import { LoginSchema, TOKEN_LIFETIME_S, TokenSchema } from '../src/schemas/auth.js'

/** Hashing first gives equal-length inputs, so neither value's length leaks through timing. */
function digest (value: string): Buffer {
  return hash('sha256', value, 'buffer')
}

/** For the OpenAPI document: the shape of a token (HS256, `{"exp":1700000900}`), not a valid one. */
const EXAMPLE_TOKEN = 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3MDAwMDA5MDB9.c2lnbmF0dXJlLW9mLWFuLWV4YW1wbGUtdG9rZW4'

/** The window of TOKEN_RATE_LIMIT. */
const ADDRESS_WINDOW_MS = 60_000

/** The names of the two limits of POST /token in `RateLimit-Policy` and `RateLimit`. */
export const TokenPolicy = { Address: 'address', Username: 'username' } as const

/**
 * The per-address item of `RateLimit`, from the headers the rate-limit plugin wrote in its
 * `onRequest` hook (`x-ratelimit-remaining` and `x-ratelimit-reset`, kept as they were); none if
 * that hook did not run.
 */
function addressItem (reply: FastifyReply): string[] {
  const remaining = reply.getHeader('x-ratelimit-remaining')
  const reset = reply.getHeader('x-ratelimit-reset')
  return remaining === undefined || reset === undefined ? [] : [limitItem(TokenPolicy.Address, Number(remaining), Number(reset))]
}

const token: FastifyPluginAsyncTypebox = async (fastify) => {
  const { loginAttempts } = fastify
  const policies = [
    policyItem(TokenPolicy.Address, fastify.config.TOKEN_RATE_LIMIT, ADDRESS_WINDOW_MS / 1000),
    policyItem(TokenPolicy.Username, fastify.config.TOKEN_USERNAME_RATE_LIMIT, loginAttempts.usernameWindowMs / 1000)
  ].join(', ')
  const username = digest(fastify.config.AUTH_USERNAME)
  const password = digest(fastify.config.AUTH_PASSWORD)

  // A token carries `exp` alone, a whole second, and HS256 is deterministic: every token issued
  // for one `exp` is the same string. It is signed once, and handed out again while the clock
  // still gives that `exp`; signing (fast-jwt: JSON, base64url, an HMAC with its key set up
  // afresh) is a part of the route's CPU worth saving
  let issued = { exp: -1, token: '' }
  function currentToken (): string {
    if (Math.floor(Date.now() / 1000) + TOKEN_LIFETIME_S === issued.exp) return issued.token
    const token = fastify.jwt.sign({})
    // The signer reads the clock itself, maybe a second later: the token says which `exp` it has
    issued = { exp: fastify.jwt.decode<{ exp: number }>(token)!.exp, token }
    return token
  }

  fastify.post('/token', {
    config: {
      invalidBodyMessage: Message.InvalidRequestPayload,
      rateLimit: { max: fastify.config.TOKEN_RATE_LIMIT, timeWindow: ADDRESS_WINDOW_MS }
    },
    // RFC 6749 section 5.1: token responses, errors included, must not be cached. The limits'
    // fields: the handler wrote `RateLimit` with both limits when it counted the username, else
    // it holds the per-address one alone. Callback style: an async hook costs a promise on every
    // request
    onSend: function (request, reply, payload, done) {
      reply.header('cache-control', 'no-store')
      reply.header('ratelimit-policy', policies)
      if (!reply.hasHeader('ratelimit')) {
        const items = addressItem(reply)
        if (items.length > 0) reply.header('ratelimit', items.join(', '))
      }
      done(null, payload)
    },
    schema: {
      summary: 'Exchange the username and password for a token valid for 15 minutes',
      tags: ['token'],
      operationId: 'createToken',
      body: LoginSchema,
      response: {
        200: SuccessSchema(200, Message.TokenGenerated, TokenSchema, { token: EXAMPLE_TOKEN }),
        ...failureSchemas({
          // Bad request: an HTTP/1.1 request without Host
          400: [Message.InvalidRequestPayload, Message.BadRequest],
          401: [Message.InvalidCredentials],
          413: [Message.PayloadTooLarge],
          415: [Message.UnsupportedMediaType],
          429: [Message.TooManyRequests],
          500: [Message.CouldNotGenerateToken, Message.InternalServerError]
        })
      }
    }
  }, async function (request, reply) {
    const attempts = await loginAttempts.count(request)
    if (attempts !== null) {
      reply.header('ratelimit', [...addressItem(reply), limitItem(TokenPolicy.Username, attempts.remaining, attempts.resetS)].join(', '))
      if (attempts.exceeded) {
        reply.header('retry-after', attempts.resetS)
        throw new ApiError(429, Message.TooManyRequests)
      }
    }
    // Both comparisons always run: no early exit tells which half was wrong
    const usernameMatches = timingSafeEqual(digest(request.body.username), username)
    const passwordMatches = timingSafeEqual(digest(request.body.password), password)
    if (!(usernameMatches && passwordMatches)) throw new ApiError(401, Message.InvalidCredentials)
    await loginAttempts.succeeded(request)

    let signed: string
    try {
      signed = currentToken()
    } catch (err) {
      request.log.error({ err }, 'token signing failed')
      throw new ApiError(500, Message.CouldNotGenerateToken)
    }
    return envelope(200, Message.TokenGenerated, { token: signed })
  })
}

export default token

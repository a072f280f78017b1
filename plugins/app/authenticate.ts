import type { onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { Message } from '../../src/envelope.js'
import { ApiError } from '../../src/errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    authenticate: onRequestHookHandler
  }
}

/**
 * The `onRequest` hook of the protected routes: it runs before the body is read and never
 * touches the database. The token is the bare `Authorization` value; `Bearer <token>` is not a
 * token and fails verification. fast-jwt raises many error kinds, several of which
 * @fastify/jwt would turn into a 500: every one of them is simply `Invalid token` here.
 * Callback style, being on every book request: an async hook costs a promise each time.
 */
export default fp(async function authenticate (fastify) {
  fastify.decorate('authenticate', function (request, reply, done) {
    const token = request.headers.authorization
    if (!token) return done(new ApiError(401, Message.AuthorizationRequired))
    let exp: number
    try {
      ({ exp } = fastify.jwt.verify<{ exp: number }>(token))
    } catch {
      return done(new ApiError(401, Message.InvalidToken))
    }
    // fast-jwt still accepts during the millisecond `exp * 1000`; the token is expired from then on
    done(exp * 1000 <= Date.now() ? new ApiError(401, Message.InvalidToken) : undefined)
  } satisfies onRequestHookHandler)
}, { name: 'authenticate', dependencies: ['jwt'] })

import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Message } from '../../src/envelope.js'
import { ApiError } from '../../src/errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    authenticate: (request: FastifyRequest) => Promise<void>
  }
}

/**
 * The `onRequest` hook of the protected routes: it runs before the body is read and never
 * touches the database. The token is the bare `Authorization` value; `Bearer <token>` is not a
 * token and fails verification. fast-jwt raises many error kinds, several of which
 * @fastify/jwt would turn into a 500: every one of them is simply `Invalid token` here.
 */
export default fp(async function authenticate (fastify) {
  fastify.decorate('authenticate', async function (request: FastifyRequest) {
    const token = request.headers.authorization
    if (!token) throw new ApiError(401, Message.AuthorizationRequired)
    let exp: number
    try {
      ({ exp } = fastify.jwt.verify<{ exp: number }>(token))
    } catch {
      throw new ApiError(401, Message.InvalidToken)
    }
    // fast-jwt still accepts during the millisecond `exp * 1000`; the token is expired from then on
    if (exp * 1000 <= Date.now()) throw new ApiError(401, Message.InvalidToken)
  })
}, { name: 'authenticate', dependencies: ['@fastify/jwt'] })

/**
 * Adds `fastify.jwt`, which signs and verifies the access tokens (@fastify/jwt; its
 * `request.jwtVerify`, `request.jwtDecode`, `reply.jwtSign` and `request.user` come along,
 * unused here). The contract fixes the token: HS256, one claim `exp` 15 minutes after issue, no
 * `iat`. Verification accepts the HMAC family only, insists on `exp`, allows no clock leeway and
 * keeps no cache: fast-jwt's cache would accept a token without `iat` for up to ten minutes
 * after its `exp`. What fast-jwt cannot check (an `exp` too far ahead: its `maxAge` needs `iat`;
 * non-canonical base64url) is checked by the authenticate hook.
 *
 * @see https://github.com/fastify/fastify-jwt
 */
import fastifyJwt from '@fastify/jwt'
import fp from 'fastify-plugin'
import { TOKEN_ALGORITHMS, TOKEN_LIFETIME_S } from '../../src/schemas/auth.js'

export default fp(async function jwt (fastify) {
  await fastify.register(fastifyJwt, {
    secret: fastify.config.SECRET_TOKEN,
    // A number is seconds to @fastify/jwt
    sign: { algorithm: 'HS256', expiresIn: TOKEN_LIFETIME_S, noTimestamp: true },
    verify: {
      algorithms: [...TOKEN_ALGORITHMS],
      requiredClaims: ['exp'],
      clockTolerance: 0,
      cache: false
    }
  })
}, { name: 'jwt', dependencies: ['env'] })

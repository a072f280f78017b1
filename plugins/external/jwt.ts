import fastifyJwt from '@fastify/jwt'
import fp from 'fastify-plugin'

/**
 * Signs and verifies the access tokens (`fastify.jwt`). The contract fixes the token: HS256, one
 * claim `exp` 15 minutes after issue, no `iat`. Verification accepts the HMAC family only,
 * insists on `exp`, allows no clock leeway and keeps no cache: fast-jwt's cache would accept a
 * token without `iat` for up to ten minutes after its `exp`.
 *
 * @see https://github.com/fastify/fastify-jwt
 */
export default fp(async function jwt (fastify) {
  await fastify.register(fastifyJwt, {
    secret: fastify.config.SECRET_TOKEN,
    sign: { algorithm: 'HS256', expiresIn: '15m', noTimestamp: true },
    verify: {
      algorithms: ['HS256', 'HS384', 'HS512'],
      requiredClaims: ['exp'],
      clockTolerance: 0,
      cache: false
    }
  })
}, { name: 'jwt', dependencies: ['env'] })

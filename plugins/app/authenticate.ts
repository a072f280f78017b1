/**
 * Adds `fastify.authenticate`, the `onRequest` hook of the protected routes (the book routes add
 * it to its own), and `request.tokenExpiresAt`, when the token it accepted expires (a feed of
 * changes ends then): it runs before the body is read and never touches the database. The token is
 * the bare `Authorization` value; `Bearer <token>` is not a token and fails verification.
 * fast-jwt raises many error kinds, several of which @fastify/jwt would turn into a 500: every
 * one of them is simply `Invalid token` here. Two Authorization fields are `Invalid token` too: a
 * proxy in front may have read the other. A token whose header holds more than ours is `Invalid
 * token` too. Every answer it guards is `Cache-Control: no-store`. A token that passed is
 * verified once per instance (src/verified-tokens.ts), its expiry checked on every request.
 * A token signed with a secret of SECRET_TOKEN_ACCEPTED passes as one signed with SECRET_TOKEN
 * (a rotation, docs/operations.md); SECRET_TOKEN is tried first.
 * Callback style, being on every book request: an async hook costs a promise each time.
 */
import type { onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { acceptedSecrets } from '../../src/config.js'
import { Message } from '../../src/envelope.js'
import { ApiError } from '../../src/errors.js'
import { fieldCount } from '../../src/http.js'
import { TOKEN_ALGORITHMS, TOKEN_LIFETIME_S } from '../../src/schemas/auth.js'
import { VerifiedTokens } from '../../src/verified-tokens.js'

declare module 'fastify' {
  interface FastifyInstance {
    authenticate: onRequestHookHandler
  }
  interface FastifyRequest {
    /** When the token `authenticate` accepted expires, in ms (a feed ends then: routes/changes.ts). */
    tokenExpiresAt: number
  }
}

/**
 * How far the clock of the instance that issued a token may be ahead of this one's: a token's
 * `exp` may be at most TOKEN_LIFETIME_S plus this from now.
 */
export const CLOCK_TOLERANCE_MS = 5000

const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
/** By a segment's length modulo 4: the bits of its last character that encode nothing. */
const UNUSED_BITS_MASK = [0, -1, 0b1111, 0b11]

/**
 * Whether each base64url segment of `token` is the one encoding of its bytes: the unused low bits
 * of a last character are zero (`...Q` and `...R` decode alike), no length is 1 modulo 4.
 * fast-jwt refuses characters outside the alphabet but decodes such twins as the same bytes, so
 * one signature would have several spellings.
 */
function isCanonical (token: string): boolean {
  return token.split('.').every((segment) => {
    const mask = UNUSED_BITS_MASK[segment.length % 4]!
    return mask === 0 || (mask > 0 && (BASE64URL.indexOf(segment.charAt(segment.length - 1)) & mask) === 0)
  })
}

/**
 * The header segments of the tokens accepted: `{"alg":...,"typ":"JWT"}` with `alg` one of
 * TOKEN_ALGORITHMS (as verification), in the plain JSON fast-jwt writes, and so in the one
 * base64url spelling of it: no other key, no key twice, no other order, `typ` not left out.
 * fast-jwt ignores `kid`, `jku`, `x5u` and `jwk`, and takes the last of two `alg` keys; refusing
 * them keeps a later version from starting to act on them.
 */
const OUR_HEADERS = new Set(TOKEN_ALGORITHMS.map((alg) => Buffer.from(JSON.stringify({ alg, typ: 'JWT' })).toString('base64url')))

/**
 * fast-jwt's code for a signature the key does not verify (`TOKEN_ERROR_CODES.invalidSignature`,
 * its README; fast-jwt comes through @fastify/jwt). Should it change, the tokens of accepted
 * secrets are refused, which test/app/secret-rotation.test.ts would show.
 */
const INVALID_SIGNATURE = 'FAST_JWT_INVALID_SIGNATURE'

/** How many verified tokens an instance keeps (src/verified-tokens.ts; its memory: docs/performance.md, What makes the difference). */
export const VERIFIED_TOKENS = 10_000

export default fp(async function authenticate (fastify) {
  // Per instance: each has its secret
  const verifiedTokens = new VerifiedTokens(VERIFIED_TOKENS)
  // Tried after SECRET_TOKEN only, so that its tokens cost what they cost without a rotation
  const accepted = acceptedSecrets(fastify.config)

  /** The payload of `token`, verified with SECRET_TOKEN or else with an accepted secret; throws if none verifies it. */
  function verified (token: string): { exp: number } {
    try {
      return fastify.jwt.verify<{ exp: number }>(token)
    } catch (error) {
      // Only a signature that SECRET_TOKEN does not verify may be another key's: any other
      // failure (malformed, expired, an algorithm refused) is the same whatever the key
      if ((error as { code?: unknown }).code !== INVALID_SIGNATURE) throw error
      // The same checks, another key: @fastify/jwt merges `key` into the options it was given
      for (const key of accepted) {
        try {
          return fastify.jwt.verify<{ exp: number }>(token, { key })
        } catch {}
      }
      throw error
    }
  }

  /**
   * When `token` expires (ms), if it is one of ours: its signature verifies, its `exp` is no
   * further ahead than a token of ours lives, it is spelled canonically, its header is one we
   * write. Null if not. Its expiry against now is the caller's, on every request.
   */
  function verifiedExpiry (token: string, now: number): number | null {
    let exp: number
    try {
      ({ exp } = verified(token))
    } catch {
      return null
    }
    // No token of ours lives longer than TOKEN_LIFETIME_S: one further ahead (2100, 1e308,
    // Infinity) was not issued here, or was issued with a clock far off
    const expiresAt = exp * 1000
    const ours = expiresAt <= now + TOKEN_LIFETIME_S * 1000 + CLOCK_TOLERANCE_MS &&
      isCanonical(token) && OUR_HEADERS.has(token.slice(0, token.indexOf('.')))
    return ours ? expiresAt : null
  }

  fastify.decorateRequest('tokenExpiresAt', 0)
  fastify.decorate('authenticate', function (request, reply, done) {
    // Every answer of a route that needs a token, its errors too, is for this client alone: no
    // cache in between may keep it (docs/api.md, Caching)
    reply.header('cache-control', 'no-store')
    // Two Authorization fields: a proxy in front may have read the other
    if (fieldCount(request.raw.rawHeaders, 'authorization') > 1) return done(new ApiError(401, Message.InvalidToken))
    const token = request.headers.authorization
    if (!token) return done(new ApiError(401, Message.AuthorizationRequired))
    const now = Date.now()
    let expiresAt = verifiedTokens.expiryOf(token)
    if (expiresAt === undefined) {
      const verified = verifiedExpiry(token, now)
      if (verified === null) return done(new ApiError(401, Message.InvalidToken))
      verifiedTokens.remember(token, verified)
      expiresAt = verified
    }
    // On every request, cached or not. fast-jwt still accepts during the millisecond
    // `exp * 1000`; the token is expired from then on
    if (expiresAt <= now) return done(new ApiError(401, Message.InvalidToken))
    request.tokenExpiresAt = expiresAt
    done()
  } satisfies onRequestHookHandler)
}, { name: 'authenticate', dependencies: ['jwt'] })

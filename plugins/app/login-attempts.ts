/**
 * Adds `fastify.loginAttempts`, the per-username limit of POST /token (`createLoginAttempts`,
 * below), made with the rate-limit plugin's `fastify.createRateLimit`.
 */
import { hash } from 'node:crypto'
import { normalizeIP, type CreateRateLimitOptions } from '@fastify/rate-limit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { AttemptTable } from '../../src/attempt-table.js'
import type { Login } from '../../src/schemas/auth.js'

declare module 'fastify' {
  interface FastifyInstance {
    loginAttempts: ReturnType<typeof createLoginAttempts>
  }
}

/** The window of TOKEN_USERNAME_RATE_LIMIT. */
export const USERNAME_WINDOW_MS = 60_000
/** How long an address that logged in is exempt from the per-username limit. */
export const TRUSTED_ADDRESS_MS = 7 * 24 * 3_600_000
/** How many such addresses a process keeps (Redis keeps all); only a login adds one. */
const TRUSTED_TABLE_SIZE = 1000

/** An attempt's count under the per-username limit. */
interface UsernameCount { exceeded: boolean, remaining: number, resetS: number }

/** The address as the per-address limit counts it: IPv6 by /64. */
const address = (request: FastifyRequest) => normalizeIP(request.ip)

/**
 * Guessing spread over many addresses: at most TOKEN_USERNAME_RATE_LIMIT attempts per username
 * and minute from the addresses that have not logged in successfully in the last 7 days, then
 * 429 until the minute ends. An address that has logged in keeps logging in whatever an attacker
 * does to the username (it is still under the per-address limit). Every username is counted
 * alike, whether it exists or not, so a 429 says nothing about which one does. Attempts are
 * counted before the password is checked (a count after it would let a burst of concurrent
 * guesses all pass the check), refused ones included; the window is fixed, so they do not make
 * it longer. The counts are where the per-address ones are (Redis with REDIS_URL, else the
 * process), under `username:<SHA-256 of it>` and `trusted:<address>`; the process keeps the
 * addresses that logged in through it as well.
 */
function createLoginAttempts (fastify: FastifyInstance) {
  // The addresses that logged in through this process, kept here too (a table like the local
  // counts'): while Redis is away the counts are the process's own, which did not see the
  // logins counted in Redis, and such an address keeps its exemption
  const trustedHere = new AttemptTable(TRUSTED_TABLE_SIZE)
  const knownHere = (request: FastifyRequest) => {
    let known = false
    trustedHere.read(address(request), (err, result) => { known = err === null && (result?.current ?? 0) > 0 })
    return known
  }
  const trust = fastify.createRateLimit({
    keyGenerator: (request) => `trusted:${address(request)}`,
    max: 1,
    timeWindow: TRUSTED_ADDRESS_MS,
    cache: TRUSTED_TABLE_SIZE
  } as CreateRateLimitOptions)
  const perUsername = fastify.createRateLimit({
    keyGenerator: (request) => `username:${hash('sha256', (request.body as Login).username, 'base64url')}`,
    max: fastify.config.TOKEN_USERNAME_RATE_LIMIT,
    timeWindow: USERNAME_WINDOW_MS,
    allowList: async (request) => {
      if (knownHere(request)) return true
      const trusted = await trust(request, { increment: false })
      return !trusted.isAllowed && trusted.remaining === 0
    }
  })

  return {
    usernameWindowMs: USERNAME_WINDOW_MS,

    /**
     * Counts the attempt: whether the username is over its limit, the attempts it has left and the
     * seconds until its window ends; null when the address is exempt (nothing counted).
     */
    async count (request: FastifyRequest): Promise<UsernameCount | null> {
      const limit = await perUsername(request)
      if (limit.isAllowed) return null
      return { exceeded: limit.isExceeded, remaining: limit.remaining, resetS: limit.ttlInSeconds }
    },

    /** The request's address logged in: exempt from the per-username limit from now on. */
    async succeeded (request: FastifyRequest): Promise<void> {
      trustedHere.incr(address(request), () => {}, TRUSTED_ADDRESS_MS)
      await trust(request)
    }
  }
}

export default fp(async function loginAttempts (fastify) {
  fastify.decorate('loginAttempts', createLoginAttempts(fastify))
}, { name: 'login-attempts', dependencies: ['env', 'rate-limit'] })

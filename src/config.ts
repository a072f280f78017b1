import { Type, type Static } from '@sinclair/typebox'

/**
 * The whole configuration, read from the environment once at start-up. `PORT`, `HOST` and
 * `LOG_LEVEL` are consumed by `fastify start` itself (see package.json); they are declared here
 * so that a bad value is reported like any other.
 */
export const ConfigSchema = Type.Object({
  // A PostgreSQL server (postgres://...), or the embedded PGlite: pglite:memory, pglite:<directory>
  DB_URL: Type.String({ pattern: '^(postgres(ql)?://|pglite:.)' }),
  // RFC 7518 section 3.2: an HS256 key must be at least 256 bits
  SECRET_TOKEN: Type.String({ minLength: 32 }),
  AUTH_USERNAME: Type.String({ minLength: 1 }),
  AUTH_PASSWORD: Type.String({ minLength: 1 }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
  HOST: Type.String({ minLength: 1, default: '0.0.0.0' }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info' }
  ),
  DB_POOL_MAX: Type.Integer({ minimum: 1, maximum: 100, default: 10 }),
  // Attempts at POST /token per client address and minute
  TOKEN_RATE_LIMIT: Type.Integer({ minimum: 1, default: 30 }),
  // Browser origins allowed to call the service (CORS), comma-separated `http(s)://host[:port]`
  // without path or `*`; empty: CORS off
  CORS_ORIGINS: Type.String({
    default: '',
    pattern: '^\\s*(https?://[^/?#\\s,*]+\\s*(,\\s*https?://[^/?#\\s,*]+\\s*)*)?$'
  })
})

export type Config = Static<typeof ConfigSchema>

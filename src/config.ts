import { Type, type Static } from '@sinclair/typebox'

/** Where the service listens and what it logs when nothing says otherwise. */
export const DEFAULT_PORT = 8080
export const DEFAULT_HOST = '0.0.0.0'
export const DEFAULT_LOG_LEVEL = 'info'

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/**
 * The whole configuration, read once at start-up from the environment (or, for a test, from the
 * values its build is given). `PORT`, `HOST` and `LOG_LEVEL` are consumed by `fastify start`
 * itself (src/cli-options.ts); they are declared here so that a bad value is reported like any
 * other.
 */
export const ConfigSchema = Type.Object({
  // A PostgreSQL server (postgres://...), or the embedded PGlite: pglite:memory, pglite:<directory>
  DB_URL: Type.String({ pattern: '^(postgres(ql)?://|pglite:.)' }),
  // RFC 7518 section 3.2: an HS256 key must be at least 256 bits
  SECRET_TOKEN: Type.String({ minLength: 32 }),
  AUTH_USERNAME: Type.String({ minLength: 1 }),
  AUTH_PASSWORD: Type.String({ minLength: 1 }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: DEFAULT_PORT }),
  HOST: Type.String({ minLength: 1, default: DEFAULT_HOST }),
  LOG_LEVEL: Type.Union(LOG_LEVELS.map((level) => Type.Literal(level)), { default: DEFAULT_LOG_LEVEL }),
  DB_POOL_MAX: Type.Integer({ minimum: 1, maximum: 100, default: 10 }),
  // After SIGTERM or SIGINT: how long readiness answers 503 while everything else is still served,
  // so a load balancer takes the instance out before it stops accepting (plugins/app/shutdown.ts).
  // At most 10 minutes: a larger value is a unit mistake
  SHUTDOWN_DELAY_MS: Type.Integer({ minimum: 0, maximum: 600_000, default: 0 }),
  // A response whose client takes none of it for this long is cut off (plugins/app/send-timeout.ts).
  // At least 10 s: the same timer runs while a handler waits for the database (at most 5 s)
  SEND_TIMEOUT_MS: Type.Integer({ minimum: 10_000, maximum: 600_000, default: 30_000 }),
  // Attempts at POST /token per client address and minute
  TOKEN_RATE_LIMIT: Type.Integer({ minimum: 1, default: 30 }),
  // Where all instances count those attempts together: redis[s]://[[user]:password@]host[:port][/db],
  // no query (it would override the client's time bounds); empty: each process counts alone
  REDIS_URL: Type.String({ default: '', pattern: '^(rediss?://[^\\s/?#]+(/[0-9]*)?)?$' }),
  // Browser origins allowed to call the service (CORS), comma-separated `http(s)://host[:port]`
  // without path or `*`; empty: CORS off
  CORS_ORIGINS: Type.String({
    default: '',
    pattern: '^\\s*(https?://[^/?#\\s,*]+\\s*(,\\s*https?://[^/?#\\s,*]+\\s*)*)?$'
  })
})

export type Config = Static<typeof ConfigSchema>

/** What a test or an embedding program gives the app instead of the environment. */
export type ConfigInput = Partial<Record<keyof Config, string>>

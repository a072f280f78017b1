import { Type, type Static } from '@sinclair/typebox'
import { openFileLimit } from './fd-limit.js'

/** Where the service listens and what it logs when nothing says otherwise. */
export const DEFAULT_PORT = 8080
export const DEFAULT_HOST = '0.0.0.0'
export const DEFAULT_LOG_LEVEL = 'info'
/** Where the operations endpoints listen when ADMIN_PORT is set: this machine only. */
const DEFAULT_ADMIN_HOST = '127.0.0.1'

/**
 * File descriptors kept for everything but client connections: stdio, the database pool (up to
 * 100), Redis, PGlite's loopback socket, the files Node and the libraries open.
 */
const RESERVED_FDS = 256

/**
 * The admin listener's own bounds (ADMIN_PORT): a prober, a scraper and an operator need a
 * handful of connections. Its hard cap is kept out of the public connections' descriptors.
 */
export const ADMIN_MAX_CONNECTIONS = 16
export const ADMIN_MAX_CONNECTIONS_PER_ADDRESS = 8
export const ADMIN_CONNECTION_HARD_CAP = 32

/**
 * The connection bounds a file-descriptor limit allows. A function of the limit, so that the
 * README's example (at `ulimit -n` 20000) can be checked against it on any machine.
 */
export function connectionBounds (fileLimit: number) {
  // The most client connections the process accepts at all (src/connection-bounds.ts):
  // beyond this Node drops a connection as it is accepted. The admin listener's are kept apart
  const hardCap = Math.max(1, fileLimit - RESERVED_FDS - ADMIN_CONNECTION_HARD_CAP)
  // 80% of the hard cap: the rest is room to answer and close the connections over the bounds
  const maxConnections = Math.max(1, Math.floor(hardCap * 0.8))
  // What one client address (an IPv6 /64) may hold; behind a proxy, raise it (docs/operations.md)
  const maxConnectionsPerAddress = Math.min(256, maxConnections)
  return { hardCap, maxConnections, maxConnectionsPerAddress }
}

const BOUNDS = connectionBounds(openFileLimit())
export const CONNECTION_HARD_CAP = BOUNDS.hardCap
export const DEFAULT_MAX_CONNECTIONS = BOUNDS.maxConnections
const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = BOUNDS.maxConnectionsPerAddress

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/**
 * The whole configuration, read once at start-up from the environment (or, for a test, from the
 * values its build is given). `PORT`, `HOST` and `LOG_LEVEL` are consumed by `fastify start`
 * itself (src/cli-options.ts); they are declared here so that a bad value is reported like any
 * other.
 */
export const ConfigSchema = Type.Object({
  // A PostgreSQL server (postgres://...), or the embedded PGlite: pglite:memory, pglite:<directory>
  DB_URL: Type.String({
    pattern: '^(postgres(ql)?://|pglite:.)',
    description: 'postgres://user:password@host:port/database, pglite:<directory> or pglite:memory'
  }),
  // RFC 7518 section 3.2: an HS256 key must be at least 256 bits
  SECRET_TOKEN: Type.String({ minLength: 32, description: 'a random string of at least 32 characters (openssl rand -hex 32)' }),
  // Further secrets whose tokens, cursors and change ids are accepted while only SECRET_TOKEN
  // signs: a rotation (docs/operations.md). Each as strict as SECRET_TOKEN, with no comma and no
  // space at either end (a space after a comma would otherwise become part of the secret)
  SECRET_TOKEN_ACCEPTED: Type.String({
    default: '',
    pattern: '^([^,\\s][^,]{30,}[^,\\s](,[^,\\s][^,]{30,}[^,\\s])*)?$',
    description: 'secrets separated by commas, each a random string of at least 32 characters without a comma or a space at either end; empty for none'
  }),
  AUTH_USERNAME: Type.String({ minLength: 1, description: 'the username POST /token accepts' }),
  AUTH_PASSWORD: Type.String({ minLength: 1, description: 'the password POST /token accepts' }),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: DEFAULT_PORT, description: 'a port number from 0 to 65535 (0: one the system picks)' }),
  HOST: Type.String({ minLength: 1, default: DEFAULT_HOST, description: 'an address of this machine, e.g. 127.0.0.1, or 0.0.0.0 for every interface' }),
  LOG_LEVEL: Type.Union(LOG_LEVELS.map((level) => Type.Literal(level)), { default: DEFAULT_LOG_LEVEL, description: `one of ${LOG_LEVELS.join(', ')}` }),
  // A port of its own for /health/* and /metrics (plugins/app/admin-listener.ts), which the
  // public port then answers 404; 0: one the system picks. Unset: they stay on the public port
  ADMIN_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: 'a port number from 0 to 65535, other than PORT' })),
  // The address that port is bound to: an IP address or a host name, not a URL or a port
  ADMIN_HOST: Type.String({ pattern: '^([0-9A-Fa-f:.]+|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*)$', default: DEFAULT_ADMIN_HOST, description: 'an IP address or a host name' }),
  DB_POOL_MAX: Type.Integer({ minimum: 1, maximum: 100, default: 10, description: 'an integer from 1 to 100' }),
  // The most a page of a listing with a filter may run in PostgreSQL before the server cancels it
  // and the client gets 422 (docs/operations.md, The cost of a listing); within the 3 s bound of
  // every statement (src/db/time-bounds.ts)
  LISTING_BUDGET_MS: Type.Integer({ minimum: 1, maximum: 3000, default: 1000, description: 'milliseconds from 1 to 3000' }),
  // Which SQL the service sends for what Citus cannot run across shards (src/db/dialect.ts):
  // auto, Citus's on a server with the citus extension and PostgreSQL's elsewhere; citus, Citus's
  // on any server, which is how the tests run that SQL on plain PostgreSQL and PGlite
  DB_DIALECT: Type.Union([Type.Literal('auto'), Type.Literal('citus')], { default: 'auto', description: 'auto or citus' }),
  // After SIGTERM or SIGINT: how long readiness answers 503 while everything else is still served,
  // so a load balancer takes the instance out before it stops accepting (plugins/app/connections.ts).
  // At most 10 minutes: a larger value is a unit mistake
  SHUTDOWN_DELAY_MS: Type.Integer({ minimum: 0, maximum: 600_000, default: 0, description: 'milliseconds from 0 to 600000' }),
  // Open client connections, in all and per client address (the socket's peer, an IPv6 /64): a
  // connection over either bound is answered 503 or 429 and closed. At most what the file
  // descriptor limit leaves (CONNECTION_HARD_CAP); the one per address at most MAX_CONNECTIONS,
  // which the connections plugin checks at start-up
  MAX_CONNECTIONS: Type.Integer({
    minimum: 1,
    maximum: CONNECTION_HARD_CAP,
    default: DEFAULT_MAX_CONNECTIONS,
    description: `an integer from 1 to ${CONNECTION_HARD_CAP} (the file-descriptor limit minus ${RESERVED_FDS + ADMIN_CONNECTION_HARD_CAP})`
  }),
  MAX_CONNECTIONS_PER_ADDRESS: Type.Integer({ minimum: 1, default: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, description: 'an integer from 1 to MAX_CONNECTIONS' }),
  // A response whose client takes none of it for this long is cut off (src/connections.ts).
  // At least 10 s: the same timer runs while a handler waits for the database (at most 5 s)
  SEND_TIMEOUT_MS: Type.Integer({ minimum: 10_000, maximum: 600_000, default: 30_000, description: 'milliseconds from 10000 to 600000' }),
  // Requests per client address and minute to the book routes and the feed, counted where the
  // POST /token attempts are (plugins/app/api-limit.ts); 0: no limit
  API_RATE_LIMIT: Type.Integer({ minimum: 0, default: 0, description: 'requests a minute, 0 for no limit' }),
  // Attempts at POST /token per client address and minute
  TOKEN_RATE_LIMIT: Type.Integer({ minimum: 1, default: 30, description: 'attempts a minute, at least 1' }),
  // Attempts at POST /token per username and minute, from all addresses that have not logged in
  // in the last 7 days together: guessing spread over many addresses (plugins/app/login-attempts.ts)
  TOKEN_USERNAME_RATE_LIMIT: Type.Integer({ minimum: 1, default: 10, description: 'attempts a minute, at least 1' }),
  // Where all instances count those attempts together: redis[s]://[[user]:password@]host[:port][/db],
  // no query (it would override the client's time bounds); empty: each process counts alone
  REDIS_URL: Type.String({
    default: '',
    pattern: '^(rediss?://[^\\s/?#]+(/[0-9]*)?)?$',
    description: 'redis://[[user]:password@]host[:port][/db] or rediss://..., without a query; empty for none'
  }),
  // The bounds of an import (POST /books): the bytes of its body, its books, and how many run at
  // once in an instance; one over them is answered 413, or 503 for one import too many
  IMPORT_MAX_BYTES: Type.Integer({ minimum: 1, default: 1_073_741_824, description: 'bytes, at least 1' }),
  IMPORT_MAX_BOOKS: Type.Integer({ minimum: 1, default: 10_000_000, description: 'books, at least 1' }),
  IMPORTS_AT_ONCE: Type.Integer({ minimum: 1, maximum: 100, default: 2, description: 'an integer from 1 to 100' }),
  // Browser origins allowed to call the service (CORS), comma-separated `http(s)://host[:port]`
  // without path or `*`; empty: CORS off
  CORS_ORIGINS: Type.String({
    default: '',
    description: 'origins separated by commas, each http(s)://host[:port] without a path (not *); empty for none',
    pattern: '^\\s*(https?://[^/?#\\s,*]+\\s*(,\\s*https?://[^/?#\\s,*]+\\s*)*)?$'
  })
})

export type Config = Static<typeof ConfigSchema>

/** What a test or an embedding program gives the app instead of the environment. */
export type ConfigInput = Partial<Record<keyof Config, string>>

/** Variables whose value no message shows, only its length. */
const SECRET_VARIABLES = new Set(['SECRET_TOKEN', 'SECRET_TOKEN_ACCEPTED', 'AUTH_PASSWORD'])

/**
 * The secrets of SECRET_TOKEN_ACCEPTED, SECRET_TOKEN left out: what verification tries after
 * SECRET_TOKEN, in their order, when SECRET_TOKEN does not verify.
 */
export function acceptedSecrets ({ SECRET_TOKEN, SECRET_TOKEN_ACCEPTED }: Pick<Config, 'SECRET_TOKEN' | 'SECRET_TOKEN_ACCEPTED'>): string[] {
  if (SECRET_TOKEN_ACCEPTED === '') return []
  return [...new Set(SECRET_TOKEN_ACCEPTED.split(','))].filter((secret) => secret !== SECRET_TOKEN)
}

/** One failed check of the configuration, as ajv reports it (the `errors` of @fastify/env's error). */
export interface ConfigError {
  instancePath: string
  keyword: string
  params: Record<string, unknown>
}

/** A value as a message may show it: a secret by its length, the password of a URL masked. */
function shown (variable: string, value: string): string {
  if (variable === 'SECRET_TOKEN_ACCEPTED' && value !== '') {
    const lengths = value.split(',').map((secret) => secret.length)
    return lengths.length === 1 ? `1 secret, ${lengths[0]} characters long` : `${lengths.length} secrets, ${lengths.join(', ')} characters long`
  }
  if (SECRET_VARIABLES.has(variable)) return `${value.length} characters long`
  if (value === '') return 'empty'
  return JSON.stringify(value.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@]*):[^/@]*@/i, '$1:***@'))
}

/**
 * The failed checks of the configuration as one line for an operator: each variable, what it
 * holds and what it should hold (its `description` above), e.g. `LOG_LEVEL is "verbose"; set
 * LOG_LEVEL to one of fatal, error, ...`. ajv's own wording names the schema's keywords instead
 * (`env/DB_URL must match pattern "^(postgres..."`). Empty when no check names a variable.
 */
export function describeConfigErrors (errors: ConfigError[], values: Record<string, string | undefined>): string {
  const variables = new Set(errors.map((error) => error.keyword === 'required'
    ? String(error.params.missingProperty)
    : error.instancePath.split('/')[1] ?? ''))
  variables.delete('')
  const properties: Record<string, { description?: string }> = ConfigSchema.properties
  return [...variables].map((variable) => {
    const value = values[variable]
    const holds = value === undefined ? 'is not set' : `is ${shown(variable, value)}`
    return `${variable} ${holds}; set ${variable} to ${properties[variable]?.description ?? 'a valid value'}`
  }).join('; ')
}

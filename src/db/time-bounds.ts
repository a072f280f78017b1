/**
 * How long the service waits for PostgreSQL. Together they bound what the database can cost one
 * request, whatever it does (refuses, stalls, swallows packets): `DATABASE_CALL_BOUND_MS`.
 */

/** Getting a connection, from the pool or a new one. */
export const CONNECT_TIMEOUT_MS = 2_000

/** One statement, enforced by the server (`statement_timeout`) and by the client. */
export const STATEMENT_TIMEOUT_MS = 3_000

export const DATABASE_CALL_BOUND_MS = CONNECT_TIMEOUT_MS + STATEMENT_TIMEOUT_MS

/**
 * How long the service waits for PostgreSQL. Together they bound what the database can cost one
 * request, whatever it does (refuses, stalls, swallows packets): the sum of the two.
 */

/** Getting a connection, from the pool or a new one. */
export const CONNECT_TIMEOUT_MS = 2_000

/** One statement, enforced by the server (`statement_timeout`) and by the client. */
export const STATEMENT_TIMEOUT_MS = 3_000

/**
 * The server-side bounds, for the transaction it opens: `SET LOCAL` ends with the transaction.
 * Not startup parameters or session `SET`s: behind a pooler in transaction mode (PgBouncer) a
 * session is shared by whoever comes next, and PgBouncer refuses startup parameters it does not
 * know. A transaction left open by a client that went away is ended after the same bound.
 *
 * READ COMMITTED is PostgreSQL's default; written out because the statements rely on it (each
 * statement sees what committed before it, a row lock waits rather than fails) and a server's
 * `default_transaction_isolation` may say otherwise.
 */
export const BEGIN_BOUNDED = `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = ${STATEMENT_TIMEOUT_MS}; ` +
  `SET LOCAL idle_in_transaction_session_timeout = ${STATEMENT_TIMEOUT_MS}`

/**
 * SQLSTATE classes and socket codes that mean "the database cannot serve us right now", as
 * opposed to a bug in a query: 08 connection exception, 53 insufficient resources, 57P0x
 * operator intervention (shutdown, terminated backend), 57014 statement timeout, 25006 a
 * read-only server (a standby, or a primary being demoted: during a failover, the connection
 * reached the wrong server), and what a new connection can be refused with: 55000 (database not
 * accepting connections), 3D000 (database gone), 28 (credentials no longer accepted).
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|57P0|57014|25006|55000|3D000|28)/
// EMFILE and ENFILE: no descriptor left for a new connection (the process's or the system's limit)
const UNAVAILABLE_SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EPIPE', 'EMFILE', 'ENFILE'])
// node-postgres raises these without a code when a connection dies, cannot be made in time (pool
// or client) or stops answering (query_timeout)
const UNAVAILABLE_POOL_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|timeout expired$|Client has encountered a connection error|Query read timeout)/

/** Whether `error` says the database is unreachable or refusing (503), not that a query is wrong (500). */
export function isDatabaseUnavailable (error: { code?: string, message?: string }): boolean {
  const code = error.code ?? ''
  return UNAVAILABLE_SQLSTATE.test(code) ||
    UNAVAILABLE_SOCKET_CODES.has(code) ||
    UNAVAILABLE_POOL_MESSAGES.test(error.message ?? '')
}

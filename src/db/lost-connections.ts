/**
 * A pool whose lost connections end nothing: a connection the server drops (a restart, a
 * failover, `pg_terminate_backend`) emits `error` on its client, which ends the process where
 * nothing listens.
 */
import type { Pool } from 'pg'

// A lost connection fails the client's pending queries, which is how their callers learn of it
function ignoreLostConnection () {}

/**
 * Listens for the losses of `pool`'s connections: `onIdleLost` hears of an idle one (which the
 * pool discards by itself), and each client has a listener of its own from the moment it has
 * connected, for as long as it lives. A listener added once a client is checked out would come
 * too late: the pool hands a new client to its first user from inside the driver's reading of
 * the server's ReadyForQuery, and the promise of `pool.connect()` resolves only after that read;
 * a FATAL error that came in the same read (the backend terminated as it started) is emitted
 * before then.
 */
export function listenForLostConnections (pool: Pool, onIdleLost: (err: Error) => void): void {
  pool.on('error', onIdleLost)
  pool.on('connect', (client) => client.on('error', ignoreLostConnection))
}

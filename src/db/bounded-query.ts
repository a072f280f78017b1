import type { Pool, PoolClient, QueryConfig, QueryResult, QueryResultRow } from 'pg'
import { CopyOut, type CopiedRows } from './copy-out.js'
import { BEGIN_BOUNDED } from './time-bounds.js'

/** SQLSTATE read_only_sql_transaction: what a standby answers to a write. */
const READ_ONLY_SQLSTATE = '25006'

/** A connection that reached a standby: answered like a lost connection (src/db/unavailable.ts). */
class StandbyConnectionError extends Error {
  readonly code = READ_ONLY_SQLSTATE
  constructor () {
    super('the database server is a standby (read-only)')
  }
}

/**
 * Connections known to reach a primary. A server becomes a standby only through a restart,
 * which ends its connections, so each connection is checked once, in its first transaction.
 */
const onPrimary = new WeakSet<PoolClient>()
const IS_STANDBY = 'SELECT pg_is_in_recovery() AS standby'

/**
 * One statement, in a transaction of its own that bounds it on the server (`BEGIN_BOUNDED`).
 * The commands are written together on a pipelining connection (the pool's `pipeline: true`):
 * one round trip, as for the bare statement. A new connection asks in the same write whether it
 * reached a standby (behind a load balancer during a failover, it may): a read there would
 * answer from a server that is behind or about to be replaced, and a write fails with 25006.
 * Any failure discards the connection, as `pool.query` does: after a client-side timeout its
 * statement may still run.
 */
export async function boundedQuery<R extends QueryResultRow> (pool: Pool, query: QueryConfig): Promise<QueryResult<R>> {
  const [result] = await boundedTransaction<[R]>(pool, [query])
  return result
}

/** `boundedQuery` on `pool`, as a repository calls it: a statement's text and its values. */
export function boundedQueryOn (pool: Pool) {
  return <R extends QueryResultRow>(text: string, values: unknown[]) => boundedQuery<R>(pool, { text, values })
}

/**
 * Several statements in one transaction, bounded and written together as `boundedQuery`'s one.
 * In READ COMMITTED each statement reads with a snapshot of its own, taken as it starts: a
 * statement after a lock sees what committed before the lock was granted.
 *
 * `keepAfter`: failures after which the connection is kept rather than discarded, when the
 * server still answered the transaction's end (a statement the server cancelled at its own
 * `statement_timeout` leaves the connection as clean as a success does: the `COMMIT` answers
 * `ROLLBACK`, and the `SET LOCAL`s end with it). A listing over its budget is a client's request,
 * not a fault: discarding its connection would have every such request open a new one.
 */
export async function boundedTransaction<R extends QueryResultRow[]> (
  pool: Pool, queries: Array<QueryConfig | CopyOut>, keepAfter: (err: unknown) => boolean = () => false
): Promise<{ [K in keyof R]: QueryResult<R[K]> }> {
  // A lost connection fails these queries; its `error` event has a listener from the pool's
  // making of it (src/db/lost-connections.ts)
  const client = await pool.connect()
  let ended: Promise<unknown> | null = null
  try {
    const checking = onPrimary.has(client) ? null : client.query<{ standby: boolean }>(IS_STANDBY)
    const begun = client.query(BEGIN_BOUNDED)
    // A COPY's query is its own answer, settled through `copied`
    const statements = queries.map((query) => query instanceof CopyOut ? (client.query(query), query.copied) : client.query(query))
    ended = client.query('COMMIT')
    const [check, , ...results] = await Promise.all([checking, begun, ...statements, ended])
    if (check?.rows[0]?.standby === true) throw new StandbyConnectionError()
    onPrimary.add(client)
    client.release()
    return results.slice(0, queries.length) as { [K in keyof R]: QueryResult<R[K]> }
  } catch (err) {
    const clean = ended !== null && keepAfter(err) && await ended.then(() => true, () => false)
    client.release(clean ? undefined : err as Error)
    throw err
  }
}

/**
 * The rows of `COPY (<select>) TO STDOUT CSV` (`statement`), in a transaction of its own, bounded
 * and written together as `boundedQuery`'s statement (src/db/copy-out.ts).
 */
export async function boundedCopyOut (pool: Pool, statement: string, options?: { startsAfter?: boolean, rows?: number }): Promise<CopiedRows> {
  const copy = new CopyOut(statement, options)
  await boundedTransaction(pool, [copy])
  return copy.copied
}

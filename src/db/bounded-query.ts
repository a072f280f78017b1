import type { Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg'
import { BEGIN_BOUNDED } from './time-bounds.js'

// A lost connection fails the client's pending queries, which is how the caller learns of it; it
// also emits `error` on the client, which would end the process with no listener
function ignoreClientError () {}

/**
 * One statement, in a transaction of its own that bounds it on the server (`BEGIN_BOUNDED`).
 * The three commands are written together on a pipelining connection (the pool's
 * `pipeline: true`): one round trip, as for the bare statement. Any failure discards the
 * connection, as `pool.query` does: after a client-side timeout its statement may still run.
 */
export async function boundedQuery<R extends QueryResultRow> (pool: Pool, query: QueryConfig): Promise<QueryResult<R>> {
  const client = await pool.connect()
  client.on('error', ignoreClientError)
  try {
    const [, result] = await Promise.all([client.query(BEGIN_BOUNDED), client.query<R>(query), client.query('COMMIT')])
    client.off('error', ignoreClientError)
    client.release()
    return result
  } catch (err) {
    client.off('error', ignoreClientError)
    client.release(err as Error)
    throw err
  }
}

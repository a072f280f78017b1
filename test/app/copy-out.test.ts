/**
 * `COPY ... TO STDOUT CSV` as a query of node-postgres on a pipelining pool, as the service's pool
 * is (src/db/copy-out.ts, src/db/bounded-query.ts `boundedCopyOut`): each row ended by CRLF, the
 * queries written with it answered as their own, failures and node-postgres's read timeout as for
 * any query. The class relies on node-postgres handing CopyData to the active query: these tests
 * fail on a release that stops. On a real PostgreSQL server.
 */
import pg from 'pg'
import t from 'tap'
import { boundedCopyOut } from '../../src/db/bounded-query.js'
import { CopyOut } from '../../src/db/copy-out.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'

/** The read timeout of the pool here: short, so that a timer left armed would fire within a test. */
const READ_TIMEOUT_MS = 300

const backendPid = async (pool: pg.Pool) => (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid

t.test('COPY TO on a pipelining pool', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const pool = new pg.Pool({ connectionString: dbUrl, pipeline: true, max: 1, query_timeout: READ_TIMEOUT_MS } as pg.PoolConfig)
  // The database is dropped first, its sessions ended: an idle connection's end is no failure here
  pool.on('error', () => {})
  t.teardown(() => pool.end())

  t.test('each row ended by CRLF, an LF inside a field kept; the id it ends with', async (t) => {
    const copied = await boundedCopyOut(pool, String.raw`COPY (SELECT g AS id, 'a,"b"' AS title, E'line\nend' AS author, g * 10 AS year
      FROM generate_series(1, 3) g) TO STDOUT CSV`)
    const row = (id: number) => `${id},"a,""b""","line\nend",${id * 10}\r\n`
    t.strictSame({ ...copied, text: copied.text.toString() }, { text: row(1) + row(2) + row(3), count: 3, last: '3', after: null })
    const ahead = await boundedCopyOut(pool, 'COPY (SELECT g, g * 10 FROM generate_series(7, 9) g) TO STDOUT CSV', { startsAfter: true })
    t.strictSame({ ...ahead, text: ahead.text.toString() }, { text: '8,80\r\n9,90\r\n', count: 2, last: '9', after: '7' }, 'the first row read only for where the others start after')
    const few = await boundedCopyOut(pool, 'COPY (SELECT 1, 2) TO STDOUT CSV', { rows: 1000 })
    t.ok(few.text.buffer.byteLength <= Math.max(2 * few.text.length, Buffer.poolSize),
      `a page far smaller than the room taken for it holds no more than its own size (${few.text.buffer.byteLength} bytes)`)
    const none = await boundedCopyOut(pool, 'COPY (SELECT 1 WHERE false) TO STDOUT CSV')
    t.strictSame({ ...none, text: none.text.toString() }, { text: '', count: 0, last: null, after: null })
  })

  t.test('the queries written beside a COPY are answered as their own', async (t) => {
    const client = await pool.connect()
    try {
      t.equal(client.pipeline, true, 'precondition: the connection pipelines')
      const copy = new CopyOut("COPY (SELECT g, repeat('x', 100000) FROM generate_series(1, 20) g) TO STDOUT CSV")
      const before = client.query<{ n: number }>('SELECT 1 AS n')
      client.query(copy)
      const after = client.query<{ n: number }>('SELECT 2 AS n')
      const [first, output, second] = await Promise.all([before, copy.copied, after])
      t.equal(first.rows[0]!.n, 1)
      t.strictSame({ ...output, text: output.text.length }, { text: 11 * 2 + 9 + 20 * (1 + 100000 + 2), count: 20, last: '20', after: null },
        'two megabytes, across many reads of the socket')
      t.equal(output.text.toString().split('\r\n')[7], `8,${'x'.repeat(100000)}`)
      t.equal(second.rows[0]!.n, 2)
    } finally {
      client.release()
    }
  })

  t.test('no read timeout left armed: the connection outlives it', async (t) => {
    const pid = await backendPid(pool)
    t.equal((await boundedCopyOut(pool, 'COPY (SELECT 1, 2) TO STDOUT CSV')).text.toString(), '1,2\r\n')
    // A timer left armed would end the connection: a pipelining client's answer to a timeout
    await new Promise((resolve) => setTimeout(resolve, 2 * READ_TIMEOUT_MS))
    t.equal(await backendPid(pool), pid, 'the same connection')
  })

  t.test('a COPY that outlasts the read timeout fails, and its connection is discarded', async (t) => {
    const pid = await backendPid(pool)
    await t.rejects(boundedCopyOut(pool, 'COPY (SELECT pg_sleep(2)) TO STDOUT CSV'), /timeout/i)
    t.not(await backendPid(pool), pid, 'another connection')
  })

  t.test('a COPY the server fails is rejected with its error, and the next one works', async (t) => {
    await t.rejects(boundedCopyOut(pool, 'COPY (SELECT 1 / 0) TO STDOUT CSV'), /division by zero/)
    t.equal((await boundedCopyOut(pool, 'COPY (SELECT 1, 2) TO STDOUT CSV')).text.toString(), '1,2\r\n')
  })

  t.test('output whose rows do not end with a line end is refused', async (t) => {
    await t.rejects(boundedCopyOut(pool, 'COPY (SELECT 1, 2) TO STDOUT (FORMAT binary)'), /did not end with a line end/)
  })
})

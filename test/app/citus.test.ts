/**
 * On a real Citus cluster only: TEST_DB_URL at a coordinator (docs/development.md, Citus). What
 * the migrations do there, where ids come from, and that the service refuses a worker. The SQL
 * the service sends on Citus runs everywhere else with DB_DIALECT=citus (npm run test:citus-sql).
 */
import t from 'tap'
import { build, call, getToken } from '../helper.js'
import { citusWorkerUrls, createDatabase, ON_CITUS, pgClient } from '../helpers/database.js'
import { migrations, statementsOf } from '../../src/db/migrations.js'

const onlyOnCitus = { skip: !ON_CITUS && 'needs TEST_DB_URL at a Citus coordinator (docs/development.md, Citus)' }

const DISTRIBUTED = `SELECT table_name::text AS table, distribution_column AS column, shard_count::int AS shards
  FROM citus_tables WHERE citus_table_type = 'distributed' ORDER BY table_name::text`

t.test('the first start distributes books by id and the keys by key; a second changes nothing', onlyOnCitus, async (t) => {
  const dbUrl = await createDatabase(t)
  const db = await pgClient(t, dbUrl)
  const first = await build(t, dbUrl)
  await first.ready()
  const distributed = (await db.query(DISTRIBUTED)).rows
  t.strictSame(distributed, [
    { table: 'books', column: 'id', shards: 32 },
    { table: 'idempotency_keys', column: 'key', shards: 32 }
  ], 'both tables spread over 32 shards each; schema_migrations stays on the coordinator')
  const kept = await db.query("SELECT logicalrelid::text AS table, partmethod FROM pg_dist_partition WHERE partmethod = 'n'")
  t.strictSame(kept.rows, [{ table: 'book_changes', partmethod: 'n' }],
    'the change log stays on the coordinator, in Citus\'s metadata: a write and its change commit in two phases together')
  const shards = (await db.query('SELECT shardid::text FROM citus_shards ORDER BY shardid')).rows
  const second = await build(t, dbUrl)
  await second.ready()
  t.strictSame((await db.query(DISTRIBUTED)).rows, distributed, 'the same tables, distributed alike')
  t.strictSame((await db.query('SELECT shardid::text FROM citus_shards ORDER BY shardid')).rows, shards, 'the very same shards')
})

t.test('tables made on the coordinator alone, with rows, are distributed at the start, their rows kept', onlyOnCitus, async (t) => {
  // A database that ran on PostgreSQL before Citus was installed: the migrations applied, rows stored
  const dbUrl = await createDatabase(t)
  const db = await pgClient(t, dbUrl)
  await db.query('CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())')
  for (const migration of migrations) {
    for (const statement of statementsOf(migration)) await db.query(statement)
    await db.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name])
  }
  await db.query("INSERT INTO books (title, author, year) SELECT 'Before ' || n, 'A', n FROM generate_series(1, 50) n")
  t.equal((await db.query(DISTRIBUTED)).rowCount, 0, 'precondition: nothing distributed')
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  t.equal((await db.query(DISTRIBUTED)).rowCount, 2, 'both tables distributed')
  const { body } = await call(app, token, { method: 'GET', url: '/books' })
  t.equal(body.data.length, 50, 'every book kept')
  const created = await call(app, token, { method: 'POST', url: '/book', payload: { title: 'After', author: 'A', year: 1 } })
  t.equal(created.body.data.id, 51, 'ids go on where they were')
  // The coordinator's own table is a shell now: its copy of the rows was emptied
  const { rows: [local] } = await db.query("SELECT pg_relation_size('books')::int AS bytes")
  t.equal(local.bytes, 0, 'no rows left on the coordinator itself')
})

t.test('ids drawn on the workers stay exact in JSON, and unique', onlyOnCitus, async (t) => {
  // The service draws ids on the coordinator (1, 2, ...). A row a program inserts through a
  // worker gets an id from that worker's range, which starts at its group id x 2^48
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const created = await call(app, token, { method: 'POST', url: '/book', payload: { title: 'Through the service', author: 'A', year: 1 } })
  t.equal(created.body.data.id, 1, 'the service\'s first id, drawn on the coordinator')
  const ids: number[] = [created.body.data.id]
  for (const [i, url] of (await citusWorkerUrls(dbUrl)).entries()) {
    const worker = await pgClient(t, url)
    const { rows: [{ group }] } = await worker.query('SELECT groupid AS group FROM pg_dist_local_group')
    const { rows: [{ id }] } = await worker.query("INSERT INTO books (title, author, year) VALUES ($1, 'A', 1) RETURNING id::text", [`Through worker ${i}`])
    t.equal(BigInt(id), (BigInt(group) << 48n) + 1n, `worker ${i}: id ${id}, the first of group ${group} (group x 2^48 + 1)`)
    t.ok(BigInt(id) <= 2n ** 53n, 'within 2^53')
    const found = await call(app, token, { method: 'GET', url: `/book/${id}` })
    t.equal(found.status, 200)
    t.equal(String(found.body.data.id), id, 'GET answers the very id, as a JSON number')
    ids.push(found.body.data.id)
  }
  t.equal(new Set(ids).size, ids.length, 'every id once')
  const listed = await call(app, token, { method: 'GET', url: '/books' })
  t.strictSame(listed.body.data.map((book: { id: number }) => book.id), [...ids].sort((a, b) => a - b), 'the listing answers each exactly')
})

t.test('a service whose DB_URL names a worker does not start, and says to use the coordinator', onlyOnCitus, async (t) => {
  const dbUrl = await createDatabase(t)
  const [workerUrl] = await citusWorkerUrls(dbUrl)
  await t.rejects(build(t, workerUrl).then((app) => app.ready()),
    { message: 'DB_URL names a Citus worker; point it at the coordinator (docs/deployment.md, Citus)' })
  const worker = await pgClient(t, workerUrl!)
  t.equal((await worker.query("SELECT to_regclass('books') AS books")).rows[0].books, null, 'nothing created there')
})

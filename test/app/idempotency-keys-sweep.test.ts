/**
 * Expired idempotency keys are removed by the service itself, in short batches, oldest first;
 * keys within their retention stay and keep answering.
 */
import t from 'tap'
import { IDEMPOTENCY_KEY_RETENTION_HOURS } from '../../plugins/app/idempotency-keys-sweep.js'
import { REMOVAL_BATCH as SWEEP_BATCH, REMOVAL_PAUSE_MS as SWEEP_PAUSE_MS } from '../../src/db/batched-removal.js'
import { build, call, getToken } from '../helper.js'
import { createDatabase, NEEDS_SERVER, ON_CITUS, pgClient } from '../helpers/database.js'
import { waitUntil } from '../helpers/wait.js'

const RETENTION_SECONDS = IDEMPOTENCY_KEY_RETENTION_HOURS * 3600

/**
 * `count` keys named `<prefix>-<n>`, each naming book `n`, stored `ageHours` ago and `n` seconds
 * more: written youngest first, so the table's order is not the order of age.
 */
const STORE_KEYS = `INSERT INTO idempotency_keys (key, fingerprint, book_id, created_at)
  SELECT $1 || '-' || n, '\\x00', n, now() - make_interval(hours => $3) - make_interval(secs => n)
  FROM generate_series(1, $2::int) AS n`
const COUNT_KEYS = "SELECT count(*)::int AS count FROM idempotency_keys WHERE key LIKE $1 || '-%'"

t.test('a sweep removes at most one batch of expired keys, oldest first, and no young one', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  await app.ready()
  const db = await pgClient(t, dbUrl)
  const count = async (prefix: string) => (await db.query<{ count: number }>(COUNT_KEYS, [prefix])).rows[0]!.count
  await db.query(STORE_KEYS, ['expired', SWEEP_BATCH * 2 + 500, IDEMPOTENCY_KEY_RETENTION_HOURS + 1])
  await db.query(STORE_KEYS, ['young', 50, IDEMPOTENCY_KEY_RETENTION_HOURS - 1])

  t.equal(await app.idempotencyKeys.sweep(RETENTION_SECONDS, SWEEP_BATCH), SWEEP_BATCH, 'a full batch')
  // Oldest first: the keys stored longest ago carry the highest numbers
  const { rows: [left] } = await db.query<{ n: number }>(
    "SELECT max(split_part(key, '-', 2)::int)::int AS n FROM idempotency_keys WHERE key LIKE 'expired-%'")
  t.equal(left!.n, SWEEP_BATCH + 500, 'the oldest went first')
  t.equal(await app.idempotencyKeys.sweep(RETENTION_SECONDS, SWEEP_BATCH), SWEEP_BATCH)
  t.equal(await app.idempotencyKeys.sweep(RETENTION_SECONDS, SWEEP_BATCH), 500)
  t.equal(await app.idempotencyKeys.sweep(RETENTION_SECONDS, SWEEP_BATCH), 0, 'nothing left to sweep')
  t.equal(await count('expired'), 0)
  t.equal(await count('young'), 50, 'keys within their retention stay')
})

t.test('the service sweeps by itself from its start, and a key within its retention still answers', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const first = await build(t, dbUrl)
  const token = await getToken(first)
  const book = { title: 'Kept', author: 'A', year: 2001 }
  const created = await call(first, token, { method: 'POST', url: '/book', payload: book, headers: { 'idempotency-key': '"kept"' } })
  const db = await pgClient(t, dbUrl)
  // Almost at the end of its retention
  await db.query("UPDATE idempotency_keys SET created_at = now() - make_interval(hours => $1) + interval '1 minute' WHERE key = 'kept'",
    [IDEMPOTENCY_KEY_RETENTION_HOURS])
  await db.query(STORE_KEYS, ['expired', SWEEP_BATCH * 3, IDEMPOTENCY_KEY_RETENTION_HOURS + 2])
  // When each delete ended, by the server's clock (a statement-level trigger). Not on a Citus
  // coordinator, which runs no trigger of a distributed table
  if (!ON_CITUS) {
    await db.query(`CREATE TABLE sweep_deletes (at timestamptz NOT NULL);
      CREATE FUNCTION note_sweep_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO sweep_deletes VALUES (clock_timestamp()); RETURN NULL; END $$;
      CREATE TRIGGER note_sweep_delete AFTER DELETE ON idempotency_keys FOR EACH STATEMENT EXECUTE FUNCTION note_sweep_delete()`)
  }

  // A second instance starting on the database: its sweep runs without being asked, its first
  // batch before the instance is ready (which build awaits)
  const starting = performance.now()
  const second = await build(t, dbUrl)
  const left = (await db.query<{ count: number }>(COUNT_KEYS, ['expired'])).rows[0]!.count
  t.ok(left <= SWEEP_BATCH * 2, `a batch removed before the instance was ready (${left} left)`)
  await waitUntil(async () =>
    (await db.query<{ count: number }>(COUNT_KEYS, ['expired'])).rows[0]!.count === 0, 10_000, 'expired keys removed')
  const took = Math.round(performance.now() - starting)
  t.comment(`${SWEEP_BATCH * 3} expired keys removed within ${took} ms of the start`)
  // Three batches, a pause after each full one: never the whole backlog at once
  t.ok(took >= 2 * SWEEP_PAUSE_MS, `spread over ${took} ms, at least two pauses of ${SWEEP_PAUSE_MS} ms`)
  if (!ON_CITUS) {
    const { rows: gaps } = await db.query<{ ms: number }>(
      'SELECT (extract(epoch FROM at - lag(at) OVER (ORDER BY at)) * 1000)::float8 AS ms FROM sweep_deletes ORDER BY at OFFSET 1 LIMIT 2')
    t.equal(gaps.length, 2, 'precondition: three deletes, one a batch')
    t.ok(gaps.every(({ ms }) => ms >= SWEEP_PAUSE_MS), `a pause of ${SWEEP_PAUSE_MS} ms before each batch after the first (${gaps.map(({ ms }) => Math.round(ms)).join(', ')} ms)`)
  }
  const again = await call(second, token, { method: 'POST', url: '/book', payload: book, headers: { 'idempotency-key': '"kept"' } })
  t.strictSame(again.body, created.body, 'the kept key still answers with its book')
})

t.test('two instances sweeping at once remove every expired key once, and neither fails', { skip: NEEDS_SERVER }, async (t) => {
  // PostgreSQL's SQL: each sweep skips the rows the other holds. Citus's: one waits for the
  // other's delete, then removes what it left
  const dbUrl = await createDatabase(t)
  const [first, second] = [await build(t, dbUrl), await build(t, dbUrl)]
  await Promise.all([first.ready(), second.ready()])
  const db = await pgClient(t, dbUrl)
  const expired = SWEEP_BATCH * 4
  await db.query(STORE_KEYS, ['expired', expired, IDEMPOTENCY_KEY_RETENTION_HOURS + 1])
  let removed = 0
  for (let round = 0; round < 20 && removed < expired; round++) {
    const counts = await Promise.all([first, second].map((app) => app.idempotencyKeys.sweep(RETENTION_SECONDS, SWEEP_BATCH)))
    removed += counts[0]! + counts[1]!
  }
  t.equal(removed, expired, 'the removed keys, counted by both sweeps, are the expired ones')
  t.equal((await db.query<{ count: number }>(COUNT_KEYS, ['expired'])).rows[0]!.count, 0, 'none left')
})

/**
 * No create that was stored is answered with a 5xx, on a real service process: creates that share
 * one statement (a batch) each keep their own answer when the follow-up read of another one of
 * them fails after the statement committed.
 */
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, NEEDS_SERVER, pgClient, waitForSessionsOnLock, WAITS_ON_A_LOCK } from '../helpers/database.js'
import { rawRequest } from '../helpers/raw-http.js'
import { startService } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'

t.test('a stored create keeps its 201 when the re-read of a conflicting key in its batch fails', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabase(t)
  const service = await startService(t, testEnv(dbUrl))
  const token = await service.token()
  const holder = await pgClient(t, dbUrl)
  const locker = await pgClient(t, dbUrl)
  // Outside any transaction: pg_stat_activity is read once per transaction
  const watcher = await pgClient(t, dbUrl)

  // Another writer (as another instance would) stores two keys, without their advisory locks,
  // and has not committed yet: a create with either key waits on its row
  await holder.query('BEGIN')
  await holder.query("INSERT INTO idempotency_keys (key, fingerprint, book_id) VALUES ('first', '\\x00', 1), ('second', '\\x00', 1)")

  const create = async (title: string, key?: string) => {
    const body = JSON.stringify({ title, author: 'A', year: 1 })
    const answer = await rawRequest(service.port, 'POST /book HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n' +
      `Authorization: ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n` +
      (key === undefined ? '' : `Idempotency-Key: "${key}"\r\n`) + `\r\n${body}`, { idleMs: 10_000 })
    return { ...answer, body: JSON.parse(answer.text) as { data: { id: number } | null } }
  }
  // A first batch waits on the row of `first`; the next two creates, sent together, then share the
  // next batch (a batch waits up to 50 ms for the one before): `second` and one without a key
  const first = create('First', 'first')
  await waitForSessionsOnLock(watcher, dbUrl, 1)
  const second = create('Second', 'second')
  const plain = create('Plain')
  await waitForSessionsOnLock(watcher, dbUrl, 2)

  // The re-read of the keys, once the statements committed, waits behind this lock until its
  // statement times out
  const locking = locker.query('BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE')
  await waitUntil(async () => (await watcher.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'bookkeeping-test' AND ${WAITS_ON_A_LOCK}`
  )).rows[0].n === 1, 4000, 'the table lock to be queued')
  await holder.query('COMMIT')
  await locking

  const [firstAnswer, secondAnswer, plainAnswer] = await Promise.all([first, second, plain])
  await locker.query('ROLLBACK')
  t.equal(plainAnswer.status, 201, `the stored create is answered 201: ${plainAnswer.text}`)
  for (const answer of [firstAnswer, secondAnswer]) {
    t.equal(answer.status, 503, `a create whose key could not be re-read is a 5xx: ${answer.text}`)
  }
  const { rows } = await watcher.query('SELECT id::int, title FROM books ORDER BY id')
  t.strictSame(rows, [{ id: plainAnswer.body.data?.id, title: 'Plain' }], 'only the book answered 201 is stored')
})

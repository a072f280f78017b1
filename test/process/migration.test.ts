/**
 * The migrations on a table that already holds many books (src/db/migrations.ts, the indexes of
 * version 4 and later): two instances start together on it while another client writes, and no
 * write waits a second; an index build cut short is built again at the next start; a step that
 * waits for a long transaction's lock gives up its place every 500 ms rather than queue writes;
 * a step held up past its time bound is tried again, three times at most.
 */
import type pg from 'pg'
import t, { type Test } from 'tap'
import { migrations, statementsOf } from '../../src/db/migrations.js'
import { STATEMENT_TIMEOUT_MS } from '../../src/db/time-bounds.js'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, NEEDS_SERVER, pgClient } from '../helpers/database.js'
import { expectStartupFailure, nonEmptyLines, spawnService } from '../helpers/service.js'
import { sleep, waitUntil } from '../helpers/wait.js'

/** Enough books that a build that blocked writes would block them for more than a second. */
const BOOKS = 400_000
/** The most a migration may hold up a write (docs/operations.md, Start-up and migrations). */
const WRITE_BOUND_MS = 1000

const indexes = migrations.flatMap(({ index }) => index === undefined ? [] : [index])
const INDEX_STATE = 'SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = ANY($1) ORDER BY c.relname'

/**
 * Writes books to `dbUrl` one after another, every 10 ms, until the returned `stop`: how many
 * writes, and the slowest in ms.
 */
async function writeMeanwhile (t: Test, dbUrl: string, write: (writer: pg.Client) => Promise<unknown>) {
  const writer = await pgClient(t, dbUrl)
  let slowest = 0
  let writes = 0
  const writing = { on: true }
  const done = (async () => {
    while (writing.on) {
      const started = performance.now()
      await write(writer)
      slowest = Math.max(slowest, performance.now() - started)
      writes++
      await sleep(10)
    }
  })()
  return async () => {
    writing.on = false
    await done
    return { writes, slowest }
  }
}

t.test('two instances migrate a large table together while it is written, and no write waits a second', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabaseWithBooks(t, BOOKS)
  const stopWriting = await writeMeanwhile(t, dbUrl, async (writer) => {
    const { rows: [{ id }] } = await writer.query("INSERT INTO books (title, author, year) VALUES ('written meanwhile', 'test', 1) RETURNING id")
    await writer.query('UPDATE books SET title = title || \'!\' WHERE id = $1', [id])
    await writer.query('SELECT * FROM books WHERE id = $1', [id])
  })
  const started = performance.now()
  const [a, b] = await Promise.all([spawnService(t, testEnv(dbUrl)), spawnService(t, testEnv(dbUrl))])
  await Promise.all([a.listening(120_000), b.listening(120_000)])
  const migrated = performance.now() - started
  const { writes, slowest } = await stopWriting()
  t.comment(`both listening after ${Math.round(migrated)} ms; ${writes} writes meanwhile, the slowest ${Math.round(slowest)} ms`)
  t.ok(migrated > 2 * WRITE_BOUND_MS, `precondition: the migration took a while (${Math.round(migrated)} ms)`)
  t.ok(writes > 20, 'precondition: the writes went on')
  t.ok(slowest < WRITE_BOUND_MS, `no write waited a second (${Math.round(slowest)} ms)`)

  const applied = nonEmptyLines(a.stdout + b.stdout).filter((line) => line.includes('"applied migration"')).length
  t.equal(applied, migrations.filter(({ alone }) => alone).length, 'each step that runs alone (the indexes, the analyze) applied by one instance')
  t.ok(nonEmptyLines(a.stdout + b.stdout).some((line) => line.includes('waiting for another instance to finish migrating')),
    'the other instance waited, and said so')
  const db = await pgClient(t, dbUrl)
  t.strictSame((await db.query(INDEX_STATE, [indexes])).rows, [...indexes].sort().map((name) => ({ name, valid: true })), 'every index built and valid')
  const { rows } = await db.query('SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version ORDER BY version')
  t.strictSame(rows, migrations.map(({ version }) => ({ version, n: 1 })), 'one row per version')
})

t.test('an index build cut short is dropped and built again at the next start', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabaseWithBooks(t, BOOKS)
  const db = await pgClient(t, dbUrl)
  const trigrams = migrations.find(({ index }) => index === 'books_title_trigrams')!
  const builder = await pgClient(t, dbUrl, { queryTimeoutMs: 120_000 })
  const { rows: [{ pid }] } = await builder.query('SELECT pg_backend_pid() AS pid')
  const building = builder.query(statementsOf(trigrams).join(';\n')).then(() => 'built', (err: Error) => err.message)
  // Cancelled once it is building (its entry is in the catalog, not yet valid)
  await waitUntil(async () => (await db.query(INDEX_STATE, [[trigrams.index]])).rowCount === 1, 30_000, 'the build to start')
  await db.query('SELECT pg_cancel_backend($1)', [pid])
  t.match(await building, /cancel/i, 'precondition: the build was cut short')
  t.strictSame((await db.query(INDEX_STATE, [[trigrams.index]])).rows, [{ name: trigrams.index, valid: false }], 'precondition: it left an invalid index')

  const service = await spawnService(t, testEnv(dbUrl))
  await service.listening(120_000)
  t.strictSame((await db.query(INDEX_STATE, [indexes])).rows, [...indexes].sort().map((name) => ({ name, valid: true })), 'built again: every index valid')
  const token = await service.token()
  const found = await service.request('GET', '/books?title=title%201234&limit=5', { token })
  t.equal(found.status, 200, 'and the filter it serves answers')
  t.ok((found.body as { data: unknown[] }).data.length > 0, 'with books')
})

t.test('a step that waits for a long transaction gives up its place every 500 ms, so writes do not queue behind it', { skip: NEEDS_SERVER }, async (t) => {
  // The tables of the first two steps: the next one (the columns that track changes of books)
  // takes the table's strongest lock
  const dbUrl = await createDatabaseWithBooks(t, 1000, ({ version }) => version <= 2)
  const db = await pgClient(t, dbUrl)
  // A long read: its transaction holds the table until it ends
  const reader = await pgClient(t, dbUrl)
  await reader.query('BEGIN')
  await reader.query('SELECT count(*) FROM books')
  const stopWriting = await writeMeanwhile(t, dbUrl, (writer) =>
    writer.query("INSERT INTO books (title, author, year) VALUES ('written meanwhile', 'test', 1)"))
  const service = await spawnService(t, testEnv(dbUrl))
  await service.waitFor(() => service.stdout.includes('a migration step waited too long for a lock; trying again'), 30_000, 'the step to give up its place once')
  await sleep(3000)
  t.equal(service.exit, null, 'precondition: the service still waits to migrate')
  await reader.query('COMMIT')
  await service.listening(60_000)
  const { writes, slowest } = await stopWriting()
  t.ok(writes > 50, `precondition: the writes went on (${writes})`)
  t.ok(slowest < WRITE_BOUND_MS, `no write waited a second behind the waiting step (${Math.round(slowest)} ms)`)
  const { rows } = await db.query('SELECT max(version) AS version FROM schema_migrations')
  t.equal(rows[0].version, migrations.at(-1)!.version, 'then every step applied')
})

/**
 * Makes the first `times` changes of a table in `db` stall for longer than the statement bound, as
 * on a disk that stalls: an event trigger runs within the statement. A sequence, which a rollback
 * does not undo, counts them.
 */
async function stallTableChanges (db: pg.Client, times: number) {
  await db.query(`CREATE SEQUENCE stalls;
    CREATE FUNCTION stall() RETURNS event_trigger LANGUAGE plpgsql AS $$
      BEGIN IF nextval('stalls') <= ${times} THEN PERFORM pg_sleep(${(STATEMENT_TIMEOUT_MS + 1000) / 1000}); END IF; END $$;
    CREATE EVENT TRIGGER stall ON ddl_command_start EXECUTE FUNCTION stall()`)
}

const RAN_PAST = 'a migration step ran past its time bound; trying again'

t.test('a step held up past its time bound is rolled back and tried again, not the end of the start-up', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabaseWithBooks(t, 1000, ({ version }) => version <= 2)
  const db = await pgClient(t, dbUrl)
  await stallTableChanges(db, 1)
  const service = await spawnService(t, testEnv(dbUrl))
  await service.listening(60_000)
  t.match(service.stdout, RAN_PAST, 'the step that stalled was tried again, and said so')
  const { rows } = await db.query('SELECT max(version) AS version FROM schema_migrations')
  t.equal(rows[0].version, migrations.at(-1)!.version, 'then every step applied')
})

t.test('a step that runs past its time bound three times ends the start-up', { skip: NEEDS_SERVER }, async (t) => {
  const dbUrl = await createDatabaseWithBooks(t, 1000, ({ version }) => version <= 2)
  const db = await pgClient(t, dbUrl)
  await stallTableChanges(db, 1000)
  const service = await expectStartupFailure(t, testEnv(dbUrl), /^bookkeeping: start-up failed: database migration failed: canceling statement due to statement timeout/)
  t.equal(nonEmptyLines(service.stdout).filter((line) => line.includes(RAN_PAST)).length, 2, 'after two attempts more')
  const { rows } = await db.query('SELECT max(version) AS version FROM schema_migrations')
  t.equal(rows[0].version, 2, 'the step that stalled left nothing')
})

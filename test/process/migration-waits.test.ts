/**
 * A migration step (src/db/migrations.ts) that waits for a long transaction's lock gives up its
 * place every 500 ms rather than queue writes; a step held up past its time bound is tried
 * again, three times at most.
 */
import type pg from 'pg'
import t from 'tap'
import { migrations } from '../../src/db/migrations.js'
import { STATEMENT_TIMEOUT_MS } from '../../src/db/time-bounds.js'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, NEEDS_SERVER, pgClient } from '../helpers/database.js'
import { WRITE_BOUND_MS, writeMeanwhile } from '../helpers/migrations.js'
import { expectStartupFailure, nonEmptyLines, spawnService } from '../helpers/service.js'
import { sleep } from '../helpers/wait.js'

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

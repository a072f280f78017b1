/**
 * Two instances start together on a table that already holds many books, while another client
 * writes (src/db/migrations.ts, the indexes of version 4 and later): one applies each step that
 * runs alone, the other waits, and no write waits a second.
 */
import t from 'tap'
import { migrations } from '../../src/db/migrations.js'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, NEEDS_SERVER, pgClient } from '../helpers/database.js'
import { BOOKS, INDEX_STATE, indexes, WRITE_BOUND_MS, writeMeanwhile } from '../helpers/migrations.js'
import { nonEmptyLines, spawnService } from '../helpers/service.js'

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

/**
 * An index build of the migrations (src/db/migrations.ts) cut short leaves an invalid index: the
 * next start drops it and builds it again, on a table that already holds many books.
 */
import t from 'tap'
import { migrations, statementsOf } from '../../src/db/migrations.js'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, NEEDS_SERVER, pgClient } from '../helpers/database.js'
import { BOOKS, INDEX_STATE, indexes } from '../helpers/migrations.js'
import { spawnService } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'

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

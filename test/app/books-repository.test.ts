import t from 'tap'
import pg from 'pg'
import { build, call, getToken } from '../helper.js'
import { listingConnections } from '../../plugins/app/read-budget.js'
import { MAX_WAIT_MS } from '../../src/db/batch.js'
import { createDatabase, NEEDS_SERVER, ON_CITUS, waitForSessionsOnLock, WAITS_ON_A_LOCK } from '../helpers/database.js'

/**
 * Concurrent finds, creates, updates and listings share statements (src/db/batch.ts, used by
 * plugins/app/books-repository.ts and plugins/app/listings-repository.ts). Each test sends its
 * requests together, checks that every answer is the one it would get alone, and that fewer
 * statements than requests reached PostgreSQL: without batching that check fails.
 */
t.test('batched statements', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  // The SQL the checks below branch on: Citus's on a coordinator and with TEST_DB_DIALECT=citus
  // (npm run test:citus-sql), PostgreSQL's otherwise. Were DB_DIALECT lost on the way, the
  // Citus pass would test PostgreSQL's SQL again and pass
  t.equal(app.sqlDialect.name, ON_CITUS || process.env.TEST_DB_DIALECT === 'citus' ? 'citus' : 'postgres', 'the SQL dialect of this run')
  const token = await getToken(app)
  const request = (options: Parameters<typeof call>[2]) => call(app, token, options)
  const admin = new pg.Client({ connectionString: dbUrl })
  await admin.connect()
  t.teardown(() => admin.end())

  /**
   * The statements that reach the driver while `fn` runs (every pg.Client; the admin one idles):
   * how many, and their texts.
   */
  async function countingStatements<T> (fn: () => Promise<T>): Promise<{ result: T, statements: number, texts: string[] }> {
    const query = pg.Client.prototype.query
    const texts: string[] = []
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      texts.push(typeof args[0] === 'string' ? args[0] : String((args[0] as { text?: string } | undefined)?.text))
      return (query as (...args: unknown[]) => unknown).apply(this, args)
    } as typeof query
    try {
      return { result: await fn(), statements: texts.length, texts }
    } finally {
      pg.Client.prototype.query = query
    }
  }

  t.test('concurrent creates: each answer is its own book, fewer transactions than books', async (t) => {
    const books = Array.from({ length: 60 }, (_, i) => ({ title: `Batch "${i}" {x}, \\`, author: `Author ${i}`, year: 1900 + i }))
    const created = await Promise.all(books.map((book) => request({ method: 'POST', url: '/book', payload: book })))
    for (const [i, { status, body }] of created.entries()) {
      t.equal(status, 201)
      t.strictSame(body.data, { id: body.data.id, ...books[i] }, `create ${i}`)
    }
    const ids = created.map(({ body }) => body.data.id)
    t.equal(new Set(ids).size, books.length, 'unique ids')
    const { rows } = await admin.query(
      'SELECT id::int, title, author, year, xmin::text AS transaction FROM books WHERE id = ANY($1)', [ids])
    for (const row of rows) {
      const i = ids.indexOf(row.id)
      t.strictSame({ title: row.title, author: row.author, year: row.year }, books[i], `stored ${i}`)
    }
    const transactions = new Set(rows.map((row) => row.transaction)).size
    if (app.sqlDialect.name === 'citus') {
      // Citus's SQL: a create without a key is a statement of its own (src/db/dialect.ts)
      t.equal(transactions, books.length, `${books.length} creates committed in ${transactions} transactions, one each`)
    } else {
      t.ok(transactions < books.length, `${books.length} creates committed in ${transactions} transactions`)
    }
  })

  t.test('concurrent finds: each answer is its own book or 404, fewer statements than requests', async (t) => {
    const { rows } = await admin.query("INSERT INTO books (title, author, year) SELECT 'Find ' || n, 'A', n FROM generate_series(1, 20) n RETURNING id::int, title, year")
    const missing = Array.from({ length: 10 }, (_, i) => 1_000_000 + i)
    const ids = [...rows.map((row) => row.id), ...missing, ...rows.map((row) => row.id)]
    const { result: found, statements } = await countingStatements(() =>
      Promise.all(ids.map((id) => request({ method: 'GET', url: `/book/${id}` }))))
    for (const [i, { status, body }] of found.entries()) {
      const row = rows.find((row) => row.id === ids[i])
      if (row === undefined) {
        t.strictSame({ status, body }, { status: 404, body: { status: 404, message: 'Book not found', data: null } })
      } else {
        t.strictSame({ status, data: body.data }, { status: 200, data: { id: row.id, title: row.title, author: 'A', year: row.year } })
      }
    }
    t.ok(statements < ids.length, `${ids.length} finds in ${statements} statements`)
  })

  t.test('concurrent updates of one book: each answer shows its own update, applied in turn', async (t) => {
    const { rows: [book] } = await admin.query("INSERT INTO books (title, author, year) VALUES ('Old', 'Old', 1) RETURNING id::int")
    const titles = Array.from({ length: 30 }, (_, i) => `Title ${i}`)
    const updated = await Promise.all(titles.map((title, i) =>
      request({ method: 'PUT', url: `/book/${book.id}`, payload: i % 2 === 0 ? { title } : { title, year: i } })))
    for (const [i, { status, body }] of updated.entries()) {
      t.equal(status, 200)
      t.equal(body.data.title, titles[i], `update ${i} answers its own title`)
    }
    const { rows: [stored] } = await admin.query('SELECT title FROM books WHERE id = $1', [book.id])
    t.ok(titles.includes(stored.title), 'the stored title is one of the updates')
  })

  t.test('concurrent updates of many books and of none: 200 with the new book or 404', async (t) => {
    const { rows } = await admin.query("INSERT INTO books (title, author, year) SELECT 'Up ' || n, 'A', n FROM generate_series(1, 30) n RETURNING id::int, year")
    const targets = [...rows.map((row) => row.id), 2_000_000, 2_000_001]
    const { result: updated, statements } = await countingStatements(() => Promise.all(targets.map((id) =>
      request({ method: 'PUT', url: `/book/${id}`, payload: { author: `Author of ${id}` } }))))
    for (const [i, { status, body }] of updated.entries()) {
      const row = rows.find((row) => row.id === targets[i])
      if (row === undefined) t.equal(status, 404, `update of missing ${targets[i]}`)
      else t.strictSame(body.data, { id: row.id, title: `Up ${row.year}`, author: `Author of ${row.id}`, year: row.year })
    }
    if (app.sqlDialect.name === 'citus') {
      // Citus's SQL: a statement per update, each locking one row (src/db/dialect.ts)
      t.ok(statements >= targets.length, `${targets.length} updates in ${statements} statements, one or more each`)
    } else {
      t.ok(statements < targets.length, `${targets.length} updates in ${statements} statements`)
    }
  })

  t.test('batched updates from two instances in opposite orders never deadlock', { skip: NEEDS_SERVER }, async (t) => {
    // Two batches that lock the same rows in opposite orders would deadlock, and PostgreSQL
    // would fail one of them: every request of that batch would get a 500. A row in the middle,
    // held by another transaction, makes both batches wait halfway, each holding its half
    const other = await build(t, dbUrl)
    const otherToken = await getToken(other)
    const { rows } = await admin.query("INSERT INTO books (title, author, year) SELECT 'Lock ' || n, 'A', n FROM generate_series(1, 40) n RETURNING id::int")
    const ids = rows.map((row) => row.id as number)
    // A table of some size, so PostgreSQL updates a batch in the order of its ids as given
    // (an index scan per id) rather than in the order of the table (a hash join)
    await admin.query("INSERT INTO books (title, author, year) SELECT 'Filler', 'A', 1 FROM generate_series(1, 20000)")
    await admin.query('ANALYZE books')
    const holder = new pg.Client({ connectionString: dbUrl })
    await holder.connect()
    t.teardown(() => holder.end())
    await holder.query('BEGIN')
    await holder.query('SELECT 1 FROM books WHERE id = $1 FOR UPDATE', [ids[20]])
    const answers = Promise.all([
      ...ids.map((id) => request({ method: 'PUT', url: `/book/${id}`, payload: { year: 1 } })),
      ...[...ids].reverse().map((id) => call(other, otherToken, { method: 'PUT', url: `/book/${id}`, payload: { author: 'B' } }))
    ])
    await waitForSessionsOnLock(admin, dbUrl, 2)
    await holder.query('COMMIT')
    const statuses = (await answers).map(({ status }) => status)
    t.strictSame(statuses.filter((status) => status !== 200), [], `${statuses.length} updates, all 200`)
    const { rows: stored } = await admin.query('SELECT count(*)::int AS n FROM books WHERE id = ANY($1) AND year = 1 AND author = $2', [ids, 'B'])
    t.equal(stored[0].n, ids.length, 'every book has both updates')
    await admin.query("DELETE FROM books WHERE title = 'Filler'")
  })

  t.test('a batch stuck in PostgreSQL holds the next one back MAX_WAIT_MS, not until it answers', { skip: NEEDS_SERVER }, async (t) => {
    // Otherwise, with the database gone, the reads queued behind a stuck one would wait for it
    // to fail, then wait as long again: past the bound of a database call
    const { rows: [book] } = await admin.query("INSERT INTO books (title, author, year) VALUES ('Held', 'A', 1) RETURNING id::int")
    const holder = new pg.Client({ connectionString: dbUrl })
    await holder.connect()
    t.teardown(() => holder.end())
    await holder.query('BEGIN')
    await holder.query('LOCK TABLE books IN ACCESS EXCLUSIVE MODE')
    const first = request({ method: 'GET', url: `/book/${book.id}` })
    await waitForSessionsOnLock(admin, dbUrl, 1)
    const sent = Date.now()
    const second = request({ method: 'GET', url: `/book/${book.id}` })
    await waitForSessionsOnLock(admin, dbUrl, 2, 2000)
    // When PostgreSQL got the second find (same clock as ours: one machine)
    const { rows: [{ received }] } = await admin.query(`SELECT extract(epoch FROM max(query_start)) * 1000 AS received
      FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'bookkeeping' AND ${WAITS_ON_A_LOCK}`)
    const held = Number(received) - sent
    // At least the wait (the batch did wait for the stuck one), at most the wait plus what a
    // request takes to reach PostgreSQL on a busy machine (a new pooled connection included)
    t.ok(held >= MAX_WAIT_MS - 2 && held <= MAX_WAIT_MS + 200,
      `the second find reached PostgreSQL ${Math.round(held)} ms after it was sent, while the first was still stuck (MAX_WAIT_MS ${MAX_WAIT_MS})`)
    await holder.query('COMMIT')
    t.strictSame((await Promise.all([first, second])).map(({ status }) => status), [200, 200])
  })

  t.test('concurrent listings share the query of their first page and answer alike', async (t) => {
    const alone = await request({ method: 'GET', url: '/books' })
    const { result: listed, statements } = await countingStatements(() =>
      Promise.all(Array.from({ length: 20 }, () => request({ method: 'GET', url: '/books' }))))
    for (const { status, body } of listed) t.strictSame({ status, body }, { status: 200, body: alone.body })
    t.ok(statements < listed.length, `${listed.length} listings in ${statements} statements`)
  })

  t.test('the change log is read in position order, past a power of ten', async (t) => {
    // Read as the text of the positions, 10 came before 2
    await Promise.all(Array.from({ length: 12 }, (_, i) => request({ method: 'POST', url: '/book', payload: { title: `Change ${i}`, author: 'A', year: 1 } })))
    await app.changeLog.placeChanges(1000)
    const positions = (await app.changeLog.changesAfter(0, 1000)).map((change) => change.position)
    t.ok(positions.length >= 12, `${positions.length} changes placed`)
    t.strictSame(positions, Array.from({ length: positions.length }, (_, i) => i + 1))
  })

  t.test('a listing that starts after a create sees it', async (t) => {
    const created = await request({ method: 'POST', url: '/book', payload: { title: 'Last', author: 'A', year: 1 } })
    const { body } = await request({ method: 'GET', url: '/books' })
    t.strictSame(body.data.at(-1), created.body.data)
  })

  // src/listing-stream.ts reads a page ahead for a client that waits on the database; the rules
  // that keep such a page: test/unit/listing-stream.test.ts, under writes: test/app/listing.test.ts
  t.test('a whole listing taken at once reads pages ahead, each the page that starts where it says', async (t) => {
    await admin.query(`INSERT INTO books (title, author, year)
      SELECT 'Ahead ' || g, 'A', 2000 FROM generate_series(1, 20000) g`)
    const ids = (await admin.query<{ id: string }>('SELECT id FROM books ORDER BY id')).rows.map((row) => row.id)
    const { result: { status, body }, texts } = await countingStatements(() => request({ method: 'GET', url: '/books' }))
    t.equal(status, 200)
    t.strictSame((body.data as Array<{ id: number }>).map((book) => String(book.id)), ids, `every book once, in order (${ids.length})`)
    const ahead = texts.filter((text) => text.includes('boundary')).length
    const repository = app.listingsRepository
    if (app.sqlDialect.name === 'citus') {
      t.equal(ahead, 0, 'none read ahead on Citus')
      t.equal(repository.pageBeyond, undefined)
      return
    }
    if (listingConnections(app.pg.pool.options.max ?? 0) === 1) {
      // PGlite's pool of one: a page read ahead would only wait for the next one's connection
      t.equal(ahead, 0, 'none read ahead with one connection for listings')
    } else {
      t.ok(ahead > 0, `${ahead} pages read ahead`)
    }
    const at = (i: number) => ({ key: null, id: ids[i]!, snapshot: null })
    // The ids of a page's text: the envelope's objects, or CSV lines (COPY's own, on a server)
    const idsOf = { json: (text: string) => (JSON.parse(`[${text}]`) as Array<{ id: number }>).map((book) => String(book.id)), csv: (text: string) => text.split('\r\n').slice(0, -1).map((line) => line.split(',')[0]!) }
    for (const format of ['json', 'csv'] as const) {
      const beyond = await repository.pageBeyond!(at(9), 5, 3, '192.0.2.1', format)
      t.strictSame({ after: beyond.after, count: beyond.count, last: beyond.last?.id },
        { after: ids[14], count: 3, last: ids[17] }, `${format}: the 3 books after the 5 after the tenth`)
      t.strictSame(idsOf[format](String(beyond.text)), ids.slice(15, 18))
      const atLast = await repository.pageBeyond!(at(ids.length - 4), 3, 10, '192.0.2.1', format)
      t.strictSame({ after: atLast.after, count: atLast.count, last: atLast.last, text: String(atLast.text) }, { after: ids.at(-1), count: 0, last: null, text: '' },
        `${format}: starting after the last book: no books`)
      const past = await repository.pageBeyond!(at(ids.length - 3), 3, 10, '192.0.2.1', format)
      t.strictSame({ after: past.after, count: past.count, last: past.last, text: String(past.text) }, { after: null, count: 0, last: null, text: '' },
        `${format}: past the last book: where it would start is none, and no books`)
    }
  })
})

/**
 * POST /book with an Idempotency-Key (IETF draft-ietf-httpapi-idempotency-key-header): stored
 * once per key, a repeat answered with the first 201, another body 422, a key in flight 409, an
 * ill-formed key 400; the key written with its book in one transaction; several instances on one
 * database agree. What is stored is read back with SQL, not only through the API.
 */
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { keyLock } from '../../plugins/app/books-repository.js'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { createDatabase, NEEDS_SERVER, ON_CITUS, pgClient } from '../helpers/database.js'

const BOOK = { title: 'The Dispossessed', author: 'Ursula K. Le Guin', year: 1974 }
const IN_PROGRESS = errorEnvelope(409, 'A request with this idempotency key is in progress')
const REUSED = errorEnvelope(422, 'Idempotency key already used with a different body')
const INVALID = errorEnvelope(400, 'Invalid input')

/** The value of the header for `key`, as the draft writes it: a Structured Field string. */
const quoted = (key: string) => `"${key.replace(/[\\"]/g, '\\$&')}"`

t.test('Idempotency-Key on POST /book', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl)
  const post = (payload: unknown, key?: string, via = app) => call(via, token, {
    method: 'POST',
    url: '/book',
    payload: payload as object,
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) }
  })
  const booksTitled = async (title: string) =>
    (await db.query<{ id: number }>('SELECT id::int FROM books WHERE title = $1 ORDER BY id', [title])).rows.map((row) => row.id)
  const storedKey = async (key: string) =>
    (await db.query<{ book_id: number }>('SELECT book_id::int FROM idempotency_keys WHERE key = $1', [key])).rows
  /**
   * The transactions that wrote these books. On a Citus cluster each worker numbers its own
   * transactions: one is a worker and an xmin there.
   */
  const transactionsOf = async (ids: number[]) => {
    const { rows } = await db.query<{ id: number, xmin: string }>('SELECT id::int, xmin::text FROM books WHERE id = ANY($1)', [ids])
    if (!ON_CITUS) return new Set(rows.map((row) => row.xmin)).size
    const { rows: nodes } = await db.query<{ id: number, node: string }>(`SELECT id::int, (SELECT nodename || ':' || nodeport FROM citus_shards
      WHERE shardid = get_shard_id_for_distribution_column('books', id) LIMIT 1) AS node FROM unnest($1::int8[]) AS id`, [ids])
    const nodeOf = new Map(nodes.map((row) => [row.id, row.node]))
    return new Set(rows.map((row) => `${nodeOf.get(row.id)} ${row.xmin}`)).size
  }

  t.test('a repeat with the same key and body answers the first 201 and stores nothing new', async (t) => {
    const key = randomUUID()
    const book = { ...BOOK, title: `Repeat ${key}` }
    const first = await post(book, quoted(key))
    t.equal(first.status, 201)
    t.strictSame(first.body, { status: 201, message: 'Book created successfully', data: { id: first.body.data.id, ...book } })
    for (let i = 0; i < 3; i++) {
      const again = await post(book, quoted(key))
      t.equal(again.status, 201, `repeat ${i}: 201`)
      t.strictSame(again.body, first.body, `repeat ${i}: the first answer`)
    }
    t.strictSame(await booksTitled(book.title), [first.body.data.id], 'one book')
    t.strictSame(await storedKey(key), [{ book_id: first.body.data.id }], 'its key names it')
  })

  t.test('the bare key and its Structured Field string are the same key; spacing, order and unknown fields are the same body', async (t) => {
    const key = `bare-${randomUUID()}`
    const book = { ...BOOK, title: `Forms ${key}` }
    const first = await post(book, key)
    t.equal(first.status, 201)
    const reordered = `{ "year": ${book.year},  "author": ${JSON.stringify(book.author)}, "title": ${JSON.stringify(book.title)}, "isbn": "x" }`
    for (const [value, payload] of [[quoted(key), book], [key, reordered], [quoted(key), reordered]] as const) {
      const again = await post(payload, value)
      t.equal(again.status, 201, value)
      t.strictSame(again.body.data, first.body.data, `${value}: the first book`)
    }
    t.strictSame(await booksTitled(book.title), [first.body.data.id])
  })

  t.test('escapes in the string are undone: "a\\"b" names the key a"b', async (t) => {
    const key = `quote"back\\slash ${randomUUID()}`
    const book = { ...BOOK, title: `Escapes ${key}` }
    const first = await post(book, quoted(key))
    t.equal(first.status, 201)
    t.strictSame(await storedKey(key), [{ book_id: first.body.data.id }], 'stored unescaped')
  })

  t.test('the same key with another body is 422 and changes nothing', async (t) => {
    const key = randomUUID()
    const book = { ...BOOK, title: `Mismatch ${key}` }
    const first = await post(book, quoted(key))
    t.equal(first.status, 201)
    for (const other of [{ ...book, year: book.year + 1 }, { ...book, author: 'Someone else' }, { ...book, title: `${book.title}.` }]) {
      const answer = await post(other, quoted(key))
      t.equal(answer.status, 422)
      t.strictSame(answer.body, REUSED)
    }
    t.strictSame(await booksTitled(book.title), [first.body.data.id])
    t.strictSame(await booksTitled(`${book.title}.`), [])
    t.equal((await post(book, quoted(key))).body.data.id, first.body.data.id, 'the right body still replays')
  })

  t.test('an ill-formed key is 400 Invalid input and stores nothing', async (t) => {
    const title = `Ill-formed ${randomUUID()}`
    const longest = 'k'.repeat(255)
    for (const [value, why] of [
      ['', 'empty'],
      ['""', 'an empty string'],
      [`"${'k'.repeat(256)}"`, '256 characters'],
      ['k'.repeat(256), '256 characters, bare'],
      ['"clé"', 'not ASCII'],
      ['clé', 'not ASCII, bare'],
      ['"tab\there"', 'a control character'],
      ['"a"b"', 'an unescaped quote'],
      ['"a\\b"', 'an escape of something other than " or \\'],
      ['"unterminated', 'no closing quote'],
      ['"a", "b"', 'two keys'],
      ['two words', 'a space in the bare form']
    ] as Array<[string, string]>) {
      const answer = await post({ ...BOOK, title }, value)
      t.equal(answer.status, 400, why)
      t.strictSame(answer.body, INVALID, why)
    }
    t.strictSame(await booksTitled(title), [], 'nothing stored')
    // The edges that are accepted: 255 characters, each form, and escapes counted as one
    for (const value of [quoted(longest), 'b'.repeat(255), quoted('"'.repeat(255)), '" spaces inside "', '!#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~']) {
      t.equal((await post({ ...BOOK, title: `${title} ${value.length}` }, value)).status, 201, value)
    }
    t.strictSame(await storedKey(longest), [{ book_id: (await booksTitled(`${title} ${quoted(longest).length}`))[0] }])
  })

  t.test('a key whose create is in flight in this instance is 409', async (t) => {
    const key = randomUUID()
    const book = { ...BOOK, title: `In flight ${key}` }
    const [first, second] = await Promise.all([post(book, quoted(key)), post(book, quoted(key))])
    t.equal(first.status, 201)
    t.strictSame(second.body, IN_PROGRESS, 'the second, sent while the first ran')
    t.equal(second.status, 409)
    t.strictSame(await booksTitled(book.title), [first.body.data.id])
  })

  // PGlite is one session: the test's lock would be the service's own
  t.test('a key whose create is in flight in another instance is 409', { skip: NEEDS_SERVER }, async (t) => {
    // Another instance's transaction holds the key: what its advisory lock means
    const other = randomUUID()
    const otherBook = { ...BOOK, title: `Elsewhere ${other}` }
    await db.query('BEGIN')
    await db.query('SELECT pg_advisory_xact_lock($1)', [keyLock(other)])
    const meanwhile = await post(otherBook, quoted(other))
    await db.query('ROLLBACK')
    t.equal(meanwhile.status, 409)
    t.strictSame(meanwhile.body, IN_PROGRESS)
    t.strictSame(await booksTitled(otherBook.title), [], 'nothing stored meanwhile')
    t.equal((await post(otherBook, quoted(other))).status, 201, 'stored once the other is done')
  })

  t.test('the first answer is replayed after the book is updated or deleted: the key never stores it again', async (t) => {
    const key = randomUUID()
    const book = { ...BOOK, title: `Later ${key}` }
    const first = await post(book, quoted(key))
    const id = first.body.data.id
    t.equal((await call(app, token, { method: 'PUT', url: `/book/${id}`, payload: { year: 2000 } })).status, 200)
    t.strictSame((await post(book, quoted(key))).body, first.body, 'after an update: the book as created')
    t.equal((await call(app, token, { method: 'DELETE', url: `/book/${id}` })).status, 200)
    t.strictSame((await post(book, quoted(key))).body, first.body, 'after a delete: still the first answer')
    t.strictSame(await booksTitled(book.title), [], 'and nothing stored again')
  })

  t.test('creates with and without keys share statements, and each answer is its own', async (t) => {
    const run = randomUUID()
    const calls = Array.from({ length: 60 }, (_, i) => ({
      book: { ...BOOK, title: `Mixed ${run} ${i}`, year: i },
      key: i % 3 === 0 ? undefined : `mixed-${run}-${i}`
    }))
    const answers = await Promise.all(calls.map(({ book, key }) => post(book, key)))
    answers.forEach((answer, i) => t.strictSame(answer.body.data, { id: answer.body.data.id, ...calls[i]!.book }, `create ${i}`))
    const ids = answers.map((answer) => answer.body.data.id)
    const transactions = await transactionsOf(ids)
    if (app.sqlDialect.name === 'citus') {
      // Citus's SQL: every create a statement of its own (src/db/dialect.ts)
      t.equal(transactions, calls.length, `${calls.length} creates in ${transactions} transactions, one each`)
    } else {
      t.ok(transactions < calls.length, `${calls.length} creates in ${transactions} transactions`)
    }
    // Two reads, not a join: on Citus the two tables are distributed by different columns
    const { rows: keys } = await db.query<{ key: string, book_id: number, xmin: string }>(
      'SELECT key, book_id::int, xmin::text FROM idempotency_keys WHERE key LIKE $1', [`mixed-${run}-%`])
    const { rows: books } = await db.query<{ id: number, xmin: string }>(
      'SELECT id::int, xmin::text FROM books WHERE id = ANY($1)', [keys.map((k) => k.book_id)])
    t.equal(keys.length, calls.filter((c) => c.key !== undefined).length, 'every key stored')
    for (const { key, book_id: bookId, xmin } of keys) {
      const same = books.find((book) => book.id === bookId)?.xmin === xmin
      t.equal(bookId, ids[Number(key.split('-').at(-1))], `${key} names its book`)
      // On Citus each worker numbers its own transactions: a book and its key on two workers
      // have two xmins, one distributed transaction
      if (!ON_CITUS) t.ok(same, `${key} written in its book's transaction`)
    }
    const replays = await Promise.all(calls.map(({ book, key }, i) => key === undefined ? null : post(book, key).then((a) => t.equal(a.body.data.id, ids[i]))))
    t.equal(replays.length, calls.length)
    t.equal((await booksTitled(`Mixed ${run} 1`)).length, 1)
  })

  t.test('a create that fails stores neither the book nor its key; the retry stores both', { skip: NEEDS_SERVER }, async (t) => {
    const key = randomUUID()
    const book = { ...BOOK, title: `Refused ${key}` }
    await db.query(`ALTER TABLE books ADD CONSTRAINT refuse_test CHECK (title <> '${book.title}')`)
    const refused = await post(book, quoted(key))
    await db.query('ALTER TABLE books DROP CONSTRAINT refuse_test')
    t.equal(refused.status, 500)
    t.strictSame(await storedKey(key), [], 'no key')
    t.strictSame(await booksTitled(book.title), [], 'no book')
    const retried = await post(book, quoted(key))
    t.equal(retried.status, 201)
    t.strictSame(await storedKey(key), [{ book_id: retried.body.data.id }])
  })

  t.test('another instance on the same database answers a repeat with the first book', { skip: NEEDS_SERVER }, async (t) => {
    const second = await build(t, dbUrl)
    const key = randomUUID()
    const book = { ...BOOK, title: `Two instances ${key}` }
    const first = await post(book, quoted(key))
    const again = await post(book, quoted(key), second)
    t.strictSame(again.body, first.body)
    t.strictSame((await post({ ...book, year: 1 }, quoted(key), second)).body, REUSED)
    t.strictSame(await booksTitled(book.title), [first.body.data.id])
  })

  t.test('without the header nothing changes: the same body twice is two books', async (t) => {
    const book = { ...BOOK, title: `No key ${randomUUID()}` }
    const [a, b] = [await post(book), await post(book)]
    t.not(a.body.data.id, b.body.data.id)
    t.equal((await booksTitled(book.title)).length, 2)
  })
})

/**
 * Adds `fastify.booksRepository`, made by `createBooksRepository` (below) on the pool of
 * @fastify/postgres once migrate has brought the tables up to date; its listings get at most
 * half the pool's connections at once (`listingConnections`).
 */
import { hash } from 'node:crypto'
import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import pLimit, { type LimitFunction } from 'p-limit'
import type { QueryResultRow } from 'pg'
import { batched } from '../../src/db/batch.js'
import { boundedQuery, boundedTransaction } from '../../src/db/bounded-query.js'
import type { Position, Walk } from '../../src/listing.js'
import type { PageBeyond } from '../../src/listing-stream.js'
import type { Book, BookCreate, BookPatch } from '../../src/schemas/book.js'

declare module 'fastify' {
  interface FastifyInstance {
    booksRepository: ReturnType<typeof createBooksRepository>
  }
}

interface BookRow {
  id: string
  title: string
  author: string
  year: number
  version: number
}

/** A book as stored, with its version (src/entity-tags.ts). */
export interface StoredBook {
  book: Book
  version: number
}

/** A page of a listing: its books as comma-separated Book JSON, their count, where it ended. */
export interface ListingPage {
  count: number
  last: Position | null
  json: string
}

/** A change of the feed (src/db/migrations.ts, version 15): its position, kind and book as JSON. */
export interface Change {
  position: number
  kind: 'created' | 'updated' | 'deleted'
  book: string
}

interface ChangeRow {
  position: string
  kind: Change['kind']
  book: string
}

interface KeptRow {
  first: string | null
  last: string | null
}

/** Positions stay far below 2^53: a million changes a second for 285 years. */
function toChange (row: ChangeRow): Change {
  return { position: Number(row.position), kind: row.kind, book: row.book }
}

/** bigint arrives from pg as a string; ids stay below 2^53 (on Citus too: docs/deployment.md, Ids), so a JSON number is exact. */
function toStored (row: BookRow): StoredBook {
  return { book: { id: Number(row.id), title: row.title, author: row.author, year: row.year }, version: row.version }
}

/** The stored fields of a create's body: unknown fields are neither stored nor compared. */
function bookFields ({ title, author, year }: BookCreate): BookCreate {
  return { title, author, year }
}

/**
 * What identifies a create's body under its key: the SHA-256 of its stored fields, so spacing,
 * field order and unknown fields do not make two bodies differ.
 */
function fingerprint (book: BookCreate): Buffer {
  const { title, author, year } = book
  return hash('sha256', JSON.stringify([title, author, year]), 'buffer')
}

/**
 * The advisory lock that the writer of an idempotency key holds: 64 bits of the key's SHA-256,
 * in the keyspace of one-bigint locks (the migration lock's one value aside, nothing else uses it).
 */
export function keyLock (key: string): string {
  return hash('sha256', key, 'buffer').readBigInt64BE().toString()
}

interface UpdateCall {
  id: string
  patch: BookPatch
  /** The versions the update is allowed on (If-Match); null: any. */
  versions: number[] | null
}

interface CreateCall {
  book: BookCreate
  key?: { key: string, fingerprint: Buffer }
}

/**
 * The answer to a create. `created` and `replayed` come with the book as the first create of the
 * key answered it: its id, and the fields of the body (a later update or delete changes nothing).
 */
export type CreateOutcome =
  | { outcome: 'created' | 'replayed', book: Book }
  | { outcome: 'mismatch' | 'busy' }

interface StoredKey {
  key: string
  fingerprint: Buffer
  id: string
}

/** The answer for a key found stored; one gone again already (swept) is answered as busy. */
function knownKey (call: CreateCall, stored: StoredKey | undefined): CreateOutcome {
  if (stored === undefined) return { outcome: 'busy' }
  if (!stored.fingerprint.equals(call.key!.fingerprint)) return { outcome: 'mismatch' }
  return { outcome: 'replayed', book: { ...bookFields(call.book), id: Number(stored.id) } }
}

// Unnamed statements: a named (prepared) one lives in a session, which a pooler in transaction
// mode (PgBouncer) hands to whoever comes next. The batched statements take arrays: one
// statement answers every call of a batch (src/db/batch.ts)
const FIND = 'SELECT id, title, author, year, version FROM books WHERE id = ANY($1::bigint[])'
const EXISTS = 'SELECT 1 FROM books WHERE id = $1'
// The CTE that records each change in the feed (src/db/migrations.ts, version 15), in the
// statement that makes it: the book as it is after the change, as the JSON the feed sends
// (`{"id":..}` for a delete), from the rows the change returned after it had their locks
const logged = (kind: 'created' | 'updated' | 'deleted', rows: string) => `logged AS (
           INSERT INTO book_changes (kind, book)
           SELECT '${kind}', row_to_json(changed)::text
           FROM (SELECT ${kind === 'deleted' ? 'id' : 'id, title, author, year'} FROM ${rows} ORDER BY id) AS changed
         )`
// Creates, with or without an idempotency key, one statement per batch. Ids are drawn in the
// order of the calls. A key is taken with a transaction-level advisory lock that its writer holds
// until it commits: a key whose lock another transaction holds is in flight elsewhere (`busy`).
// A key already stored answers with its book (`replayed`, or `mismatch` for another body). A key
// stored by a transaction that committed after this statement's snapshot is not seen, and its
// insert then does nothing (`conflict`: the caller reads it afresh). The book is inserted only
// with its key, so there is never one without the other. The same statement on Citus: the locks
// are taken in `input`, which reads no table, so Citus runs it on the coordinator, where every
// instance takes them (src/db/migrate.ts), never on a worker; stored keys are looked up by
// value, which asks only the shards that hold them.
const CREATE = `WITH input AS MATERIALIZED (
           SELECT *, key IS NULL OR pg_try_advisory_xact_lock(lock) AS granted
           FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::bytea[], $6::int8[])
             WITH ORDINALITY AS input(title, author, year, key, fingerprint, lock, n)
         ), free AS MATERIALIZED (
           SELECT input.*, known.book_id AS known_id, known.fingerprint AS known_fingerprint
           FROM input LEFT JOIN (
             SELECT key, book_id, fingerprint FROM idempotency_keys WHERE key = ANY($4::text[])
           ) AS known USING (key)
           WHERE granted
         ), fresh AS MATERIALIZED (
           SELECT n, key, fingerprint, title, author, year,
                  nextval((SELECT pg_get_serial_sequence('books', 'id'))::regclass) AS id
           FROM (SELECT * FROM free WHERE known_id IS NULL ORDER BY n) AS ordered
         ), keyed AS (
           INSERT INTO idempotency_keys (key, fingerprint, book_id)
           SELECT key, fingerprint, id FROM fresh WHERE key IS NOT NULL
           ON CONFLICT (key) DO NOTHING
           RETURNING key
         ), created AS (
           INSERT INTO books (id, title, author, year) OVERRIDING SYSTEM VALUE
           SELECT id, title, author, year FROM fresh WHERE key IS NULL OR key IN (SELECT key FROM keyed)
           RETURNING id, title, author, year
         ), ${logged('created', 'created')}
         SELECT CASE
                  WHEN free.n IS NULL THEN 'busy'
                  WHEN free.known_id IS NOT NULL
                    THEN CASE WHEN free.known_fingerprint = input.fingerprint THEN 'replayed' ELSE 'mismatch' END
                  WHEN created.id IS NOT NULL THEN 'created'
                  ELSE 'conflict'
                END AS outcome,
                coalesce(free.known_id, created.id)::text AS id
         FROM input LEFT JOIN free USING (n) LEFT JOIN fresh USING (n) LEFT JOIN created USING (id)
         ORDER BY input.n`
// On Citus, a create without a key is one row on one shard, its id drawn on the coordinator; one
// with a key is the statement above for it alone (two shards). The batch statement runs there as
// a chain of steps, each a round of the coordinator with its workers, and writes a shard per book:
// a batch of 30 took 120 ms, a create with a key alone 13 ms, one such insert 1 ms
// (docs/deployment.md, Citus)
const CREATE_ONE = `WITH created AS (INSERT INTO books (title, author, year) VALUES ($1, $2, $3) RETURNING id, title, author, year),
         ${logged('created', 'created')}
         SELECT id::text AS id FROM created`
const STORED_KEYS = 'SELECT key, fingerprint, book_id::text AS id FROM idempotency_keys WHERE key = ANY($1::text[])'
// One short transaction per batch of expired keys (plugins/app/idempotency-keys-sweep.ts), its
// row locks held for moments; rows another instance's sweep holds are skipped, not waited for.
// Citus locks no rows across shards: there a sweep waits for another one's delete, then removes
// what that one left. Citus runs one multi-shard write at a time on a shard, taking the shards in
// order, so two sweeps never deadlock
const sweepKeys = (rowLocks: string) => `DELETE FROM idempotency_keys WHERE key IN (
           SELECT key FROM idempotency_keys
           WHERE created_at < now() - make_interval(secs => $1)
           ORDER BY created_at LIMIT $2${rowLocks}
         )`
const SWEEP_KEYS = sweepKeys(' FOR UPDATE SKIP LOCKED')
const SWEEP_KEYS_CITUS = sweepKeys('')
// One statement per batch; a null field keeps its value, so concurrent updates of different
// fields all take effect. A batch never holds two updates of one book (see `update`). The rows
// are locked in id order first: two batches (of two instances, or one sent while the one before
// still waits on a lock) would otherwise lock rows in different orders and could deadlock.
// `match`, when not null, lists the versions the update is allowed on (If-Match): in READ
// COMMITTED the condition is checked again on the row as its lock left it, so the check and
// the write are one step. An update that changes the book adds one to its version, and marks
// each field it changes with its transaction (src/db/migrations.ts, version 3).
const changes = (title: string, author: string, year: string) => `title = COALESCE(${title}, books.title),
           author = COALESCE(${author}, books.author),
           year = COALESCE(${year}, books.year),
           version = books.version + coalesce(${title} <> books.title OR ${author} <> books.author OR ${year} <> books.year, false)::int4,
           title_xid = CASE WHEN ${title} <> books.title THEN (SELECT xid FROM mark) ELSE books.title_xid END,
           author_xid = CASE WHEN ${author} <> books.author THEN (SELECT xid FROM mark) ELSE books.author_xid END,
           year_xid = CASE WHEN ${year} <> books.year THEN (SELECT xid FROM mark) ELSE books.year_xid END`
// The transaction's id, for the fields an update changes: in a CTE that reads no table, which
// Citus runs on the coordinator, whose snapshots the walks' cursors hold (a worker's ids are its
// own). Citus refuses a volatile function inside CASE in an UPDATE, and one in an ARRAY there
// crashed its coordinator (13.2.2)
const MARK = 'mark AS MATERIALIZED (SELECT pg_current_xact_id() AS xid)'
const UPDATE = `WITH ${MARK}, patch AS MATERIALIZED (
           SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int4[], $5::text[]) AS p(id, title, author, year, match)
         ), locked AS MATERIALIZED (
           SELECT books.id FROM books JOIN patch USING (id) ORDER BY books.id FOR UPDATE OF books
         ), updated AS (
           UPDATE books SET ${changes('patch.title', 'patch.author', 'patch.year')}
           FROM patch JOIN locked USING (id)
           WHERE books.id = patch.id AND (patch.match IS NULL OR books.version = ANY(patch.match::int4[]))
           RETURNING books.id, books.title, books.author, books.year, books.version
         ), ${logged('updated', 'updated')}
         SELECT * FROM updated`
// On Citus, one statement per update, each on one shard, locking one row: Citus locks no rows
// across shards. A batch in one statement would write a shard per book, commit on every worker
// at once (two-phase commit), and wait for every other multi-shard write on those shards. Measured
// on Citus, a statement per book keeps up with it (docs/deployment.md, Citus)
const UPDATE_ONE = `WITH ${MARK}, updated AS (
           UPDATE books SET ${changes('$2::text', '$3::text', '$4::int4')}
           WHERE id = $1 AND ($5::int4[] IS NULL OR version = ANY($5::int4[]))
           RETURNING books.id, books.title, books.author, books.year, books.version
         ), ${logged('updated', 'updated')}
         SELECT * FROM updated`
// `$2`, when not null, lists the versions the delete is allowed on (If-Match)
const DELETE = `WITH deleted AS (
           DELETE FROM books WHERE id = $1 AND ($2::int4[] IS NULL OR version = ANY($2::int4[])) RETURNING id
         ), ${logged('deleted', 'deleted')}
         SELECT id FROM deleted`
// PostgreSQL writes the JSON of a page of the listing itself: one string reaches Node instead of
// rows to parse, build and serialize again
const PAGE_JSON = "count(*)::int4 AS count, max(id)::text AS last_id, coalesce(string_agg(row_to_json(page)::text, ',' ORDER BY id), '') AS json"
const LISTING_PAGE = `SELECT ${PAGE_JSON}
         FROM (SELECT id, title, author, year FROM books WHERE id > $1 ORDER BY id LIMIT $2) page`
// The page of up to $3 books that starts $2 books after $1, read ahead of the page before it
// (src/listing-stream.ts); `after_id` says where it started, for the listing to check
const LISTING_PAGE_BEYOND = `WITH boundary AS MATERIALIZED (
           SELECT id FROM books WHERE id > $1 ORDER BY id OFFSET $2::int8 - 1 LIMIT 1
         )
         SELECT (SELECT id FROM boundary)::text AS after_id, ${PAGE_JSON}
         FROM (SELECT id, title, author, year FROM books WHERE id > (SELECT id FROM boundary) ORDER BY id LIMIT $3) page`

// The feed's positions (src/db/migrations.ts, version 15). The changes committed and not yet
// placed get the next positions in `seq` order, by one instance at a time: the statement after the
// lock reads with a snapshot taken once the lock is granted, so it sees what the instance before
// placed, and nothing is placed twice. A change that had to wait for another's row lock drew its
// seq after that one committed: if it is placed, the one it waited for is too, before it. The
// positions follow each other without gaps (a prune never removes the last, `PRUNE_CHANGES`). The
// lock is in the two-integer keyspace, apart from the idempotency keys' and the migration's
const PLACE_CHANGES_LOCK = 'SELECT pg_advisory_xact_lock(1651209070, 1)'
const PLACE_CHANGES = `UPDATE book_changes SET position = placed.position
         FROM (
           SELECT seq, (SELECT coalesce(max(position), 0) FROM book_changes) + row_number() OVER (ORDER BY seq) AS position
           FROM (SELECT seq FROM book_changes WHERE position IS NULL ORDER BY seq LIMIT $1) AS pending
         ) AS placed
         WHERE book_changes.seq = placed.seq`
// A bigint arrives from pg as a string: no cast to text, which ORDER BY would then sort as text
const CHANGES_AFTER = 'SELECT position, kind, book FROM book_changes WHERE position > $1 ORDER BY position LIMIT $2'
const CHANGES_KEPT = 'SELECT min(position)::text AS first, max(position)::text AS last FROM book_changes'
// The oldest changes, in one short transaction: a run of positions from the first kept, never
// one younger than $1 seconds (the run stops before it) nor one of the last $2. What is kept is
// always one run of positions, so a feed that resumes inside it misses nothing. Instances pruning
// at once take the same run; the one that comes second waits, and finds it gone
const PRUNE_CHANGES = `WITH kept AS MATERIALIZED (
           SELECT min(position) AS first, max(position) - greatest($2, 1) AS last_prunable FROM book_changes
         ), prunable AS MATERIALIZED (
           SELECT position, recorded_at < now() - make_interval(secs => $1) AS expired
           FROM book_changes, kept
           WHERE position BETWEEN kept.first AND least(kept.first + $3 - 1, kept.last_prunable)
         )
         DELETE FROM book_changes WHERE position IN (
           SELECT position FROM prunable
           WHERE position < (SELECT coalesce(min(position) FILTER (WHERE NOT expired), max(position) + 1) FROM prunable)
         )`

/** The expression each sort orders by: titles and authors by code point, as their indexes are. */
const SORT_KEYS = { id: 'id', title: 'title COLLATE "C"', author: 'author COLLATE "C"', year: 'year' } as const
/** The column that says which transaction last changed each sort field (src/db/migrations.ts, version 3). */
const CHANGED_BY = { title: 'title_xid', author: 'author_xid', year: 'year_xid' } as const

/** An ILIKE pattern for the strings that contain `text` as it is: `%`, `_` and `\` are escaped. */
function containing (text: string): string {
  return `%${text.replace(/[\\%_]/g, '\\$&')}%`
}

/** The conditions of a walk's filters, each value a parameter that `parameter` adds. */
function walkFilters (walk: Walk, parameter: (value: unknown, type: string) => string): string[] {
  const filters: string[] = []
  if (walk.title !== undefined) filters.push(`title ILIKE ${parameter(containing(walk.title), 'text')}`)
  if (walk.author !== undefined) filters.push(`author ILIKE ${parameter(containing(walk.author), 'text')}`)
  if (walk.yearFrom !== undefined) filters.push(`year >= ${parameter(walk.yearFrom, 'int4')}`)
  if (walk.yearTo !== undefined) filters.push(`year <= ${parameter(walk.yearTo, 'int4')}`)
  return filters
}

/**
 * Below this many books that the planner expects a substring filter to match, a page sorted by
 * a field reads the matches first (`walkPageQuery`). On ten million books (docs/performance.md,
 * The list at any size): reading and sorting 20,000 matches took about 150 ms, and reading the
 * order's index until a page was full 22 ms where the matches lay evenly, 1.3 s where they lay
 * far along the order (an author's books, newest first).
 */
const MATCHES_FIRST_BELOW = 30_000

/** The planner's estimate of how many books match a walk's filters (`EXPLAIN`, no rows read). */
function matchesEstimateQuery (walk: Walk): { text: string, values: unknown[] } {
  const values: unknown[] = []
  const parameter = (value: unknown, type: string) => `$${values.push(value)}::${type}`
  return { text: `EXPLAIN (FORMAT JSON) SELECT 1 FROM books WHERE ${walkFilters(walk, parameter).join(' AND ')}`, values }
}

interface WalkPageRow {
  count: number
  json: string
  last_id: string | null
  last_key?: string | null
  snapshot?: string
}

/**
 * The statement of one page of a walk (src/listing.ts): up to `limit` books of its filters, in
 * its order, after `position`. Built from fixed pieces; every value is a parameter.
 *
 * A keyset page: after the book with sort key k and id i come the other books with key k and
 * a higher id, then those with a key beyond k. Each of the two is one range of an index of the
 * sort (src/db/migrations.ts), read from where the walk stands, so a deep page costs what the
 * first does; the second is not read at all when the first fills the page.
 *
 * When sorting by a field, the first page also answers its snapshot, and later pages leave out
 * the books whose sort field a transaction changed that the snapshot does not see as committed:
 * such a book may have been listed already at its old place. A book whose sort field did not
 * change stays in its place, and is listed exactly once. A transaction id beyond any this server
 * has issued comes from another cluster (a restored dump): it is no change made during the walk.
 * Not on Citus: there the CTE that reads the server's transactions would run on each worker,
 * whose ids are not the coordinator's, and let changed books through (docs/deployment.md, Citus).
 *
 * `matchesFirst` (a substring filter that matches few books, in another order than id): the
 * books that match are found first, through the trigram indexes, and sorted, rather than the
 * order's index read until the page is full. `OFFSET 0` keeps the planner from reading the
 * matches in the order's index: then a page costs what the matches do, however they lie in the
 * order (`readsMatchesFirst`).
 */
function walkPageQuery (
  walk: Walk, position: Position | null, limit: number, dialect: 'postgres' | 'citus', matchesFirst = false
): { text: string, values: unknown[] } {
  const values: unknown[] = [limit]
  const parameter = (value: unknown, type: string) => `$${values.push(value)}::${type}`
  const filters = walkFilters(walk, parameter)
  const key = SORT_KEYS[walk.field]
  const direction = walk.descending ? ' DESC' : ''
  const order = walk.field === 'id' ? `id${direction}` : `${key}${direction}, id`
  const last = walk.field === 'id' ? `id${walk.descending ? '' : ' DESC'}` : `${key}${walk.descending ? '' : ' DESC'}, id DESC`
  const select = (conditions: string[], orderBy: string) => 'SELECT id, title, author, year FROM books' +
    (conditions.length === 0 ? '' : ` WHERE ${conditions.join(' AND ')}`) + orderBy
  const sortedBy = (orderBy: string) => ` ORDER BY ${orderBy} LIMIT $1`
  let books: string
  if (position === null) {
    books = matchesFirst
      ? `SELECT * FROM (${select(filters, ' OFFSET 0')}) matches${sortedBy(order)}`
      : select(filters, sortedBy(order))
  } else if (walk.field === 'id') {
    books = select([...filters, `id ${walk.descending ? '<' : '>'} ${parameter(position.id, 'int8')}`], sortedBy(order))
  } else {
    const changedBy = CHANGED_BY[walk.field]
    const snapshot = parameter(position.snapshot, 'pg_snapshot')
    const unmoved = `(${changedBy} IS NULL OR pg_visible_in_snapshot(${changedBy}, ${snapshot})` +
      (dialect === 'citus' ? ')' : ` OR ${changedBy} >= (SELECT xmax FROM horizon))`)
    const at = parameter(position.key, walk.field === 'year' ? 'int4' : 'text')
    const id = parameter(position.id, 'int8')
    const beyond = `${key} ${walk.descending ? '<' : '>'} ${at}`
    books = matchesFirst
      ? `SELECT * FROM (${select([...filters, unmoved, `(${beyond} OR (${key} = ${at} AND id > ${id}))`], ' OFFSET 0')}) matches${sortedBy(order)}`
      : `(${select([...filters, unmoved, `${key} = ${at}`, `id > ${id}`], sortedBy('id'))}) UNION ALL ` +
        `(${select([...filters, unmoved, beyond], sortedBy(order))}) LIMIT $1`
  }
  // CTEs that read no table: the snapshot that starts a walk, which Citus runs on the coordinator
  // (whose transactions mark the changes) before any shard is read (it reads each shard at its own
  // moment: a snapshot taken after the reads could see a change that a read missed); or the
  // transactions issued so far
  const walkStart = walk.field !== 'id' && position === null
  const cte = walkStart
    ? 'WITH start AS MATERIALIZED (SELECT pg_current_snapshot()::text AS snapshot) '
    : position?.snapshot == null || dialect === 'citus' ? '' : 'WITH horizon AS MATERIALIZED (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS xmax) '
  const text = `${cte}SELECT count(*)::int4 AS count,
           coalesce(string_agg(row_to_json(page)::text, ',' ORDER BY ${order}), '') AS json,
           (array_agg(id ORDER BY ${last}))[1]::text AS last_id` +
    (walk.field === 'id' ? '' : `, (array_agg(${walk.field}::text ORDER BY ${last}))[1] AS last_key`) +
    (walkStart ? ', (SELECT snapshot FROM start) AS snapshot' : '') +
    ` FROM (${books}) page`
  return { text, values }
}

/**
 * All SQL of the service. Ids are passed as the decimal strings `isBookId` accepted.
 *
 * Finds, creates, updates and the first page of listings are batched (src/db/batch.ts): the
 * calls made while one statement is in PostgreSQL share the next. On 2 cores shared with
 * PostgreSQL, this more than doubles the throughput of each (docs/performance.md): one statement
 * and one commit do the work of dozens. Deletes, the existence check of a bad PUT and the later
 * pages of a long listing are single statements.
 *
 * Every page query of the listings (the first pages too) runs through `listingQueries`, which
 * lets only a part of the pool's connections read listings at once: a thousand listings then
 * wait for their next page in this process's queue (one query at most per listing, without a
 * time limit), not in the pool's queue ahead of everyone else, where the 2 s connection bound
 * cut them off and everyone else waited behind them.
 *
 * With `dialect` `citus` (plugins/app/migrate.ts), updates and creates are a statement per book, and the sweep locks no rows: Citus runs no `FOR UPDATE` across shards, and
 * a statement over many shards costs it a round with every worker (docs/deployment.md, Citus).
 */
export function createBooksRepository (pg: PostgresDb, listingQueries: LimitFunction, dialect: 'postgres' | 'citus' = 'postgres') {
  const query = <R extends QueryResultRow>(text: string, values: unknown[]) => boundedQuery<R>(pg.pool, { text, values })

  const finds = batched<string, StoredBook | null>(async (ids) => {
    const { rows } = await query<BookRow>(FIND, [ids])
    const byId = new Map(rows.map((row) => [row.id, toStored(row)]))
    return ids.map((id) => byId.get(id) ?? null)
  })

  /** One statement for a batch of creates (`CREATE`), the keys another instance stored read afresh. */
  async function createTogether (calls: readonly CreateCall[]): Promise<Array<CreateOutcome | Error>> {
    const { rows } = await query<{ outcome: CreateOutcome['outcome'] | 'conflict', id: string | null }>(CREATE, [
      calls.map((c) => c.book.title),
      calls.map((c) => c.book.author),
      calls.map((c) => c.book.year),
      calls.map((c) => c.key?.key ?? null),
      calls.map((c) => c.key?.fingerprint ?? null),
      calls.map((c) => c.key === undefined ? null : keyLock(c.key.key))
    ])
    const answers = calls.map((call, i): CreateOutcome | Error | null => {
      const { outcome, id } = rows[i]!
      switch (outcome) {
        case 'created':
        case 'replayed':
          return { outcome, book: { ...bookFields(call.book), id: Number(id) } }
        case 'conflict':
          return null
        default:
          return { outcome }
      }
    })
    // Keys another instance stored while this statement ran: read afresh, each is then known.
    // The other books of the batch are committed by now: if this read fails, it fails the
    // conflicting calls alone (nothing of theirs was stored), never a create that was stored
    const conflicts = calls.filter((_, i) => answers[i] === null)
    if (conflicts.length > 0) {
      let known: (call: CreateCall) => CreateOutcome | Error
      try {
        const { rows: stored } = await query<StoredKey>(STORED_KEYS, [conflicts.map((c) => c.key!.key)])
        const byKey = new Map(stored.map((row) => [row.key, row]))
        known = (call) => knownKey(call, byKey.get(call.key!.key))
      } catch (err) {
        known = () => err as Error
      }
      calls.forEach((call, i) => {
        if (answers[i] === null) answers[i] = known(call)
      })
    }
    return answers as Array<CreateOutcome | Error>
  }

  async function createOne (book: BookCreate): Promise<CreateOutcome | Error> {
    try {
      const { rows: [row] } = await query<{ id: string }>(CREATE_ONE, [book.title, book.author, book.year])
      return { outcome: 'created', book: { ...bookFields(book), id: Number(row!.id) } }
    } catch (err) {
      return err as Error
    }
  }

  const creates = batched<CreateCall, CreateOutcome>(async (calls) => {
    if (dialect === 'postgres') return createTogether(calls)
    // Citus: every create a statement of its own, each writing one or two shards
    return Promise.all(calls.map(async (call) => call.key === undefined
      ? createOne(call.book)
      : (await createTogether([call]).catch((err: Error) => [err]))[0]!))
  })
  // Keys of creates in flight in this instance; a statement never holds one key twice
  const keysInFlight = new Set<string>()

  const updates = batched<UpdateCall, StoredBook | null>(async (calls) => {
    if (dialect === 'citus') {
      // Each its own statement: one that fails fails its own call alone
      return Promise.all(calls.map(async ({ id, patch, versions }) => {
        try {
          const { rows: [row] } = await query<BookRow>(UPDATE_ONE, [id, patch.title ?? null, patch.author ?? null, patch.year ?? null, versions])
          return row === undefined ? null : toStored(row)
        } catch (err) {
          return err as Error
        }
      }))
    }
    const answers = new Array<StoredBook | null>(calls.length)
    // Two updates of one book in one statement would see the same old row and one would be
    // lost: the second goes in a statement of its own, after the first
    for (let pending = calls.map((_, i) => i); pending.length > 0;) {
      const seen = new Set<string>()
      const round = pending.filter((i) => !seen.has(calls[i]!.id) && seen.add(calls[i]!.id))
      pending = pending.filter((i) => !round.includes(i))
      const patches = round.map((i) => calls[i]!)
      const { rows } = await query<BookRow>(UPDATE, [
        patches.map((c) => c.id),
        patches.map((c) => c.patch.title ?? null),
        patches.map((c) => c.patch.author ?? null),
        patches.map((c) => c.patch.year ?? null),
        patches.map((c) => c.versions === null ? null : `{${c.versions.join(',')}}`)
      ])
      const byId = new Map(rows.map((row) => [row.id, toStored(row)]))
      for (const i of round) answers[i] = byId.get(calls[i]!.id) ?? null
    }
    return answers
  })

  async function pageAfter (afterId: string, limit: number, signal?: AbortSignal): Promise<ListingPage> {
    const { rows: [row] } = await listingQueries(() => {
      // A listing whose client left while this waited for its turn needs it no more
      signal?.throwIfAborted()
      return query<{ count: number, last_id: string | null, json: string }>(LISTING_PAGE, [afterId, limit])
    })
    return { count: row!.count, last: row!.last_id === null ? null : { key: null, id: row!.last_id, snapshot: null }, json: row!.json }
  }

  async function pageBeyond (after: Position, skip: number, limit: number, signal?: AbortSignal): Promise<PageBeyond> {
    const { rows: [row] } = await listingQueries(() => {
      signal?.throwIfAborted()
      return query<{ after_id: string | null, count: number, last_id: string | null, json: string }>(LISTING_PAGE_BEYOND, [after.id, skip, limit])
    })
    return {
      after: row!.after_id,
      count: row!.count,
      last: row!.last_id === null ? null : { key: null, id: row!.last_id, snapshot: null },
      json: row!.json
    }
  }

  /**
   * Whether a page of `walk` reads its matches first: a substring filter that the planner
   * expects to match few books, in another order than id, on PostgreSQL. By id the table is read
   * in the order it is stored, and on Citus each shard plans its part.
   */
  async function readsMatchesFirst (walk: Walk): Promise<boolean> {
    if (dialect === 'citus' || walk.field === 'id' || (walk.title === undefined && walk.author === undefined)) return false
    const { text, values } = matchesEstimateQuery(walk)
    const { rows: [row] } = await query<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }>(text, values)
    return row!['QUERY PLAN'][0]!.Plan['Plan Rows'] < MATCHES_FIRST_BELOW
  }

  async function walkPage (walk: Walk, position: Position | null, limit: number, signal?: AbortSignal): Promise<ListingPage> {
    let matchesFirst = position?.matchesFirst
    const { rows: [row] } = await listingQueries(async () => {
      signal?.throwIfAborted()
      matchesFirst ??= await readsMatchesFirst(walk)
      const { text, values } = walkPageQuery(walk, position, limit, dialect, matchesFirst)
      return query<WalkPageRow>(text, values)
    })
    const { count, json, last_id: lastId, last_key: lastKey, snapshot } = row!
    if (lastId === null) return { count, json, last: null }
    return {
      count,
      json,
      last: {
        key: walk.field === 'id' ? null : walk.field === 'year' ? Number(lastKey) : lastKey!,
        id: lastId,
        snapshot: snapshot ?? position?.snapshot ?? null,
        matchesFirst
      }
    }
  }

  /** Up to `limit` changes after `position`, in the feed's order. */
  async function changesAfter (position: number, limit: number): Promise<Change[]> {
    const { rows } = await query<ChangeRow>(CHANGES_AFTER, [position, limit])
    return rows.map(toChange)
  }

  /** Whether the book a call with `versions` did not change is there (`mismatch`) or not. */
  async function unchanged (id: string, versions: number[] | null): Promise<'missing' | 'mismatch'> {
    return versions !== null && await exists(id) ? 'mismatch' : 'missing'
  }

  async function exists (id: string): Promise<boolean> {
    const { rowCount } = await query(EXISTS, [id])
    return rowCount === 1
  }

  // Listings that start together share the query of their first page. Each still reads after
  // it arrived: a batch is sent only after all its calls were made.
  const firstPages = batched<number, ListingPage>((limits) => {
    const pages = new Map([...new Set(limits)].map((limit) => [limit, pageAfter('0', limit)]))
    return Promise.all(limits.map((limit) => pages.get(limit)!))
  })

  return {
    /**
     * Gives the committed changes not yet placed in the feed their positions (up to `limit`, the
     * oldest first), then answers up to `limit` changes after `position` and the last position
     * given, placed by this instance or another.
     */
    async readChanges (position: number, limit: number): Promise<{ changes: Change[], last: number }> {
      const [, , { rows }, { rows: [kept] }] = await boundedTransaction<[never, never, ChangeRow, KeptRow]>(pg.pool, [
        { text: PLACE_CHANGES_LOCK },
        { text: PLACE_CHANGES, values: [limit] },
        { text: CHANGES_AFTER, values: [position, limit] },
        { text: CHANGES_KEPT }
      ])
      return { changes: rows.map(toChange), last: Number(kept!.last ?? 0) }
    },

    /** Gives up to `limit` committed changes not yet placed in the feed their positions; answers how many. */
    async placeChanges (limit: number): Promise<number> {
      const [, { rowCount }] = await boundedTransaction<[never, never]>(pg.pool, [{ text: PLACE_CHANGES_LOCK }, { text: PLACE_CHANGES, values: [limit] }])
      return rowCount ?? 0
    },

    changesAfter,

    /** The first and last positions the feed still keeps; 0 and 0 before the first change. */
    async changesKept (): Promise<{ first: number, last: number }> {
      const { rows: [kept] } = await query<KeptRow>(CHANGES_KEPT, [])
      return { first: Number(kept!.first ?? 0), last: Number(kept!.last ?? 0) }
    },

    /**
     * Removes up to `limit` of the oldest changes, those older than `keepSeconds` and not among
     * the last `keepCount`, in one short transaction; answers how many.
     */
    async pruneChanges (keepSeconds: number, keepCount: number, limit: number): Promise<number> {
      const { rowCount } = await query(PRUNE_CHANGES, [keepSeconds, keepCount, limit])
      return rowCount ?? 0
    },

    /**
     * Stores `book`, once per idempotency key: a repeat of a stored key with the same book answers
     * the first create again (`replayed`, nothing stored), with another book `mismatch`; a key
     * whose create is still running, here or in another instance, is `busy`.
     */
    async create (book: BookCreate, key?: string): Promise<CreateOutcome> {
      if (key === undefined) return creates.load({ book })
      if (keysInFlight.has(key)) return { outcome: 'busy' }
      keysInFlight.add(key)
      try {
        return await creates.load({ book, key: { key, fingerprint: fingerprint(book) } })
      } finally {
        keysInFlight.delete(key)
      }
    },

    /**
     * Removes up to `limit` keys older than `retentionSeconds`, oldest first, in one short
     * transaction; answers how many.
     */
    async sweepKeys (retentionSeconds: number, limit: number): Promise<number> {
      const { rowCount } = await query(dialect === 'citus' ? SWEEP_KEYS_CITUS : SWEEP_KEYS, [retentionSeconds, limit])
      return rowCount ?? 0
    },

    find: (id: string): Promise<StoredBook | null> => finds.load(id),

    exists,

    /**
     * Updates the fields `patch` gives; with `versions`, only a book at one of them (If-Match).
     * `mismatch`: the book is there at another version, and nothing changed.
     */
    async update (id: string, patch: BookPatch, versions: number[] | null = null): Promise<StoredBook | 'missing' | 'mismatch'> {
      return await updates.load({ id, patch, versions }) ?? unchanged(id, versions)
    },

    /** Deletes a book; with `versions`, only a book at one of them (If-Match). */
    async delete (id: string, versions: number[] | null = null): Promise<'deleted' | 'missing' | 'mismatch'> {
      const { rowCount } = await query(DELETE, [id, versions])
      return rowCount === 1 ? 'deleted' : unchanged(id, versions)
    },

    /** The start of the listing: up to `limit` books with the lowest ids. */
    firstPage: (limit: number): Promise<ListingPage> => firstPages.load(limit),

    /**
     * The page after `afterId`: up to `limit` books with higher ids, in id order. A listing goes
     * on where its last page ended (a keyset cursor), so each page is a short query of its own
     * and a listing holds no connection or transaction while the client reads. Once `signal` is
     * aborted, a query still waiting for its turn is not sent (the promise rejects).
     */
    pageAfter,

    /**
     * The page of up to `limit` books that starts `skip` books after `after`, in id order, and the
     * id of the book it starts after: a listing reads it ahead of the page before it. None on
     * Citus, where a page already spreads over the workers.
     */
    pageBeyond: dialect === 'citus' ? undefined : pageBeyond,

    /** Whether a listing may start one more page query now without making another one wait. */
    listingConnectionFree: () => listingQueries.activeCount + listingQueries.pendingCount < listingQueries.concurrency,

    /** A page of a walk (src/listing.ts): up to `limit` books after `position`, or from its start. */
    walkPage
  }
}

/** The share of the pool's connections that listings may use at once: half, at least one. */
export function listingConnections (poolMax: number): number {
  return Math.max(1, Math.floor(poolMax / 2))
}

export default fp(async function booksRepository (fastify) {
  const listingQueries = pLimit(listingConnections(fastify.pg.pool.options.max))
  fastify.decorate('booksRepository', createBooksRepository(fastify.pg, listingQueries, fastify.sqlDialect))
}, { name: 'books-repository', dependencies: ['postgres', 'migrate'] })

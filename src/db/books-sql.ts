/**
 * The statements of the books that plugins/app/books-repository.ts runs: find, create (with or
 * without an idempotency key), update, delete. Each write records its change in the change log
 * in the same statement (plugins/app/change-log.ts reads it). Here rather than in the plugin's
 * module for its length alone.
 */

/** The columns of a book, in the order of its JSON (src/schemas/book.ts): every statement names a book's columns through this. */
export const BOOK_COLUMNS = 'id, title, author, year'
/** The same, each qualified by the table: where another table of the statement has columns of those names. */
const BOOKS_COLUMNS = BOOK_COLUMNS.split(', ').map((column) => `books.${column}`).join(', ')

// Unnamed statements: a named (prepared) one lives in a session, which a pooler in transaction
// mode (PgBouncer) hands to whoever comes next. The batched statements take arrays: one
// statement answers every call of a batch (src/db/batch.ts)
export const FIND = `SELECT ${BOOK_COLUMNS}, version FROM books WHERE id = ANY($1::bigint[])`
export const EXISTS = 'SELECT 1 FROM books WHERE id = $1'
// The CTE that records each change in the feed (src/db/migrations.ts, version 15), in the
// statement that makes it: the book as it is after the change, as the JSON the feed sends
// (`{"id":..}` for a delete), from the rows the change returned after it had their locks. The
// imports' statements (src/db/imports-sql.ts) record their creates with it too
export const logged = (kind: 'created' | 'updated' | 'deleted', rows: string) => `logged AS (
           INSERT INTO book_changes (kind, book)
           SELECT '${kind}', row_to_json(changed)::text
           FROM (SELECT ${kind === 'deleted' ? 'id' : BOOK_COLUMNS} FROM ${rows} ORDER BY id) AS changed
         )`
// On Citus, which runs no trigger on a distributed table, the CTE that adds the words of the books
// a statement wrote to the known words (src/db/migrations.ts, version 22) in that statement, as
// the triggers do on PostgreSQL; `search_words` is a table of the coordinator that Citus knows
// (`onCoordinator`), so the two commit together. Empty elsewhere
export const learned = (learnsWords: boolean, rows: string) => learnsWords
  ? `, learned AS (
           INSERT INTO search_words (word)
           SELECT DISTINCT learning.word FROM ${rows}, search_words_to_know(${rows}.title, ${rows}.author) AS learning (word)
           WHERE NOT EXISTS (SELECT 1 FROM search_words known WHERE known.word = learning.word)
         )`
  : ''
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
export const createStatement = (learnsWords: boolean) => `WITH input AS MATERIALIZED (
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
           INSERT INTO books (${BOOK_COLUMNS}) OVERRIDING SYSTEM VALUE
           SELECT ${BOOK_COLUMNS} FROM fresh WHERE key IS NULL OR key IN (SELECT key FROM keyed)
           RETURNING ${BOOK_COLUMNS}
         ), ${logged('created', 'created')}${learned(learnsWords, 'created')}
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
// a chain of steps, each a round of the coordinator with its workers, and writes a shard per book,
// so a batch costs more than its creates one by one (docs/deployment.md, Citus)
export const CREATE_ONE = `WITH created AS (INSERT INTO books (title, author, year) VALUES ($1, $2, $3) RETURNING ${BOOK_COLUMNS}),
         ${logged('created', 'created')}${learned(true, 'created')}
         SELECT id::text AS id FROM created`
export const STORED_KEYS = 'SELECT key, fingerprint, book_id::text AS id FROM idempotency_keys WHERE key = ANY($1::text[])'
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
export const UPDATE = `WITH ${MARK}, patch AS MATERIALIZED (
           SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int4[], $5::text[]) AS p(id, title, author, year, match)
         ), locked AS MATERIALIZED (
           SELECT books.id FROM books JOIN patch USING (id) ORDER BY books.id FOR UPDATE OF books
         ), updated AS (
           UPDATE books SET ${changes('patch.title', 'patch.author', 'patch.year')}
           FROM patch JOIN locked USING (id)
           WHERE books.id = patch.id AND (patch.match IS NULL OR books.version = ANY(patch.match::int4[]))
           RETURNING ${BOOKS_COLUMNS}, books.version
         ), ${logged('updated', 'updated')}
         SELECT * FROM updated`
// On Citus, one statement per update, each on one shard, locking one row: Citus locks no rows
// across shards. A batch in one statement would write a shard per book, commit on every worker
// at once (two-phase commit), and wait for every other multi-shard write on those shards: it
// saves nothing over a statement per book (docs/deployment.md, Citus)
export const UPDATE_ONE = `WITH ${MARK}, updated AS (
           UPDATE books SET ${changes('$2::text', '$3::text', '$4::int4')}
           WHERE id = $1 AND ($5::int4[] IS NULL OR version = ANY($5::int4[]))
           RETURNING ${BOOKS_COLUMNS}, books.version
         ), ${logged('updated', 'updated')}${learned(true, 'updated')}
         SELECT * FROM updated`
// `$2`, when not null, lists the versions the delete is allowed on (If-Match)
export const DELETE = `WITH deleted AS (
           DELETE FROM books WHERE id = $1 AND ($2::int4[] IS NULL OR version = ANY($2::int4[])) RETURNING id
         ), ${logged('deleted', 'deleted')}
         SELECT id FROM deleted`

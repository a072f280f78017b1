/**
 * The table structure, as an ordered list of versioned steps. A step is never edited once it
 * has shipped: a change is a new step with the next version.
 *
 * A step runs in a transaction of its own, with the row that records it, unless it runs `alone`:
 * then its statements cannot run in a transaction or may run for minutes on a large table
 * (`CREATE INDEX CONCURRENTLY`, `ANALYZE`), without blocking reads or writes, each sent on its
 * own, and the step is recorded once they are done (src/db/migrate.ts).
 */
export interface Migration {
  version: number
  name: string
  /**
   * Its statements: one text, sent as one query (it may hold several), or a list of texts sent
   * one by one. On Citus a statement that changes a distributed table must be sent alone.
   */
  sql: string | readonly string[]
  alone?: true
  /** The index a `CREATE INDEX CONCURRENTLY` step builds: one left invalid is built again. */
  index?: string
}

/** The queries a step sends, in order. */
export function statementsOf ({ sql }: Migration): readonly string[] {
  return typeof sql === 'string' ? [sql] : sql
}

/** An index built without blocking reads or writes of its table (see `Migration`). */
function concurrentIndex (version: number, name: string, definition: string): Migration {
  return { version, name: `index ${name}`, sql: `CREATE INDEX CONCURRENTLY IF NOT EXISTS ${name} ON ${definition}`, alone: true, index: name }
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'create books',
    sql: `CREATE TABLE books (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      title text NOT NULL,
      author text NOT NULL,
      year integer NOT NULL
    )`
  },
  {
    version: 2,
    name: 'create idempotency keys',
    // A key and the book it created, written in the transaction of the book (no foreign key: a
    // deleted book keeps its key, so a late retry is answered, not stored again). The index on
    // created_at lets the sweep find expired keys oldest first without scanning the table.
    sql: `CREATE TABLE idempotency_keys (
      key text PRIMARY KEY,
      fingerprint bytea NOT NULL,
      book_id bigint NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at)`
  },
  {
    version: 3,
    name: 'track changes of books',
    // `version` makes a book's ETag; it grows by one with each update that changes the book.
    // `*_xid`: the transaction that last changed that field (null: not since the book was
    // created); a walk over the pages of a sorted listing leaves out, after its first page, the
    // books whose sort field changed after it began (plugins/app/listings-repository.ts, walks).
    // A column with a constant default is added without rewriting the table
    sql: `ALTER TABLE books
      ADD COLUMN version integer NOT NULL DEFAULT 1,
      ADD COLUMN title_xid xid8,
      ADD COLUMN author_xid xid8,
      ADD COLUMN year_xid xid8`
  },
  // For the substring filters below: in PostgreSQL's contrib and PGlite's. A statement of its
  // own: Citus sends a CREATE EXTENSION to the workers as the whole text it came in
  { version: 4, name: 'create extension pg_trgm', sql: 'CREATE EXTENSION IF NOT EXISTS pg_trgm' },
  // The keyset pages of each sort: ties are broken by id ascending in both directions, so a
  // descending sort has an index of its own, read forwards. Titles and authors sort by code
  // point ("C"), whatever the database's collation
  concurrentIndex(5, 'books_title', 'books (title COLLATE "C", id)'),
  concurrentIndex(6, 'books_title_descending', 'books (title COLLATE "C" DESC, id)'),
  concurrentIndex(7, 'books_author', 'books (author COLLATE "C", id)'),
  concurrentIndex(8, 'books_author_descending', 'books (author COLLATE "C" DESC, id)'),
  concurrentIndex(9, 'books_year', 'books (year, id)'),
  concurrentIndex(10, 'books_year_descending', 'books (year DESC, id)'),
  // The `title` and `author` filters: ILIKE on trigrams
  concurrentIndex(11, 'books_title_trigrams', 'books USING gin (title gin_trgm_ops)'),
  concurrentIndex(12, 'books_author_trigrams', 'books USING gin (author gin_trgm_ops)'),
  {
    version: 13,
    name: 'statistics for the substring filters',
    // How many books a `title` or `author` filter matches, the planner estimates from a sample of
    // the column: with the default 100, on a large table it takes a filter matching many books
    // for one matching few, and reads all the matches at random where reading in id order would
    // find a page's worth soon (docs/performance.md, The list at any size). Taking the lock this
    // needs blocks no read or write. Not on Citus, which refuses this ALTER TABLE on a
    // distributed table (its workers plan a page's query on each shard with the shard's own)
    sql: `DO $$ BEGIN
      IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        ALTER TABLE books ALTER COLUMN title SET STATISTICS 1000, ALTER COLUMN author SET STATISTICS 1000;
      END IF;
    END $$`
  },
  // At once rather than at autovacuum's next analyze, which may be far off on a large table
  { version: 14, name: 'analyze books', sql: 'ANALYZE books', alone: true },
  {
    version: 15,
    name: 'create book changes',
    // The feed of changes (src/changes.ts): every create, update and delete, inserted by the
    // statement that makes it, so a change is here if and only if it committed. `seq` is drawn
    // as the row is inserted, after the write has its row lock: a later change of the same book
    // always has a higher one. `position`, the order of the feed, is given later, in `seq` order,
    // to the changes that have committed (plugins/app/change-log.ts, PLACE_CHANGES): seq
    // alone cannot be read in order, since a transaction that drew 99 may commit after the one
    // that drew 100. `book` is the JSON the feed sends. Not distributed on Citus: one table on
    // the coordinator, whose snapshots are the ones the positions are given in (`onCoordinator`)
    sql: `CREATE TABLE book_changes (
      seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      position bigint UNIQUE,
      kind text NOT NULL CHECK (kind IN ('created', 'updated', 'deleted')),
      book text NOT NULL,
      recorded_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX book_changes_unstamped ON book_changes (seq) WHERE position IS NULL`
  },
  {
    version: 16,
    name: 'idempotency keys of imports',
    // An import (POST /books) stores under its key the ids it gave, in input order: runs of
    // consecutive ids, ascending, which a multirange keeps compactly whatever the count. A key
    // names either one book (POST /book) or the ids of an import, never both. The table holds a
    // day of keys: checking the constraint over it is short. The constraint is a statement of its
    // own: Citus refuses ADD CONSTRAINT beside other subcommands on a distributed table
    sql: [
      `ALTER TABLE idempotency_keys
        ADD COLUMN book_ids int8multirange,
        ALTER COLUMN book_id DROP NOT NULL`,
      `ALTER TABLE idempotency_keys
        ADD CONSTRAINT idempotency_keys_one_answer CHECK ((book_id IS NULL) <> (book_ids IS NULL))`
    ]
  },
  // The search (`q`, src/db/search-sql.ts): folding accents away, and the edit distance of two
  // words for typos. In PostgreSQL's contrib and PGlite's; each a statement of its own (above)
  { version: 17, name: 'create extension unaccent', sql: 'CREATE EXTENSION IF NOT EXISTS unaccent' },
  { version: 18, name: 'create extension fuzzystrmatch', sql: 'CREATE EXTENSION IF NOT EXISTS fuzzystrmatch' },
  {
    version: 19,
    name: 'search words',
    // The words a search finds in a text: lowercase, accents folded (`Brontë` is `bronte`, `Straße`
    // is `strasse`), split by PostgreSQL's text search parser with the `simple` configuration,
    // which stems nothing and drops no word, whatever the language. IMMUTABLE, as an index
    // expression must be: it is, for a given unaccent dictionary. Every name qualified, so that
    // it means the same whatever the search_path of whoever runs it (a restore, autovacuum)
    sql: [
      `CREATE FUNCTION search_fold(text) RETURNS text
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        RETURN pg_catalog.lower(public.unaccent('public.unaccent'::regdictionary, $1))`,
      `CREATE FUNCTION search_words_of(text) RETURNS tsvector
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        RETURN pg_catalog.to_tsvector('pg_catalog.simple'::regconfig, public.search_fold($1))`
    ]
  },
  // A GIN index keeps the entries of new rows in a pending list until it holds
  // gin_pending_list_limit (4MB by default), and every search reads the whole list: some 5 ms per
  // index read after many writes. 256kB bounds that to a fraction of a millisecond; the writes
  // that fill it move it into the index in smaller steps
  concurrentIndex(20, 'books_title_words', 'books USING gin (search_words_of(title)) WITH (gin_pending_list_limit = 256)'),
  concurrentIndex(21, 'books_author_words', 'books USING gin (search_words_of(author)) WITH (gin_pending_list_limit = 256)'),
  {
    version: 22,
    name: 'create known words',
    // Every word of 4 to 64 characters without a digit that a title or author has held: where a
    // search finds the words a typo away from its own (by trigrams, then by edit distance). Added
    // to by the statement that writes a book, whoever sends it (the service, an import's COPY, an
    // operator's SQL), so a book is found through a typo as soon as it is committed. A word is
    // never taken out: one that no book holds any more finds nothing. No unique constraint: two
    // writers adding the same word at once would wait for each other's commit (an import's lasts
    // minutes); a word twice costs a duplicate that the search reads once. No trigger on Citus,
    // which runs none on a distributed table: there the service's statements that write books add
    // their words (src/db/books-sql.ts `learned`; docs/deployment.md, Citus)
    sql: [
      'CREATE TABLE search_words (word text NOT NULL)',
      'CREATE INDEX search_words_word ON search_words (word)',
      // Not STRICT: the planner then writes its body into the statement that calls it (twice as
      // quick over many books as a call for each)
      `CREATE FUNCTION search_words_to_know(title text, author text) RETURNS SETOF text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT words.lexeme FROM unnest(public.search_words_of(title) || public.search_words_of(author)) AS words
              WHERE length(words.lexeme) BETWEEN 4 AND 64 AND words.lexeme !~ '[0-9]' $$`,
      `CREATE FUNCTION search_words_remember() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO public.search_words (word)
        SELECT DISTINCT learned.word FROM written, public.search_words_to_know(written.title, written.author) AS learned (word)
        WHERE NOT EXISTS (SELECT 1 FROM public.search_words known WHERE known.word = learned.word);
        RETURN NULL;
      END $$`,
      `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
          CREATE TRIGGER books_search_words_created AFTER INSERT ON books REFERENCING NEW TABLE AS written
            FOR EACH STATEMENT EXECUTE FUNCTION search_words_remember();
          CREATE TRIGGER books_search_words_updated AFTER UPDATE ON books REFERENCING NEW TABLE AS written
            FOR EACH STATEMENT EXECUTE FUNCTION search_words_remember();
        END IF;
      END $$`
    ]
  },
  {
    version: 23,
    name: 'known words of the books',
    // The words of the books written before the triggers: one statement that locks no book, and
    // adds words beside the triggers' without waiting for them (no unique constraint)
    sql: `INSERT INTO search_words (word)
      SELECT word FROM books, search_words_to_know(books.title, books.author) AS word
      EXCEPT SELECT word FROM search_words`,
    alone: true
  },
  concurrentIndex(24, 'search_words_trigrams', 'search_words USING gin (word gin_trgm_ops) WITH (gin_pending_list_limit = 256)'),
  {
    version: 25,
    name: 'statistics for the search',
    // Which words of titles and authors are common, and how common: ANALYZE keeps ten times the
    // statistics target of the most common words of each index expression, with how many books
    // hold each, which a search reads to choose how to read each level of its rank
    // (src/search-plan.ts). With 1000, the 10,000 most common words; the rarer ones are rare enough
    // to be read through the index. Not on Citus, as above. Alone, after the indexes it names
    // (built alone) and with the ANALYZE that reads them
    sql: [
      `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
          ALTER INDEX books_title_words ALTER COLUMN 1 SET STATISTICS 1000;
          ALTER INDEX books_author_words ALTER COLUMN 1 SET STATISTICS 1000;
        END IF;
      END $$`,
      'ANALYZE books'
    ],
    alone: true
  }
]

/**
 * On Citus (the `citus` extension installed), how each table is spread over the workers: by the
 * column every statement of the service names it by, so each of those statements goes to one
 * shard. A table added by a later migration gets its line here in the same change.
 * `schema_migrations` stays a table of the coordinator alone.
 */
export const distribution: ReadonlyArray<{ table: string, column: string }> = [
  { table: 'books', column: 'id' },
  { table: 'idempotency_keys', column: 'key' }
]

/**
 * On Citus, the tables kept on the coordinator alone that the service writes in the same
 * transactions as distributed ones: added to Citus's metadata as local tables, so that such a
 * transaction commits on the coordinator and the workers together (two-phase commit). A table
 * Citus does not know commits on its own after the workers have: a crash between the two would
 * keep a book's change and lose its row here. `book_changes` (version 15) must be in the same
 * transaction as each write, and stays on one node for the order of the feed; so do the known
 * words (`search_words`, version 22), which the writes add to there (src/db/books-sql.ts `learned`).
 */
export const onCoordinator: readonly string[] = ['book_changes', 'search_words']

/**
 * The table structure, as an ordered list of versioned steps. A step is never edited once it
 * has shipped: a change is a new step with the next version.
 */
export interface Migration {
  version: number
  name: string
  sql: string
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

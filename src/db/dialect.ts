/**
 * What the service's SQL does differently on Citus (docs/deployment.md, The SQL that differs),
 * decided once at start (plugins/app/migrate.ts: `DB_DIALECT`, or a Citus coordinator found):
 * two objects with the same members, one for PostgreSQL (and PGlite), one for Citus. The
 * repositories keep their statements and ask the dialect only where the two differ.
 */

/** A batch's writes sent as one statement for all (`together`), or a statement for each (`alone`). */
interface WriteStatements<C, A> {
  together: (calls: readonly C[]) => Promise<Array<A | Error>>
  /** Throws, or answers an Error, for its own call alone. */
  alone: (call: C) => Promise<A | Error>
}

export interface SqlDialect {
  /** `citus`: the SQL that Citus runs across shards. */
  readonly name: 'postgres' | 'citus'
  /**
   * Sends a batch of creates or updates (src/db/batch.ts). On Citus each is a statement of its
   * own, on one shard: one statement over many would write a shard per book, commit on every
   * worker at once (two-phase commit) and wait for every other multi-shard write on those shards,
   * and Citus runs no `FOR UPDATE` across shards. One that fails fails its own call alone.
   */
  sendWrites: <C, A>(calls: readonly C[], statements: WriteStatements<C, A>) => Promise<Array<A | Error>>
  /**
   * What a select of rows to delete adds so that instances deleting at once skip each other's
   * rows: nothing on Citus, which locks no rows across shards (there a delete waits for another
   * one's, then removes what that one left).
   */
  readonly skipLockedRows: string
  /**
   * The CTE (`WITH ...`, or nothing) that reads the transaction ids this server has issued so
   * far, and the condition that the transaction id in `column` is not one of them (a restored
   * dump's). None on Citus: the CTE would run on each worker, whose ids are not the
   * coordinator's, and let changed books through.
   */
  readonly issuedTransactions: { cte: string, beyond: (column: string) => string } | null
  /**
   * Whether the planner's estimate of a whole table's matches (`EXPLAIN`) is there to read: not
   * on Citus, where each shard plans its part.
   */
  readonly estimatesMatches: boolean
  /** Whether a listing reads a page ahead: not on Citus, where a page already spreads over the workers. */
  readonly readsAhead: boolean
  /**
   * Whether the statements that write books add their words to the known words themselves
   * (src/db/books-sql.ts `learned`): on Citus, which runs no trigger on a distributed table.
   */
  readonly learnsWords: boolean
  /**
   * Whether a level of a ranked page read through an index keeps the ids of the books it finds,
   * sorted, and reads each book by its id as the page reaches it (src/db/ranked-pages-sql.ts):
   * not on Citus, where those reads go to the shards and come back in any order. There the
   * level keeps the books themselves.
   */
  readonly readsHeldBooksById: boolean
}

export const POSTGRES: SqlDialect = {
  name: 'postgres',
  sendWrites: (calls, { together }) => together(calls),
  skipLockedRows: ' FOR UPDATE SKIP LOCKED',
  issuedTransactions: {
    cte: 'WITH horizon AS MATERIALIZED (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS xmax) ',
    beyond: (column) => `${column} >= (SELECT xmax FROM horizon)`
  },
  estimatesMatches: true,
  readsAhead: true,
  learnsWords: false,
  readsHeldBooksById: true
}

export const CITUS: SqlDialect = {
  name: 'citus',
  sendWrites: (calls, { alone }) => Promise.all(calls.map((call) => alone(call).catch((err: Error) => err))),
  skipLockedRows: '',
  issuedTransactions: null,
  estimatesMatches: false,
  readsAhead: false,
  learnsWords: true,
  readsHeldBooksById: false
}

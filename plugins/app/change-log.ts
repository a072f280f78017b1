/**
 * Adds `fastify.changeLog`, made by `createChangeLog` (below) on the pool of @fastify/postgres
 * once migrate has brought the tables up to date: the log of the books' changes that the feed
 * reads (`ChangeLog`, src/changes.ts). The books' writes record their changes in it, in the
 * statements that make them (src/db/books-sql.ts); here they are placed in the feed's order,
 * read and pruned.
 */
import type { PostgresDb } from '@fastify/postgres'
import fp from 'fastify-plugin'
import type { Change } from '../../src/changes.js'
import { boundedQueryOn, boundedTransaction } from '../../src/db/bounded-query.js'

declare module 'fastify' {
  interface FastifyInstance {
    changeLog: ReturnType<typeof createChangeLog>
  }
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

function createChangeLog (pg: PostgresDb) {
  const query = boundedQueryOn(pg.pool)

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

    /** Up to `limit` changes after `position`, in the feed's order. */
    async changesAfter (position: number, limit: number): Promise<Change[]> {
      const { rows } = await query<ChangeRow>(CHANGES_AFTER, [position, limit])
      return rows.map(toChange)
    },

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
    }
  }
}

export default fp(async function changeLog (fastify) {
  fastify.decorate('changeLog', createChangeLog(fastify.pg))
}, { name: 'change-log', dependencies: ['postgres', 'migrate'] })

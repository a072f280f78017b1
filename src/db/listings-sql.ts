/**
 * The statements and SQL fragments of the listings that plugins/app/listings-repository.ts runs:
 * the pages of every book in id order, read in turn or ahead, and what a walk (src/listing.ts)
 * sorts and filters by. Here rather than in the plugin's module for its length alone.
 */
import { BOOK_COLUMNS } from './books-sql.js'
import type { Walk } from '../listing.js'

// PostgreSQL writes the JSON of a page of the listing itself: one string reaches Node instead of
// rows to parse, build and serialize again
const PAGE_JSON = "count(*)::int4 AS count, max(id)::text AS last_id, coalesce(string_agg(row_to_json(page)::text, ',' ORDER BY id), '') AS json"
export const LISTING_PAGE = `SELECT ${PAGE_JSON}
         FROM (SELECT ${BOOK_COLUMNS} FROM books WHERE id > $1 ORDER BY id LIMIT $2) page`
// The page of up to $3 books that starts $2 books after $1, read ahead of the page before it
// (src/listing-stream.ts); `after_id` says where it started, for the listing to check
export const LISTING_PAGE_BEYOND = `WITH boundary AS MATERIALIZED (
           SELECT id FROM books WHERE id > $1 ORDER BY id OFFSET $2::int8 - 1 LIMIT 1
         )
         SELECT (SELECT id FROM boundary)::text AS after_id, ${PAGE_JSON}
         FROM (SELECT ${BOOK_COLUMNS} FROM books WHERE id > (SELECT id FROM boundary) ORDER BY id LIMIT $3) page`

/** The expression each sort orders by: titles and authors by code point, as their indexes are. */
export const SORT_KEYS = { id: 'id', title: 'title COLLATE "C"', author: 'author COLLATE "C"', year: 'year' } as const
/** The column that says which transaction last changed each sort field (src/db/migrations.ts, version 3). */
export const CHANGED_BY = { title: 'title_xid', author: 'author_xid', year: 'year_xid' } as const

/** An ILIKE pattern for the strings that contain `text` as it is: `%`, `_` and `\` are escaped. */
function containing (text: string): string {
  return `%${text.replace(/[\\%_]/g, '\\$&')}%`
}

/** The conditions of a walk's filters, each value a parameter that `parameter` adds. */
export function walkFilters (walk: Walk, parameter: (value: unknown, type: string) => string): string[] {
  const filters: string[] = []
  if (walk.title !== undefined) filters.push(`title ILIKE ${parameter(containing(walk.title), 'text')}`)
  if (walk.author !== undefined) filters.push(`author ILIKE ${parameter(containing(walk.author), 'text')}`)
  if (walk.yearFrom !== undefined) filters.push(`year >= ${parameter(walk.yearFrom, 'int4')}`)
  if (walk.yearTo !== undefined) filters.push(`year <= ${parameter(walk.yearTo, 'int4')}`)
  return filters
}

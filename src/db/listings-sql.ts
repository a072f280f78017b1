/**
 * The statements and SQL fragments of the listings that plugins/app/listings-repository.ts runs:
 * the pages of every book in id order, read in turn or ahead, in each format a listing answers,
 * and what a walk (src/listing.ts) sorts and filters by. Here rather than in the plugin's module
 * for its length alone.
 */
import { BOOK_COLUMNS } from './books-sql.js'
import { searchFilters } from './search-sql.js'
import type { Walk } from '../listing.js'
import type { Search } from '../search.js'

/** How the books of a page are written: the envelope's JSON, CSV lines or NDJSON lines. */
export type PageFormat = 'json' | 'csv' | 'ndjson'

/**
 * A text column as `COPY ... CSV` writes it (src/csv-text.ts `csvField`, which the tests hold to
 * COPY's own output): quoted, its quotes doubled, when it is empty or holds a comma, a quote, a CR
 * or an LF. `strpos` rather than a regular expression: a page of 8,000 books then costs PostgreSQL about a
 * fifth less.
 */
function csvField (column: string): string {
  const holds = (text: string) => `strpos(${column}, ${text}) > 0`
  return `CASE WHEN ${column} = '' OR ${[holds("','"), holds("'\"'"), holds("E'\\r'"), holds("E'\\n'")].join(' OR ')}` +
    ` THEN '"' || replace(${column}, '"', '""') || '"' ELSE ${column} END`
}

/**
 * The expression of the text of a page (the rows of `page`, in `order`), as `format` writes it:
 * Book JSON objects separated by commas for the envelope; a line each for CSV (CRLF, without the
 * header) and NDJSON (the same object as the envelope's, then LF). PostgreSQL writes it itself:
 * one string reaches Node instead of rows to parse, build and serialize again.
 */
export function pageText (format: PageFormat, order: string): string {
  const [line, separator] = {
    json: ['row_to_json(page)::text', "','"],
    ndjson: ["row_to_json(page)::text || E'\\n'", "''"],
    csv: [`id || ',' || ${csvField('title')} || ',' || ${csvField('author')} || ',' || year || E'\\r\\n'`, "''"]
  }[format]
  return `coalesce(string_agg(${line}, ${separator} ORDER BY ${order}), '')`
}

/** The formats whose pages of every book in id order PostgreSQL writes in a query; CSV's come from COPY (below). */
type QueryPageFormat = Exclude<PageFormat, 'csv'>
const QUERY_FORMATS: readonly QueryPageFormat[] = ['json', 'ndjson']
const byFormat = (statement: (format: QueryPageFormat) => string) =>
  Object.fromEntries(QUERY_FORMATS.map((format) => [format, statement(format)])) as Record<QueryPageFormat, string>

const pageColumns = (format: PageFormat) => `count(*)::int4 AS count, max(id)::text AS last_id, ${pageText(format, 'id')} AS text`
/** A page of the listing of every book in id order: up to $2 books after id $1, in each format. */
export const LISTING_PAGE = byFormat((format) => `SELECT ${pageColumns(format)}
         FROM (SELECT ${BOOK_COLUMNS} FROM books WHERE id > $1 ORDER BY id LIMIT $2) page`)
// The page of up to $3 books that starts $2 books after $1, read ahead of the page before it
// (src/listing-stream.ts); `after_id` says where it started, for the listing to check
export const LISTING_PAGE_BEYOND = byFormat((format) => `WITH boundary AS MATERIALIZED (
           SELECT id FROM books WHERE id > $1 ORDER BY id OFFSET $2::int8 - 1 LIMIT 1
         )
         SELECT (SELECT id FROM boundary)::text AS after_id, ${pageColumns(format)}
         FROM (SELECT ${BOOK_COLUMNS} FROM books WHERE id > (SELECT id FROM boundary) ORDER BY id LIMIT $3) page`)

/** A number written into a COPY statement, which takes no parameters: digits, or it throws. */
function literal (value: string | number): string {
  const text = String(value)
  if (!/^[0-9]+$/.test(text)) throw new TypeError(`not a number to write into a statement: ${text}`)
  return text
}

/**
 * A CSV page of the listing of every book in id order, as COPY writes it (src/db/copy-out.ts
 * ends its lines in CRLF): up to `limit` books after id `afterId`.
 */
export const copyPageAfter = (afterId: string, limit: number) =>
  `COPY (SELECT ${BOOK_COLUMNS} FROM books WHERE id > ${literal(afterId)} ORDER BY id LIMIT ${literal(limit)}) TO STDOUT CSV`

/**
 * A CSV page read ahead, as COPY writes it: the book `skip` books after `afterId` (the one the
 * page starts after, for the listing to check: src/db/copy-out.ts `startsAfter`), then up to
 * `limit` books after it.
 */
export const copyPageBeyond = (afterId: string, skip: number, limit: number) =>
  `COPY (SELECT ${BOOK_COLUMNS} FROM books WHERE id >= ` +
  `(SELECT id FROM books WHERE id > ${literal(afterId)} ORDER BY id OFFSET ${literal(skip - 1)} LIMIT 1) ` +
  `ORDER BY id LIMIT ${literal(limit + 1)}) TO STDOUT CSV`

/**
 * The expression each sort orders by: titles and authors by code point, as their indexes are; a
 * search's rank, which a ranked page computes (`book_rank`, plugins/app/listings-repository.ts).
 */
export const SORT_KEYS = { id: 'id', title: 'title COLLATE "C"', author: 'author COLLATE "C"', year: 'year', relevance: 'book_rank' } as const
/**
 * The columns that say which transaction last changed each sort field (src/db/migrations.ts,
 * version 3): a search's rank changes with the title and the author.
 */
export const CHANGED_BY = { title: ['title_xid'], author: ['author_xid'], year: ['year_xid'], relevance: ['title_xid', 'author_xid'] } as const

/** An ILIKE pattern for the strings that contain `text` as it is: `%`, `_` and `\` are escaped. */
function containing (text: string): string {
  return `%${text.replace(/[\\%_]/g, '\\$&')}%`
}

/** The conditions of a walk's filters and of its search, each value a parameter that `parameter` adds. */
export function walkFilters (walk: Walk, search: Search | null, parameter: (value: unknown, type: string) => string): string[] {
  const filters: string[] = search === null ? [] : searchFilters(search, parameter)
  if (walk.title !== undefined) filters.push(`title ILIKE ${parameter(containing(walk.title), 'text')}`)
  if (walk.author !== undefined) filters.push(`author ILIKE ${parameter(containing(walk.author), 'text')}`)
  if (walk.yearFrom !== undefined) filters.push(`year >= ${parameter(walk.yearFrom, 'int4')}`)
  if (walk.yearTo !== undefined) filters.push(`year <= ${parameter(walk.yearTo, 'int4')}`)
  return filters
}

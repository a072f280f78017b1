/**
 * What a `GET /books` with query parameters asks for (a walk: its order and filters), where a
 * walk goes on (a position, carried between pages in a signed cursor), and the `Link` to the next
 * page. The SQL of a walk is in plugins/app/listings-repository.ts; docs/api.md, Pages, has the rules.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import { isBookId } from './schemas/book.js'
import { YEAR_MAX, YEAR_MIN } from './schemas/book-limits.js'
import type { ListingQuery } from './schemas/listing.js'

/** What a walk orders by: `relevance`, a search's rank (best first), when `q` is given without `sort`. */
type SortField = 'id' | 'title' | 'author' | 'year' | 'relevance'

/** The books of a listing and their order. */
export interface Walk {
  field: SortField
  descending: boolean
  /** The search (src/search.ts), as `q` gave it. */
  q?: string
  title?: string
  author?: string
  yearFrom?: number
  yearTo?: number
}

/**
 * Where a walk stands: the last book listed, by its sort key (`key`, null when sorting by id; a
 * search's rank for `relevance`) and id. A walk sorted by a field other than id also carries the
 * snapshot of its first page
 * (`pg_current_snapshot()` as text): later pages leave out the books whose sort field changed
 * after it, which an earlier page may have listed at their old place.
 */
export interface Position {
  key: string | number | null
  id: string
  snapshot: string | null
  /**
   * How the walk's pages read the books, decided at its first page (plugins/app/listings-repository.ts,
   * readsMatchesFirst); absent in a cursor made by a version of the service that does not keep
   * it, where a page decides again.
   */
  matchesFirst?: boolean
}

/** Whether a walk has a filter: then no index bounds what a page of it reads (a budget does). */
export function hasFilter (walk: Walk): boolean {
  return walk.q !== undefined || walk.title !== undefined || walk.author !== undefined || walk.yearFrom !== undefined || walk.yearTo !== undefined
}

/**
 * A page of a filtered listing that ran out of its budget (LISTING_BUDGET_MS) and was cancelled by
 * the server: the client's own request costs too much, answered `422 Listing too costly`, not a
 * fault of the service.
 */
export class ListingOverBudget extends Error {
  readonly code = 'LISTING_OVER_BUDGET'
  constructor (readonly budgetMs: number) {
    super(`a page of a filtered listing ran longer than its budget of ${budgetMs} ms`)
  }
}

/** Whether a query asks for more than today's listing (every book, by id). */
export function isWalk (query: ListingQuery): boolean {
  return query.limit !== undefined || query.sort !== undefined || query.title !== undefined ||
    query.author !== undefined || query.year_from !== undefined || query.year_to !== undefined ||
    query.cursor !== undefined || query.q !== undefined
}

function year (text: string | undefined): number | undefined | null {
  if (text === undefined) return undefined
  const value = Number(text)
  return value >= YEAR_MIN && value <= YEAR_MAX ? value : null
}

/**
 * The walk a query (already matched by its schema) asks for; null for a year bound out of range.
 * A search without `sort` is ordered by relevance; with one, its matches are sorted by it.
 */
export function walkOf (query: ListingQuery): Walk | null {
  const sort = query.sort ?? (query.q === undefined ? 'id' : 'relevance')
  const descending = sort.startsWith('-')
  const yearFrom = year(query.year_from)
  const yearTo = year(query.year_to)
  if (yearFrom === null || yearTo === null) return null
  return {
    field: (descending ? sort.slice(1) : sort) as SortField,
    descending,
    ...(query.q === undefined ? {} : { q: query.q }),
    ...(query.title === undefined ? {} : { title: query.title }),
    ...(query.author === undefined ? {} : { author: query.author }),
    ...(yearFrom === undefined ? {} : { yearFrom }),
    ...(yearTo === undefined ? {} : { yearTo })
  }
}

const CURSOR_VERSION = 1
/** Bytes of HMAC-SHA256 a cursor keeps: 128 bits, beyond guessing. */
const TAG_BYTES = 16
/** Characters of that tag in base64url, without padding. */
const TAG_CHARS = 22
const SNAPSHOT = /^[0-9]{1,20}:[0-9]{1,20}:([0-9]{1,20}(,[0-9]{1,20})*)?$/

/**
 * Cursors made with a key derived from `secret` (SECRET_TOKEN, which every instance shares) and
 * checked with it or with one of `accepted` (SECRET_TOKEN_ACCEPTED, during a rotation): one
 * instance reads another's, after restarts too. A cursor is the position as base64url JSON and
 * an HMAC over it and over the walk (sort and filters), so a changed cursor, or one sent with
 * another sort or other filters, is refused, never read as another page.
 */
export function listingCursors (secret: string, accepted: readonly string[] = []) {
  // A key of its own, so that nothing signed for one purpose passes for another
  const keys = [secret, ...accepted].map((each) => createHmac('sha256', each).update('bookkeeping listing cursor').digest())
  const key = keys[0]!
  // A search's `q` is added at the end only: the walks without one keep the tags they had
  const signedWalk = (walk: Walk) =>
    [walk.field, walk.descending, walk.title ?? null, walk.author ?? null, walk.yearFrom ?? null, walk.yearTo ?? null, ...(walk.q === undefined ? [] : [walk.q])]
  const tag = (signingKey: Buffer, walk: Walk, payload: string) => createHmac('sha256', signingKey)
    .update(JSON.stringify(signedWalk(walk)))
    .update('\n').update(payload)
    .digest().subarray(0, TAG_BYTES).toString('base64url')

  /**
   * Whether `signature` is the tag of the walk and payload under one of the keys, the current one
   * first. The spellings compared, not the bytes: base64url spells the same 16 bytes 16 ways (the
   * last character's low bits encode nothing), and only one of them was issued.
   */
  function signed (walk: Walk, payload: string, signature: string): boolean {
    if (signature.length !== TAG_CHARS) return false
    const given = Buffer.from(signature)
    return keys.some((each) => timingSafeEqual(given, Buffer.from(tag(each, walk, payload))))
  }

  /** Whether a decoded position has the shape its walk's positions have. */
  function wellFormed (walk: Walk, [version, key, id, snapshot, matchesFirst]: unknown[]): boolean {
    if (version !== CURSOR_VERSION || typeof id !== 'string' || !isBookId(id)) return false
    if (matchesFirst !== undefined && typeof matchesFirst !== 'boolean') return false
    if (walk.field === 'id') return key === null && snapshot === null
    return (walk.field === 'year' || walk.field === 'relevance' ? Number.isSafeInteger(key) : typeof key === 'string') &&
      typeof snapshot === 'string' && SNAPSHOT.test(snapshot)
  }

  return {
    encode (walk: Walk, { key: sortKey, id, snapshot, matchesFirst }: Position): string {
      const fields = [CURSOR_VERSION, sortKey, id, snapshot, ...(matchesFirst === undefined ? [] : [matchesFirst])]
      const payload = Buffer.from(JSON.stringify(fields)).toString('base64url')
      return `${payload}.${tag(key, walk, payload)}`
    },

    /** The position a cursor (already matched by its schema) names for `walk`; null if it was not made for it. */
    decode (walk: Walk, cursor: string): Position | null {
      const [payload, signature] = cursor.split('.') as [string, string]
      if (!signed(walk, payload, signature)) return null
      let fields: unknown
      try {
        fields = JSON.parse(Buffer.from(payload, 'base64url').toString())
      } catch {
        return null
      }
      if (!Array.isArray(fields) || (fields.length !== 4 && fields.length !== 5) || !wellFormed(walk, fields)) return null
      return { key: fields[1], id: fields[2], snapshot: fields[3], ...(fields.length === 5 ? { matchesFirst: fields[4] } : {}) }
    }
  }
}

/** The order of the parameters in a `next` link; the cursor last. */
const LINK_PARAMETERS = ['limit', 'sort', 'q', 'title', 'author', 'year_from', 'year_to'] as const

/** The path of the page after this one: the same limit, sort and filters, and `cursor`. */
export function nextPage (query: ListingQuery, cursor: string): string {
  const parameters = LINK_PARAMETERS.flatMap((name) => query[name] === undefined ? [] : [`${name}=${encodeURIComponent(query[name])}`])
  return `/books?${[...parameters, `cursor=${cursor}`].join('&')}`
}

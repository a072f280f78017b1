/**
 * The feed of changes, as its clients see it (docs/api.md, Live changes): the change ids, signed
 * so that a `Last-Event-ID` this service never issued is refused, and the text of its events in
 * the WHATWG server-sent events format, a change as the feed reads it, and the log as the feed
 * uses it (`ChangeLog`). The feed itself is src/changes-feed.ts and src/changes-subscription.ts;
 * the log it reads, src/db/migrations.ts (version 15).
 */
import { createHmac, timingSafeEqual } from 'node:crypto'

/** Bytes of HMAC-SHA256 a change id keeps: 128 bits, beyond guessing. */
const TAG_BYTES = 16
/** Digits of a position in an id: every position below 2^53 (src/db/migrations.ts, version 15). */
const POSITION_DIGITS = 16
const CHANGE_ID = /^([0-9]{16})\.([A-Za-z0-9_-]{22})$/

/**
 * Change ids made with a key derived from `secret` (SECRET_TOKEN, which every instance shares)
 * and checked with it or with one of `accepted` (SECRET_TOKEN_ACCEPTED, during a rotation): an
 * id from one instance resumes the feed on any other. An id is the feed position, zero-padded so
 * that ids also increase as strings, and an HMAC over it.
 */
export function changeIds (secret: string, accepted: readonly string[] = []) {
  // A key of its own, so that nothing signed for one purpose passes for another
  const keys = [secret, ...accepted].map((each) => createHmac('sha256', each).update('bookkeeping change id').digest())
  const key = keys[0]!
  const tag = (signingKey: Buffer, digits: string) => createHmac('sha256', signingKey).update(digits).digest().subarray(0, TAG_BYTES).toString('base64url')

  return {
    encode (position: number): string {
      const digits = String(position).padStart(POSITION_DIGITS, '0')
      return `${digits}.${tag(key, digits)}`
    },

    /** The position an id names; null if this service did not issue it, or with a secret it no longer accepts. */
    decode (id: string): number | null {
      const match = CHANGE_ID.exec(id)
      if (match === null) return null
      // The spellings compared, not the bytes: base64url spells the same 16 bytes 16 ways (the
      // last character's low bits encode nothing), and only one of them was issued. The
      // current key first: what it signed costs one HMAC
      const given = Buffer.from(match[2]!)
      if (!keys.some((each) => timingSafeEqual(given, Buffer.from(tag(each, match[1]!))))) return null
      return Number(match[1])
    }
  }
}

export type ChangeIds = ReturnType<typeof changeIds>

/** A change of the feed (src/db/migrations.ts, version 15): its position, kind and book as JSON. */
export interface Change {
  position: number
  kind: 'created' | 'updated' | 'deleted'
  book: string
}

/** How long a client waits before it reconnects, sent once at the start of each feed. */
export const RECONNECT_MS = 2000

/**
 * The first lines of every feed: the client's reconnection delay, and the id of where the feed
 * starts. An `id` without `data` dispatches no event, but the client keeps it as its last event
 * id: a feed that drops before its first change resumes from its start, missing nothing.
 */
export const feedStart = (id: string) => `retry: ${RECONNECT_MS}\nid: ${id}\n\n`

/** An SSE comment, ignored by clients; keeps proxies from closing an idle feed. */
export const KEEP_ALIVE = ': keep-alive\n\n'

/** One event: `data` is one line of JSON (JSON escapes every line break inside its strings). */
export function event (kind: string, data: string, id?: string): string {
  return `${id === undefined ? '' : `id: ${id}\n`}event: ${kind}\ndata: ${data}\n\n`
}

/** The client must reload what it holds; the feed goes on after `id`. */
export const reset = (id: string) => event('reset', '{}', id)

/** Sent as the token expires, the last event of the feed: no id, so the client resumes from the last. */
export const TOKEN_EXPIRED = event('token-expired', '{}')

/** The change log, as the feed reads, places and prunes it. */
export interface ChangeLog {
  /**
   * Gives the committed changes not yet placed in the feed their positions (up to `limit`, the
   * oldest first), then answers up to `limit` changes after `position` and the last position
   * given, placed by this instance or another.
   */
  readChanges (position: number, limit: number): Promise<{ changes: Change[], last: number }>
  /** Up to `limit` changes after `position`, in the feed's order. */
  changesAfter (position: number, limit: number): Promise<Change[]>
  /** The first and last positions the log still keeps; 0 and 0 before the first change. */
  changesKept (): Promise<{ first: number, last: number }>
  /** Gives up to `limit` committed changes not yet placed their positions; answers how many. */
  placeChanges (limit: number): Promise<number>
  /** Removes up to `limit` of the oldest changes older than `keepSeconds` and not among the last `keepCount`; answers how many. */
  pruneChanges (keepSeconds: number, keepCount: number, limit: number): Promise<number>
}

/**
 * The ETag of a book and the conditional headers that name it (RFC 9110 sections 8.8.3 and 13).
 * A book's tag is `"<id>.<version>"`, its version growing by one with each update that changes
 * it (src/db/migrations.ts, version 3), so it changes whenever the book does and is strong: one
 * version is one representation.
 */

/** The version of a book as created. */
export const FIRST_VERSION = 1

export function entityTag (id: number | string, version: number): string {
  return `"${id}.${version}"`
}

/** `If-Match` or `If-None-Match`: any current representation (`*`), or a list of tags. */
export type TagCondition = '*' | Array<{ weak: boolean, opaque: string }>

// entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE, etagc = %x21 / %x23-7E / obs-text (Node reads a
// header's bytes as latin1, so obs-text is U+0080 to U+00FF); list elements are separated by
// commas with optional white space, and empty ones are allowed (RFC 9110 section 5.6.1)
const TAG = /(W\/)?"([\x21\x23-\x7E\x80-\xFF]*)"/y
const SEPARATOR = /[ \t]*(,[ \t]*)*/y

/**
 * The condition a header states; `undefined` when it is absent, null when it is malformed (no tag,
 * or anything that is not a tag between the separators).
 */
export function parseTagCondition (value: string | undefined): TagCondition | undefined | null {
  if (value === undefined) return undefined
  if (value.trim() === '*') return '*'
  const tags: Array<{ weak: boolean, opaque: string }> = []
  let at = 0
  for (;;) {
    SEPARATOR.lastIndex = at
    SEPARATOR.exec(value)
    at = SEPARATOR.lastIndex
    if (at === value.length) break
    // A tag needs a separator before it unless it is the first
    if (tags.length > 0 && !value.slice(0, at).trimEnd().endsWith(',')) return null
    TAG.lastIndex = at
    const match = TAG.exec(value)
    if (match === null) return null
    tags.push({ weak: match[1] !== undefined, opaque: match[2]! })
    at = TAG.lastIndex
  }
  return tags.length === 0 ? null : tags
}

/**
 * The versions of book `id` that `If-Match` accepts, by strong comparison (a weak tag never
 * matches); null for `*`, which any version matches. A tag of another book or of no form of ours
 * accepts none.
 */
export function acceptedVersions (condition: TagCondition, id: string): number[] | null {
  if (condition === '*') return null
  const prefix = `${id}.`
  return condition.flatMap(({ weak, opaque }) => {
    if (weak || !opaque.startsWith(prefix)) return []
    const version = opaque.slice(prefix.length)
    return /^[1-9][0-9]{0,9}$/.test(version) && Number(version) <= 2_147_483_647 ? [Number(version)] : []
  })
}

/** Whether `If-None-Match` names the current tag, by weak comparison (`W/` aside), or is `*`. */
export function noneMatchHolds (condition: TagCondition, id: number | string, version: number): boolean {
  if (condition === '*') return false
  const current = entityTag(id, version).slice(1, -1)
  return !condition.some(({ opaque }) => opaque === current)
}

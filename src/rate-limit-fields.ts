/**
 * The `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11: each a
 * Structured Field List (RFC 9651) of items, one per policy, named by a String, with integer
 * parameters: the quota `q` and window `w` (seconds) of a policy, the requests `r` that remain
 * and the seconds `t` until its window resets. A field lists several policies, comma-separated.
 */

/** One policy of `RateLimit-Policy`: `"api";q=600;w=60`. */
export function policyItem (name: string, quota: number, windowS: number): string {
  return `"${name}";q=${quota};w=${windowS}`
}

/** One policy of `RateLimit`: `"api";r=42;t=17`. */
export function limitItem (name: string, remaining: number, resetS: number): string {
  return `"${name}";r=${remaining};t=${resetS}`
}

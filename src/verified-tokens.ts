/**
 * The tokens that passed every check of plugins/app/authenticate.ts, by their exact text, each
 * with the time it expires (ms). A client sends the same token with every request for up to its
 * 15 minutes; verifying it once saves its HMAC, its decoding and the checks of its spelling on
 * every later request. Its expiry is not cached away: the caller compares it with the clock on
 * every request, hit or not.
 *
 * Only a token that passed is kept, so filling the cache takes tokens signed with the secret.
 * At most `capacity` are kept, the oldest dropped first: tokens live alike, so the oldest is the
 * first to expire. What a full cache holds: docs/performance.md, What makes the difference.
 */
export class VerifiedTokens {
  readonly #expiries = new Map<string, number>()

  constructor (readonly capacity: number) {}

  /** When `token` expires, if it passed every check before; the caller still compares it with now. */
  expiryOf (token: string): number | undefined {
    return this.#expiries.get(token)
  }

  remember (token: string, expiresAt: number): void {
    if (this.#expiries.size >= this.capacity) this.#expiries.delete(this.#expiries.keys().next().value!)
    this.#expiries.set(token, expiresAt)
  }

  get size (): number {
    return this.#expiries.size
  }
}

/**
 * The slots of the long reads (the pages of the listings, the feeds' catch-ups): a limiter of
 * `concurrency` calls at once, fair between the clients that ask. Each call names its client
 * (its address); one client holds at most `share` slots at once, whatever it has waiting, so the
 * other slots stay free for the other clients. A freed slot goes to the clients that wait in
 * turn (round-robin): the next client's first call, then the next one's, never the twentieth
 * call of one client ahead of another client's first. Within a client, calls run in the order
 * they came.
 */
import { normalizeIP } from '@fastify/rate-limit'

/** Runs `fn` once a slot is free, for one client or for none (the call shape of `QueryLimiter`, src/changes-subscription.ts). */
export type SlotRunner = <T>(fn: () => PromiseLike<T> | T) => Promise<T>

/**
 * The client a request counts for: its address (`request.ip`, which honours the trusted proxy
 * setting), IPv6 by /64 as the attempt limits of POST /token count it.
 */
export function clientOf (request: { ip: string }): string {
  return normalizeIP(request.ip)
}

/** The share of `slots` one client may hold at once: half of them, at least one. */
export function shareOf (slots: number): number {
  return Math.max(1, Math.floor(slots / 2))
}

interface Client {
  held: number
  /** When it last started a call (a count of starts); 0 for never. */
  served: number
  waiting: Array<() => void>
}

export class ListingSlots {
  readonly #clients = new Map<string, Client>()
  /** The clients with calls waiting. */
  readonly #waiting = new Set<Client>()
  #active = 0
  #pending = 0
  #starts = 0
  /** Keys of calls made without a client: each its own (`run` without a key). */
  #anonymous = 0

  constructor (readonly concurrency: number, readonly share: number = shareOf(concurrency)) {}

  /** Calls running now. */
  get activeCount (): number {
    return this.#active
  }

  /** Calls waiting for a slot. */
  get pendingCount (): number {
    return this.#pending
  }

  /** The slots `client` holds now. */
  held (client: string): number {
    return this.#clients.get(client)?.held ?? 0
  }

  /**
   * Whether a call of `client` would start at once. Only clients at their share wait while a
   * slot is free, so such a call makes no waiting client wait longer.
   */
  startsNow (client: string): boolean {
    const entry = this.#clients.get(client)
    return this.#active < this.concurrency && (entry === undefined || (entry.held < this.share && entry.waiting.length === 0))
  }

  /**
   * Runs `fn` once `client` may start a call: a slot is free, the client holds less than its
   * share, and no other client that may start one has waited longer for its turn. Without a
   * client, the call counts as a client of its own.
   */
  run<T> (fn: () => PromiseLike<T> | T, client = `\0anonymous ${this.#anonymous++}`): Promise<T> {
    let entry = this.#clients.get(client)
    if (entry === undefined) {
      entry = { held: 0, served: 0, waiting: [] }
      this.#clients.set(client, entry)
    }
    const own = entry
    return new Promise<T>((resolve, reject) => {
      const start = () => {
        own.held++
        own.served = ++this.#starts
        this.#active++
        // A call that throws at once rejects like one that fails later. The slot is free again
        // before its caller goes on
        new Promise<T>((resolve) => { resolve(fn()) }).then((value) => {
          this.#release(client, own)
          resolve(value)
        }, (err: unknown) => {
          this.#release(client, own)
          reject(err)
        })
      }
      if (this.#waiting.size === 0 && this.#active < this.concurrency && own.held < this.share) {
        start()
        return
      }
      own.waiting.push(start)
      this.#waiting.add(own)
      this.#pending++
      this.#next()
    })
  }

  #release (client: string, entry: Client) {
    entry.held--
    this.#active--
    if (entry.held === 0 && entry.waiting.length === 0) this.#clients.delete(client)
    this.#next()
  }

  /**
   * Starts waiting calls while slots are free. The turn goes to the waiting client below its
   * share that holds the fewest slots, and of those to the one whose last call started
   * longest ago: round-robin between the clients, whatever each has queued.
   */
  #next () {
    while (this.#active < this.concurrency) {
      let chosen: Client | undefined
      for (const entry of this.#waiting) {
        if (entry.held >= this.share) continue
        if (chosen === undefined || entry.held < chosen.held || (entry.held === chosen.held && entry.served < chosen.served)) chosen = entry
      }
      if (chosen === undefined) return
      const start = chosen.waiting.shift()!
      if (chosen.waiting.length === 0) this.#waiting.delete(chosen)
      this.#pending--
      start()
    }
  }
}

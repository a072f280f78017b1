/**
 * Clients creating books the way docs/deployment.md ("High availability") tells a client to:
 * each create with an Idempotency-Key of its own, and a create that failed or was not answered
 * sent again with the same key and body until it is acknowledged (201). Every attempt is kept,
 * so a test can tell when the service was unavailable and check that the database holds each
 * acknowledged create exactly once.
 */
import { randomUUID } from 'node:crypto'
import { Agent } from 'node:http'
import type pg from 'pg'
import type { Test } from 'tap'
import { sendRequest, type Exchange } from './keep-alive-request.js'

export interface Attempt extends Exchange {
  client: number
  key: string
  title: string
}

interface Acknowledged {
  key: string
  title: string
  id: number
}

export interface IdempotentCreates {
  attempts: Attempt[]
  acknowledged: Acknowledged[]
  /** Creates still not acknowledged after RETRY_FOR_MS: the client gave up on them. */
  abandoned: Array<{ key: string, title: string }>
  /** Lets each client retry its current create until it is acknowledged, then stops them. */
  stop: () => Promise<void>
}

/** The service answers within 5 s whatever the database does (src/db/time-bounds.ts). */
const ANSWER_BOUND_MS = 5500
/** A client gives up waiting a little later and sends the create again. */
const CLIENT_TIMEOUT_MS = 6000
/** A client's pause before sending a failed create again. */
const RETRY_PAUSE_MS = 100
/** How long a client keeps sending one create again. */
const RETRY_FOR_MS = 60_000

/** The statuses a create may get while the database fails over: 409 is the same key still in flight. */
const CREATE_STATUSES = [201, 409, 503]

/** The header's value: a quoted string, as the Idempotency-Key draft of the IETF has it. */
const headerValue = (key: string) => `"${key}"`

/**
 * Starts `clients` clients against the service at `url`, each on a keep-alive connection of its
 * own, creating books titled `<prefix>-<client>-<n>` one after another.
 */
export function startIdempotentCreates (
  { url, token, clients, prefix }: { url: string, token: string, clients: number, prefix: string }
): IdempotentCreates {
  const target = new URL(url)
  const load: Omit<IdempotentCreates, 'stop'> = { attempts: [], acknowledged: [], abandoned: [] }
  const state = { stopping: false }
  const running = Array.from({ length: clients }, async (_, client) => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    for (let n = 0; !state.stopping; n++) {
      const key = randomUUID()
      const title = `${prefix}-${client}-${n}`
      const body = JSON.stringify({ title, author: 'Failover', year: 2000 })
      const first = performance.now()
      for (;;) {
        const outcome = await sendRequest(target, agent, {
          method: 'POST', path: '/book', token, body, headers: { 'idempotency-key': headerValue(key) }, timeoutMs: CLIENT_TIMEOUT_MS
        })
        load.attempts.push({ client, key, title, ...outcome })
        if (outcome.status === 201) {
          load.acknowledged.push({ key, title, id: (JSON.parse(outcome.body!) as { data: { id: number } }).data.id })
          break
        }
        if (performance.now() - first > RETRY_FOR_MS) {
          load.abandoned.push({ key, title })
          break
        }
        await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS))
      }
    }
    agent.destroy()
  })
  return {
    ...load,
    async stop () {
      state.stopping = true
      await Promise.all(running)
    }
  }
}

/** `201: 1234, 503: 56, timeout: 1`, for t.comment. */
function statusCounts (attempts: Attempt[]): string {
  const counts = new Map<string, number>()
  for (const { status, error } of attempts) counts.set(String(status ?? error), (counts.get(String(status ?? error)) ?? 0) + 1)
  return [...counts].sort().map(([key, count]) => `${key}: ${count}`).join(', ')
}

/**
 * When the service served creates again after `since` (a kill, a restart): the end of the first
 * acknowledged create sent after the last one that failed. `since` itself when none failed.
 */
function recoveredAt (attempts: Attempt[], since: number): number {
  const failed = attempts.filter((attempt) => attempt.status !== 201 && attempt.sentAt >= since)
  if (failed.length === 0) return since
  const lastFailure = Math.max(...failed.map((attempt) => attempt.sentAt))
  const after = attempts.filter((attempt) => attempt.status === 201 && attempt.sentAt > lastFailure)
  return after.length === 0 ? Number.POSITIVE_INFINITY : Math.min(...after.map((attempt) => attempt.endedAt))
}

/**
 * What the service must do while its database fails over or restarts: answer every create with
 * 201, 409 or 503 (never 500, never nothing) within ANSWER_BOUND_MS, and keep running. Returns
 * the longest answer's milliseconds.
 */
function checkAnswers (t: Test, load: IdempotentCreates): number {
  const unexpected = load.attempts.filter((attempt) => attempt.status === undefined || !CREATE_STATUSES.includes(attempt.status))
  t.strictSame(unexpected.slice(0, 10).map(({ status, error }) => status ?? error), [],
    `every create answered 201, 409 or 503 (${unexpected.length} others)`)
  const slowest = Math.max(...load.attempts.filter((attempt) => attempt.status !== undefined).map((attempt) => attempt.endedAt - attempt.sentAt))
  t.ok(slowest <= ANSWER_BOUND_MS, `every create answered within ${ANSWER_BOUND_MS} ms (slowest ${Math.round(slowest)} ms)`)
  t.strictSame(load.abandoned, [], 'every create was acknowledged in the end')
  return Math.round(slowest)
}

/**
 * "Within seconds" of the database being back (a promotion, pg_ctl's return): HAProxy's 0.75 s
 * to take a new primary in, and room for a busy machine.
 */
const SERVES_AGAIN_WITHIN_MS = 5000

/**
 * What the service must do around a disruption of its database (at `disruptedAt`, over by
 * `backAt`): every answer as checkAnswers wants it, nothing failed before the disruption, and
 * creates served again within SERVES_AGAIN_WITHIN_MS of `backAt`. Returns what the test reports:
 * when it served again, the failed attempts, the slowest answer's milliseconds.
 */
export function checkRecovery (t: Test, load: IdempotentCreates, { disruption, disruptedAt, back, backAt }: {
  disruption: string, disruptedAt: number, back: string, backAt: number
}): { recovered: number, failed: Attempt[], slowest: number } {
  const recovered = recoveredAt(load.attempts, disruptedAt)
  const failed = load.attempts.filter((attempt) => attempt.status !== 201)
  const slowest = checkAnswers(t, load)
  t.comment(`${load.attempts.length} attempts (${statusCounts(load.attempts)}), ${load.acknowledged.length} creates acknowledged`)
  // Answered before it, not sent before it: a create sent earlier may still be in flight, waiting
  // on the database, when it goes (more than 100 ms on a busy machine)
  t.ok(failed.every((attempt) => attempt.endedAt >= disruptedAt), `nothing failed before ${disruption}`)
  t.ok(recovered - backAt <= SERVES_AGAIN_WITHIN_MS,
    `serving again ${Math.round(recovered - backAt)} ms after ${back} (bound ${SERVES_AGAIN_WITHIN_MS} ms)`)
  return { recovered, failed, slowest }
}

/**
 * Reads the books and idempotency keys of the creates of `prefix` on the database of `db` (the
 * primary now) and checks: every acknowledged create is stored, with the id it was acknowledged
 * with, exactly once; nothing is stored twice or that no client sent; each acknowledged key
 * points at its book.
 */
export async function checkStoredExactlyOnce (t: Test, db: pg.Client, load: IdempotentCreates, prefix: string): Promise<void> {
  const books = await db.query<{ id: number, title: string }>('SELECT id::int, title FROM books WHERE title LIKE $1', [`${prefix}-%`])
  const byTitle = new Map<string, number[]>()
  for (const { id, title } of books.rows) byTitle.set(title, [...(byTitle.get(title) ?? []), id])
  t.strictSame(load.acknowledged.filter(({ title, id }) => byTitle.get(title)?.length !== 1 || byTitle.get(title)![0] !== id), [],
    `each of the ${load.acknowledged.length} acknowledged creates stored once, with the id it was acknowledged with`)
  t.strictSame([...byTitle].filter(([, ids]) => ids.length > 1), [], 'no create stored twice')
  const sent = new Set(load.attempts.map((attempt) => attempt.title))
  t.strictSame([...byTitle.keys()].filter((title) => !sent.has(title)), [], 'nothing stored that no client sent')

  const keys = await db.query<{ key: string, book_id: number }>('SELECT key, book_id::int FROM idempotency_keys')
  // The table keeps the key the header names, without the quotes
  const bookOf = new Map(keys.rows.map((row) => [row.key, row.book_id]))
  t.strictSame(load.acknowledged.filter(({ key, id }) => bookOf.get(key) !== id), [], 'each acknowledged key points at the book it was acknowledged with')
}

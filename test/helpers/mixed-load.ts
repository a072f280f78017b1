/**
 * A mixed load of keep-alive clients for the topology tests: each client sends reads, creates and
 * updates in turn, one at a time on its one keep-alive connection, and every request's outcome is
 * kept. Each create has a title of its own, so the test can find in the database what each
 * acknowledged create stored.
 */
import { Agent } from 'node:http'
import { sendRequest, type Exchange } from './keep-alive-request.js'
import { sleep } from './wait.js'

export type Kind = 'read' | 'create' | 'update'

export interface Outcome extends Exchange {
  client: number
  kind: Kind
  /** A create's title. */
  title?: string
}

export interface MixedLoad {
  outcomes: Outcome[]
  /** Lets each client finish the request it is sending, then stops them all. */
  stop: () => Promise<void>
}

/**
 * Starts `clients` clients against `url`, each on a keep-alive connection of its own, sending in
 * turn `GET /book/<id>`, `POST /book` (title `<prefix>-<client>-<n>`) and `PUT /book/<id>`, with
 * ids picked from `ids` (books that exist and are never deleted). With `pauseMs`, each client
 * waits that long after each answer, as a real client does: its connection is then idle at
 * times, which the idle-connection races of a stop need, and a long load leaves the machine to
 * the other test files (unpaced, eight clients keep a small machine's cores busy; paced, they
 * send a fraction as many requests).
 */
export function startMixedLoad (
  { url, token, clients, ids, prefix, pauseMs = 0 }:
  { url: string, token: string, clients: number, ids: number[], prefix: string, pauseMs?: number }
): MixedLoad {
  const target = new URL(url)
  const outcomes: Outcome[] = []
  const state = { stopping: false }
  const pick = () => ids[Math.floor(Math.random() * ids.length)]!
  const running = Array.from({ length: clients }, async (_, client) => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    for (let n = 0; !state.stopping; n++) {
      if (n > 0 && pauseMs > 0) await sleep(pauseMs)
      const kind = (['read', 'create', 'update'] as const)[n % 3]!
      if (kind === 'read') {
        outcomes.push({ client, kind, ...await sendRequest(target, agent, { method: 'GET', path: `/book/${pick()}`, token }) })
      } else if (kind === 'create') {
        const title = `${prefix}-${client}-${n}`
        const body = { title, author: 'Load', year: 2000 }
        outcomes.push({ client, kind, title, ...await sendRequest(target, agent, { method: 'POST', path: '/book', token, body }) })
      } else {
        const body = { year: 1000 + n % 1000 }
        outcomes.push({ client, kind, ...await sendRequest(target, agent, { method: 'PUT', path: `/book/${pick()}`, token, body }) })
      }
    }
    agent.destroy()
  })
  return {
    outcomes,
    async stop () {
      state.stopping = true
      await Promise.all(running)
    }
  }
}

/** The status a request of each kind answers when all is well. */
export const EXPECTED_STATUS: Record<Kind, number> = { read: 200, create: 201, update: 200 }

/** A line per kind of outcome: `read 200: 1234`, `create ECONNRESET: 1`, ... for t.comment. */
export function summary (outcomes: Outcome[]): string {
  const counts = new Map<string, number>()
  for (const outcome of outcomes) {
    const key = `${outcome.kind} ${outcome.status ?? outcome.error}`
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  return [...counts].sort().map(([key, count]) => `${key}: ${count}`).join(', ')
}

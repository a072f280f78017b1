/**
 * Listings whose clients stop reading, for the tests of what the service holds for them: one
 * such listing, and a service holding a thousand of them over 200,000 books.
 */
import { Agent } from 'node:http'
import { connect, type Socket } from 'node:net'
import type pg from 'pg'
import type { Test } from 'tap'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, pgClient, serviceQueriesRunning } from './database.js'
import { sendRequest } from './keep-alive-request.js'
import { residentMiB, type Service, startService } from './service.js'
import { sleep, waitUntil } from './wait.js'

/**
 * A `GET /books` on a raw socket that reads the first chunk of the answer (to see its status
 * line) and then stops reading for good: the kernel's buffers fill and the service is held back.
 * With `accept`, an export in that format (the envelope without).
 */
export function stalledListing (service: Service, token: string, accept?: string): Promise<{ socket: Socket, head: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port: service.port, host: '127.0.0.1' }, () => {
      const asked = accept === undefined ? '' : `Accept: ${accept}\r\n`
      socket.write(`GET /books HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n${asked}\r\n`)
    })
    socket.once('data', (chunk: Buffer) => {
      socket.pause()
      resolve({ socket, head: chunk.subarray(0, 200).toString('latin1') })
    })
    socket.on('error', () => {})
    socket.once('error', reject)
  })
}

/** The books and the listings of the stalled-listings tests. */
const BOOKS = 200_000
export const LISTINGS = 1000

/**
 * A real service on a fresh database of BOOKS books, warmed up by a whole listing and 200 point
 * reads over one keep-alive connection (`pointRead`), so that its idle figure (`idleMiB`, taken 2 s
 * later) includes what the first requests allocate for good: compiled code, pooled connections.
 * `activeQueries()`: how many of the service's queries run now.
 */
export async function serviceWithBooks (t: Test) {
  const dbUrl = await createDatabaseWithBooks(t, BOOKS)
  // All the listings come from this one client address: the bound per address would answer
  // most of them 429 (test/process/alone/connection-flood.test.ts) instead of letting them stall
  const service = await startService(t, { ...testEnv(dbUrl), MAX_CONNECTIONS_PER_ADDRESS: String(2 * LISTINGS) })
  const token = await service.token()
  const db: pg.Client = await pgClient(t, dbUrl, { queryTimeoutMs: 120_000 })
  await db.query('VACUUM (ANALYZE) books')
  const activeQueries = () => serviceQueriesRunning(db, dbUrl)

  const whole = await service.request('GET', '/books', { token, ms: 60_000 })
  t.equal((whole.body as { data: unknown[] }).data.length, BOOKS, 'a whole listing reads every book')
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const url = new URL(service.url)
  const pointRead = () => sendRequest(url, agent, { method: 'GET', path: `/book/${1 + Math.floor(Math.random() * BOOKS)}`, token })
  for (let i = 0; i < 200; i++) await pointRead()
  await sleep(2000)
  const idleMiB = residentMiB(service.serverPid)
  t.comment(`idle RSS ${idleMiB.toFixed(1)} MiB`)
  return { service, token, db, activeQueries, pointRead, idleMiB }
}

/**
 * LISTINGS stalled listings, every other one a CSV export (its pages are COPY's bytes, not a
 * query's text: both kinds must stay bounded), opened in groups of 100 (so the listen backlog never overflows into
 * SYN retries), once they all stall: no query runs, seen twice a second apart, and the memory
 * did not grow in between (each page is read while the previous one is written, so nothing reads
 * any more once every client's buffers are full). Closed when the test ends.
 */
export async function stallListings (t: Test, service: Service, token: string, activeQueries: () => Promise<number>) {
  const listings: Array<{ socket: Socket, head: string }> = []
  t.teardown(() => listings.forEach(({ socket }) => socket.destroy()))
  for (let i = 0; i < LISTINGS; i += 100) {
    listings.push(...await Promise.all(Array.from({ length: Math.min(100, LISTINGS - i) }, (_, at) => stalledListing(service, token, at % 2 === 0 ? undefined : 'text/csv'))))
  }
  t.ok(listings.every(({ head }) => head.startsWith('HTTP/1.1 200 ')), `all ${LISTINGS} listings answered 200`)
  // No query at two looks a second apart could still be a gap between the turns of listings
  // that wait for a slot (one address holds two at most): their pages held grow the memory
  const pid = service.serverPid
  await waitUntil(async () => {
    const before = residentMiB(pid)
    return await activeQueries() === 0 && (await sleep(1000), await activeQueries() === 0) && residentMiB(pid) - before < 1
  }, 120_000, 'no query running for the stalled listings, and their memory no longer growing', 200)
  return listings
}

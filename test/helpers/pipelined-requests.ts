/**
 * Requests pipelined on raw connections, for the pipelining tests (test/process/pipelining.test.ts,
 * test/process/alone/pipelined-listings-shutdown.test.ts): a service over a database of books,
 * a connection that sends its requests at once and reads only when asked to, and how to read
 * what came back.
 */
import { connect, type Socket } from 'node:net'
import type { Test } from 'tap'
import { testEnv } from '../helper.js'
import { createDatabaseWithBooks, pgClient } from './database.js'
import { type Service, startService } from './service.js'

export async function serviceWithBooks (t: Test, books: number) {
  const dbUrl = await createDatabaseWithBooks(t, books)
  const service = await startService(t, testEnv(dbUrl))
  const db = await pgClient(t, dbUrl)
  return { dbUrl, service, token: await service.token(), db }
}

/** A raw connection that sends `requests` at once and reads only when asked to. */
export function pipeline (t: Test, service: Service, requests: string): Promise<Socket & { received: () => string }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    const socket = connect({ port: service.port, host: '127.0.0.1' }, () => {
      socket.write(requests)
      resolve(Object.assign(socket, { received: () => Buffer.concat(chunks).toString('latin1') }))
    })
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', () => {})
    socket.once('error', reject)
    t.teardown(() => { socket.destroy() })
  })
}

export const listing = (token: string) => `GET /books HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n\r\n`
// Answers follow each other with nothing between: one ends with its body's `}`, the next begins
export const statusLines = (text: string) => text.match(/HTTP\/1\.1 \d{3} /g) ?? []
export const bodies = (text: string) => text.split(/(?=HTTP\/1\.1 \d{3} )/).map((answer) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)))

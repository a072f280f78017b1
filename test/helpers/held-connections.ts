/**
 * Keep-alive connections that a test opens from a client address of its own (127.0.0.2 and up:
 * Linux routes all of 127/8 to the loopback interface), sends one request on and then holds,
 * silent, for the tests of the connection bounds.
 */
import { connect, type Socket } from 'node:net'
import type { Test } from 'tap'
import type { Service } from './service.js'
import { sleep, withTimeout } from './wait.js'

export interface Held {
  socket: Socket
  /** The first response's status, once its head has arrived */
  status: () => number | null
  received: () => string
  /** Resolves when the service has ended the connection (its FIN, or a reset) */
  ended: Promise<number>
}

/**
 * A keep-alive connection from `localAddress` to `port` (the service's public one unless given)
 * that sends one `request` (GET /health/live unless given) and then stays silent, never closing
 * by itself.
 */
export function hold (
  service: Service, localAddress: string, request = 'GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n', port = service.port
): Promise<Held> {
  return new Promise((resolve, reject) => {
    let received = ''
    const started = performance.now()
    const socket = connect({ port, host: '127.0.0.1', localAddress }, () => {
      socket.write(request)
      resolve({
        socket,
        status: () => {
          const match = /^HTTP\/1\.1 (\d{3}) /.exec(received)
          return match === null ? null : Number(match[1])
        },
        received: () => received,
        ended
      })
    })
    const ended = new Promise<number>((resolve) => {
      socket.once('end', () => resolve(performance.now() - started))
      socket.once('close', () => resolve(performance.now() - started))
    })
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { received += chunk })
    socket.on('error', () => {})
    socket.once('error', reject)
  })
}

/** Waits until every connection in `held` has its first answer. */
export async function answered (held: Held[], ms = 10_000) {
  await withTimeout((async () => {
    while (held.some((one) => !one.received().includes('\r\n\r\n'))) await sleep(20)
  })(), ms, 'every connection answered')
}

export function body (received: string): unknown {
  return JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4))
}

export function closeAll (t: Test, held: Held[]) {
  t.teardown(() => { for (const one of held) one.socket.destroy() })
}

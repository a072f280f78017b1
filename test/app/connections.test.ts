/**
 * Two app instances in one process share nothing of their connections (src/connections.ts):
 * the connections held on one count against its bounds alone, and one's shutdown drains its own
 * connections, not the other's. Both listen on real sockets, on one database.
 */
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { connect, type Socket } from 'node:net'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { build } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { withTimeout } from '../helpers/wait.js'

/** One bound for the whole app and for each address: the first connection takes both. */
const BOUNDS = { MAX_CONNECTIONS: '1', MAX_CONNECTIONS_PER_ADDRESS: '1' }

async function listening (app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

/** A keep-alive connection to `port`, and a way to send it one request and read the answer's head. */
async function keepAlive (port: number) {
  const socket: Socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  socket.setEncoding('latin1')
  let received = ''
  socket.on('data', (chunk: string) => { received += chunk })
  socket.on('error', () => {})
  t.teardown(() => { socket.destroy() })
  return {
    socket,
    async get (): Promise<string> {
      received = ''
      socket.write('GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n')
      return withTimeout((async () => {
        while (!received.includes('\r\n\r\n')) await new Promise((resolve) => setTimeout(resolve, 10))
        return received.slice(0, received.indexOf('\r\n\r\n'))
      })(), 5000, 'an answer')
    }
  }
}

t.test('two instances in one process: each counts and drains only its own connections', { skip: STORE_INDEPENDENT }, async (t) => {
  const dbUrl = await createDatabase(t)
  const one = await build(t, dbUrl, BOUNDS)
  const other = await build(t, dbUrl, BOUNDS)
  const [onePort, otherPort] = [await listening(one), await listening(other)]

  const held = await keepAlive(onePort)
  t.match(await held.get(), /^HTTP\/1\.1 200 /, 'the first connection to one is served')
  const second = await keepAlive(onePort)
  t.match(await second.get(), /^HTTP\/1\.1 503 /, 'a second connection to one is over its bound')

  const otherHeld = await keepAlive(otherPort)
  const otherHead = await otherHeld.get()
  t.match(otherHead, /^HTTP\/1\.1 200 /, 'the other, with as many connections held on one, serves its first')

  // One closes: its drain says Connection: close on its own answers only
  held.socket.destroy()
  second.socket.destroy()
  const closed = one.close()
  await withTimeout(closed, 10_000, 'one to close')
  t.ok(one.isClosing() && !other.isClosing(), 'only one is closing')
  const afterHead = await otherHeld.get()
  t.match(afterHead, /^HTTP\/1\.1 200 /, 'the other still serves on the connection it had')
  t.notMatch(afterHead, /connection: close/i, 'and keeps it open')
  t.notOk(otherHeld.socket.destroyed, 'its connection is not closed by the other\'s drain')
})

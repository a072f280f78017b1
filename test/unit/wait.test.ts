/**
 * test/helpers/wait.ts's `acceptsConnections`, which the database and Redis helpers use to decide
 * what a test file runs on, against a real listener on a port the system picked: it must say yes
 * when the event loop was blocked past its timeout while the connection was made, as loading a
 * test's modules on a busy machine blocks it; a wrong no would run a file on PGlite and skip
 * the tests that need a server.
 */
import { createServer } from 'node:net'
import t from 'tap'
import { acceptsConnections } from '../helpers/wait.js'

t.test('a listener is found even when the event loop was blocked past the timeout meanwhile', async (t) => {
  const server = createServer((socket) => socket.destroy())
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const { port } = server.address() as { port: number }

  const TIMEOUT_MS = 100
  const answer = acceptsConnections(`tcp://127.0.0.1:${port}`, port, TIMEOUT_MS)
  // Blocked: the connection is made by the kernel meanwhile, and the timeout is due too
  const until = performance.now() + 3 * TIMEOUT_MS
  while (performance.now() < until);
  t.equal(await answer, true, 'the connection made meanwhile wins over the timeout that fell due')
})

t.test('nothing listening: no', async (t) => {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  t.equal(await acceptsConnections(`tcp://127.0.0.1:${port}`, port, 1000), false)
})

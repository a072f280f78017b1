/**
 * How the topologies start a server program (tools/topology/daemon.ts) on a port chosen for it:
 * it counts as started once it listens there itself, not once anything does. Another process
 * may take the port first; the program then fails to bind and exits, and is started again on
 * another port. The program here is a small Node.js server, as a daemon binds: on the port it
 * is given, or not at all.
 */
import net from 'node:net'
import t, { type Test } from 'tap'
import { startDaemon } from '../../tools/topology/daemon.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'

/** A server on `port`, exiting with Node.js's EADDRINUSE message when the port is taken. */
const listener = (port: number) => ({
  command: process.execPath,
  args: ['-e', `require('node:net').createServer().listen(${port}, '127.0.0.1')`]
})

/** A listener of this test's own on a port the system picks. */
async function takenPort (t: Test): Promise<number> {
  const server = net.createServer((socket) => socket.destroy())
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return (server.address() as net.AddressInfo).port
}

t.test('a port another process listens on is not taken for the daemon\'s: it exits at start-up', { skip: STORE_INDEPENDENT }, async (t) => {
  const port = await takenPort(t)
  await t.rejects(startDaemon('listener', listener, port), /listener exited at start-up: .*EADDRINUSE/s,
    'the daemon failed to bind, and says so')
})

t.test('on a port of its own the daemon starts, and stops', { skip: STORE_INDEPENDENT }, async (t) => {
  const daemon = await startDaemon('listener', listener)
  t.teardown(() => daemon.stop())
  t.equal(daemon.child.exitCode, null, 'it runs')
  const connected = await new Promise<boolean>((resolve) => {
    const socket = net.connect(daemon.port, '127.0.0.1', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
  t.ok(connected, `it accepts connections on port ${daemon.port}`)
  await daemon.stop()
  t.not(daemon.child.exitCode ?? daemon.child.signalCode, null, 'stopped')
})

/**
 * What src/node-internals.ts relies on in Node's HTTP server, checked on a real loopback server:
 * a Node release that changes either fails here, by name. No database.
 */
import { once } from 'node:events'
import { createServer, Server } from 'node:http'
import { connect, Server as NetServer, Socket, type AddressInfo } from 'node:net'
import t from 'tap'
import { onServerEnd, stopAccepting } from '../../src/node-internals.js'

const REQUEST = 'GET / HTTP/1.1\r\nHost: localhost\r\n\r\n'

async function listening (server: Server): Promise<number> {
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return (server.address() as AddressInfo).port
}

/** A client connection that collects what it receives. */
async function client (port: number) {
  const socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  let received = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { received += chunk })
  socket.on('error', () => {})
  return { socket, received: () => received }
}

async function until (condition: () => boolean) {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  return condition()
}

t.test('Node ends a connection after a `Connection: close` answer through the socket\'s own destroySoon', async (t) => {
  t.equal(typeof Socket.prototype.destroySoon, 'function', 'net.Socket still has destroySoon')
  const ended: Socket[] = []
  const server = createServer((req, res) => { res.setHeader('connection', 'close'); res.end('ok') })
  server.on('connection', (socket: Socket) => onServerEnd(socket, () => { ended.push(socket); socket.end() }))
  t.teardown(() => { server.close() })
  const { socket, received } = await client(await listening(server))
  socket.write(REQUEST)
  t.ok(await until(() => ended.length === 1), 'the replacement was called for the connection it was set on')
  t.ok(await until(() => socket.readableEnded), 'and it alone ended the connection')
  t.match(received(), /^HTTP\/1\.1 200 [^]*ok$/, 'after the answer')
})

t.test('net.Server#close on an HTTP server stops accepting, leaves an idle keep-alive connection usable, and calls back once it ends', async (t) => {
  t.not(Server.prototype.close, NetServer.prototype.close, 'http.Server has a close of its own')
  t.equal(Object.getPrototypeOf(Server.prototype), NetServer.prototype, 'over net.Server\'s')
  const server = createServer((req, res) => res.end('ok'))
  const port = await listening(server)
  t.teardown(() => { server.closeAllConnections() })
  const idle = await client(port)
  idle.socket.write(REQUEST)
  await until(() => idle.received().includes('ok'))
  let done = false
  stopAccepting(server, () => { done = true })
  t.notOk(server.listening, 'no longer listening')
  const refused = connect({ host: '127.0.0.1', port })
  const [error] = await once(refused, 'error') as [NodeJS.ErrnoException]
  t.equal(error.code, 'ECONNREFUSED', 'a new connection is refused')
  idle.socket.write(REQUEST)
  t.ok(await until(() => idle.received().split('HTTP/1.1 200').length === 3), 'the idle connection still gets its answer')
  t.notOk(done, 'not done while a connection is open')
  idle.socket.destroy()
  t.ok(await until(() => done), 'done once it has ended')
})

/**
 * The connections' one owner (src/connections.ts), driven without a network: a server and its
 * sockets are event emitters that say what Node's would. Also the fd limit read at start-up.
 */
import { EventEmitter } from 'node:events'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { Duplex } from 'node:stream'
import t from 'tap'
import { Connections, MAX_WAITING_PER_CONNECTION, type ListenerOptions } from '../../src/connections.js'
import { FALLBACK_FD_LIMIT, openFileLimit } from '../../src/fd-limit.js'

/** What a listener's log received. */
function recordingLog () {
  const lines: string[] = []
  return { lines, info (_: object, msg: string) { lines.push(msg) }, warn (_: object, msg: string) { lines.push(msg) } }
}

/** An `http.Server` as far as `attach` reads it, with the handler given to `createServer`. */
function fakeServer (handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const server = Object.assign(new EventEmitter(), { keepAliveTimeout: 72_000, maxConnections: 0, timeout: 0, setTimeout (ms: number) { server.timeout = ms } })
  server.on('request', handler)
  return server
}

/** A client's socket from `remoteAddress`, accepted by `server`. */
function accept (server: EventEmitter, remoteAddress: string) {
  const socket = Object.assign(new Duplex({ read () {}, write (chunk, encoding, done) { done() } }), { remoteAddress, setTimeout () {} })
  server.emit('connection', socket)
  return socket as unknown as Socket
}

/** A request on `socket`, and its response, which closes when the test says. */
function exchange (server: EventEmitter, socket: Socket) {
  const req = { socket } as IncomingMessage
  const res = new EventEmitter() as ServerResponse
  server.emit('request', req, res)
  return { req, res }
}

const BOUNDS: ListenerOptions = { bounds: { max: 3, maxPerAddress: 2, hardCap: 5, names: { max: 'MAX', maxPerAddress: 'PER' } } }

function attached (options = BOUNDS) {
  const handled: IncomingMessage[] = []
  const server = fakeServer((req) => { handled.push(req) })
  const log = recordingLog()
  const connections = new Connections(log)
  t.teardown(() => { connections.close() })
  connections.attach(server as unknown as Server, options)
  return { server, connections, handled, log }
}

t.test('a connection over the bound per address is refused 429, over the total 503; neither is counted; a closed one frees its place', async (t) => {
  const { server, connections, log } = attached()
  const [a1, a2, a3] = [accept(server, '10.0.0.1'), accept(server, '10.0.0.1'), accept(server, '10.0.0.1')]
  t.equal(server.maxConnections, 5, 'Node drops past the hard cap')
  t.equal(connections.refusedStatus(a1), undefined)
  t.equal(connections.refusedStatus(a2), undefined)
  t.equal(connections.refusedStatus(a3), 429, 'the third from one address')
  const b1 = accept(server, '10.0.0.2')
  t.equal(connections.refusedStatus(b1), undefined, 'another address, the third counted')
  t.equal(connections.refusedStatus(accept(server, '10.0.0.3')), 503, 'the fourth: over the total')
  t.equal(connections.refusedStatus(accept(server, '10.0.0.4')), 503, 'a refused one took no place')
  t.strictSame(log.lines, ['connection over PER: answered 429 and closed', 'connection over MAX: answered 503 and closed', 'connection over MAX: answered 503 and closed'], 'once per address')
  a1.destroy()
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(connections.refusedStatus(accept(server, '10.0.0.1')), undefined, 'a closed one frees its place and its address\'s')
})

t.test('two owners share nothing: the connections of one count against its bounds alone', async (t) => {
  const one = attached()
  const other = attached()
  for (const address of ['10.0.0.1', '10.0.0.1']) accept(one.server, address)
  t.equal(one.connections.refusedStatus(accept(one.server, '10.0.0.1')), 429, 'one has the address\'s bound taken')
  accept(one.server, '10.0.0.2')
  t.equal(one.connections.refusedStatus(accept(one.server, '10.0.0.3')), 503, 'and its total')
  t.equal(other.connections.refusedStatus(accept(other.server, '10.0.0.1')), undefined, 'the other has neither')
})

t.test(`a connection's requests reach the app one at a time, ${MAX_WAITING_PER_CONNECTION} waiting at most; past that it ends after their answers`, async (t) => {
  const { server, handled } = attached()
  const socket = accept(server, '10.0.0.1')
  const exchanges = Array.from({ length: MAX_WAITING_PER_CONNECTION + 2 }, () => exchange(server, socket))
  t.equal(handled.length, 1, 'only the first is in hand')
  t.ok(socket.isPaused(), 'and the socket is not read while others wait')
  for (let i = 0; i <= MAX_WAITING_PER_CONNECTION; i++) {
    t.equal(handled[i], exchanges[i]!.req, `request ${i + 1} in hand`)
    exchanges[i]!.res.emit('close')
  }
  t.equal(handled.length, 1 + MAX_WAITING_PER_CONNECTION, 'the one past the bound never reaches the app')
  t.ok(socket.writableEnded, 'the connection ends after the last answer')
})

t.test('a connection that closes drops what waited on it', async (t) => {
  const { server, handled } = attached()
  const socket = accept(server, '10.0.0.1')
  const first = exchange(server, socket)
  exchange(server, socket)
  socket.destroy()
  await new Promise((resolve) => setImmediate(resolve))
  first.res.emit('close')
  t.equal(handled.length, 1, 'the waiting request never reaches the app')
})

t.test('closeLingering ends the socket, reads on until the client closes its side, then destroys it', async (t) => {
  const { server, connections } = attached()
  const socket = accept(server, '10.0.0.1')
  t.notOk(connections.isLingering(socket))
  socket.destroySoon()
  t.ok(connections.isLingering(socket), 'Node\'s close after a response closes lingering')
  t.ok(socket.writableEnded && !socket.destroyed, 'ended, still read')
  socket.push(null)
  await new Promise((resolve) => socket.once('close', resolve))
  t.ok(socket.destroyed, 'destroyed once the client closed its side')
})

t.test('the send timeout is set on the server, and its connections\' is shortened by the drain only when bytes wait on the client', async (t) => {
  const { server, connections } = attached({ ...BOUNDS, sendTimeoutMs: 30_000 })
  t.equal(server.timeout, 30_000)
  const waiting = accept(server, '10.0.0.1')
  const idle = accept(server, '10.0.0.2')
  Object.defineProperty(waiting, 'writableLength', { value: 10 })
  connections.drain()
  t.equal(connections.sendTimeoutOf(waiting), 1000, 'bytes wait: the drain\'s')
  t.equal(connections.sendTimeoutOf(idle), 30_000, 'nothing waits: its own')
})

t.test('openFileLimit reads the soft limit from /proc/self/limits, else assumes the fallback', async (t) => {
  const limits = 'Limit                     Soft Limit           Hard Limit           Units\n' +
    'Max processes             63704                63704                processes\n' +
    'Max open files            20000                524288               files\n'
  t.equal(openFileLimit(limits), 20000, 'the soft limit, not the hard one')
  t.equal(openFileLimit(null), FALLBACK_FD_LIMIT, 'nothing to read: the fallback')
  t.equal(openFileLimit('Max processes 1 1 processes\n'), FALLBACK_FD_LIMIT, 'no such line: the fallback')
})

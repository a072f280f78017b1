/**
 * The two things the connection layer (src/connections.ts) needs from Node's HTTP server that
 * Node offers no supported way for, each in one function. test/unit/node-internals.test.ts
 * checks on a real server that each still works as assumed, so that the Node release that
 * changes either fails there, by name, rather than as a reset or a hung shutdown elsewhere.
 */
import type { Server } from 'node:http'
import { Server as NetServer, type Socket } from 'node:net'

/**
 * Makes `close` what Node's HTTP server does to `socket` when it ends it after a response
 * (`Connection: close`, HTTP/1.0, a response to a request Node refuses): Node calls the socket's
 * `destroySoon` (end, then destroy once the answer is written). Node has no option for this;
 * the method is replaced on this one socket.
 */
export function onServerEnd (socket: Socket, close: () => void) {
  socket.destroySoon = close
}

/**
 * Stops `server` accepting connections and leaves the open ones alone; `done` runs once the last
 * of them has ended. `http.Server#close` would also close every idle keep-alive connection at
 * once (Node 19 on): `net.Server#close`, which it calls after that, does only this.
 */
export function stopAccepting (server: Server, done: () => void) {
  NetServer.prototype.close.call(server, done)
}

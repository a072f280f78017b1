/**
 * Adds a listener on the server's `connection` event, so that every connection Node's HTTP server
 * ends after a response (`Connection: close`: a 413, a refused connection, the drain of a
 * shutdown, HTTP/1.0) is closed lingering (`lingeringClose`, below): Node's own close after such
 * a response (`destroySoon`: end, then destroy as soon as the answer is written) is what resets a
 * client still writing its body. Node has no option for this; its socket method is replaced per
 * connection, as Node itself once considered for TLS (nodejs/node#36205).
 */
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import fp from 'fastify-plugin'

/** How long a connection the server has ended is still read, its bytes discarded. */
export const LINGER_MS = 5000
/** How much of it is read at most: a client sending faster than that is cut off sooner. */
export const LINGER_MAX_BYTES = 8 * 1024 * 1024

/** How often the bytes read while lingering are looked at. */
const LINGER_CHECK_MS = 100

/** Each lingering socket with the `bytesRead` past which it is closed. */
const lingering = new Map<Duplex, number>()
/** One meter for all of them, running while there are any. */
let meter: NodeJS.Timeout | undefined

function bytesRead (socket: Duplex): number {
  return (socket as Partial<Socket>).bytesRead ?? 0
}

function measure () {
  for (const [socket, limit] of lingering) {
    if (bytesRead(socket) > limit) socket.destroy()
  }
}

/** Whether `socket` is being closed by `lingeringClose`: whatever else happens on it is moot. */
export function isLingering (socket: Duplex): boolean {
  return lingering.has(socket)
}

/**
 * Closes a connection the server is done with without resetting it under a client that is still
 * sending (RFC 9112 section 9.6): the answer already written goes out followed by our FIN, then
 * what the client still sends (the rest of a body too large, a request answered before it was
 * read) is read and discarded until the client closes its side, for LINGER_MS and
 * LINGER_MAX_BYTES at most. Closing at once instead would make the kernel answer those bytes
 * with a reset, which can destroy the answer before the client has read it (an EPIPE or
 * ECONNRESET instead of the 413).
 */
export function lingeringClose (socket: Duplex) {
  if (socket.destroyed || lingering.has(socket)) return
  lingering.set(socket, bytesRead(socket) + LINGER_MAX_BYTES)
  meter ??= setInterval(measure, LINGER_CHECK_MS).unref()
  socket.end()
  const timer = setTimeout(() => socket.destroy(), LINGER_MS)
  socket.on('error', () => {})
  socket.once('end', () => socket.destroy())
  socket.once('close', () => {
    clearTimeout(timer)
    lingering.delete(socket)
    if (lingering.size === 0) {
      clearInterval(meter)
      meter = undefined
    }
  })
  // No 'data' listener: it would take the socket from Node's HTTP parser, which reads on and
  // discards a body nobody reads; resuming restarts reading wherever it was paused (a body not
  // read yet), and without a listener the bytes of a socket no parser reads are dropped
  socket.resume()
}

export default fp(async function lingeringClosePlugin (fastify) {
  fastify.server.on('connection', (socket: Socket) => {
    socket.destroySoon = () => lingeringClose(socket)
  })
}, { name: 'lingering-close' })

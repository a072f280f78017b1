/**
 * The requests a client pipelines on one connection reach the app one after another, and only
 * so many may wait: `inTurn` wraps the handler of an `http.Server` (Fastify's, through the
 * `serverFactory` of src/app.ts; the admin listener's).
 *
 * Node's HTTP server reads a connection on as long as no answer is waiting to be written, and
 * hands every request it parses to the app at once (it answers them in order). A request that
 * waits on the database (a listing) has written nothing yet, so a client that pipelined
 * thousands of them and read nothing had them all read from the database and held in memory
 * (two connections: 475 MB). Here a connection has one request in hand at a time: the next
 * reaches the app once the answer before it has been handed to the kernel, and while a request
 * waits the socket is not read. Node still parses what it has already read (64 KB at once): up
 * to MAX_WAITING_PER_CONNECTION of those wait their turn, as Node's request and response
 * objects only (Fastify has made nothing for them yet). A connection that had more is ended
 * once the answers to those have gone out, and the requests after them never reach the app:
 * the client sends them again on a new connection, as RFC 9112 section 9.3.2 has a client do
 * with the requests a connection closed before answering. A connection that ends otherwise (the
 * client left, a send timeout, an answer with `Connection: close`) drops whatever waited on it,
 * and what Node still parses from it never reaches the app.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

/**
 * Requests of one connection that may wait behind the one it has in hand. Small: what a
 * connection that reads nothing costs is mostly the answers the kernel's buffers still take
 * (256 such connections of listings peaked at 777 MiB with 32, about 380 MiB with 4).
 */
export const MAX_WAITING_PER_CONNECTION = 4
/**
 * How long a connection that had too many stays open after its last answer, for its client to
 * read it, unless the client closes first. It is not read meanwhile: Node would parse what it
 * reads into yet more requests.
 */
export const OVERFLOW_END_MS = 5000

interface Line {
  /** Whether a request of this connection is in hand: from reaching the app to its answer. */
  busy: boolean
  /** The requests after it, each handed to the app in turn. */
  waiting: Array<() => void>
  /** More came than may wait: those in hand and waiting are answered, then the connection ends. */
  overflowed: boolean
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void

const lines = new WeakMap<Socket, Line>()

function lineOf (socket: Socket): Line {
  const known = lines.get(socket)
  if (known !== undefined) return known
  const line: Line = { busy: false, waiting: [], overflowed: false }
  lines.set(socket, line)
  // Node resumes the reading after every request it parses and every answer; while requests
  // wait, it stays paused. Node's own listener (which restarts the reading) has run by now.
  socket.on('resume', () => {
    if (line.waiting.length > 0 || line.overflowed) socket.pause()
  })
  socket.once('close', () => { line.waiting = [] })
  return line
}

/** The answer to the request `line` had in hand is out: the next one reaches the app. */
function next (line: Line, socket: Socket) {
  line.busy = false
  if (!socket.writable) {
    line.waiting = []
    return
  }
  line.waiting.shift()?.()
  if (line.overflowed) {
    if (!line.busy) endAfterLastAnswer(socket)
  } else if (line.waiting.length === 0 && socket.isPaused()) {
    socket.resume()
  }
}

/** The client reads what it was sent, then the end; the connection is gone OVERFLOW_END_MS later. */
function endAfterLastAnswer (socket: Socket) {
  socket.end()
  const timer = setTimeout(() => socket.destroy(), OVERFLOW_END_MS).unref()
  socket.once('close', () => clearTimeout(timer))
}

function handle (line: Line, handler: Handler, req: IncomingMessage, res: ServerResponse) {
  line.busy = true
  const { socket } = req
  // `on`, not `once`: a response closes once, and `once` wraps and removes on every request
  res.on('close', () => next(line, socket))
  handler(req, res)
}

/** `handler`, given each connection's requests one after another (see above). */
export function inTurn (handler: Handler): Handler {
  return function (req, res) {
    const line = lineOf(req.socket)
    // Parsed from what a connection that is closing still sends (after an answer that said
    // `Connection: close`, while it is read and discarded): nobody can read an answer to it
    if (line.overflowed || !req.socket.writable) return
    if (!line.busy) return handle(line, handler, req, res)
    req.socket.pause()
    if (line.waiting.length < MAX_WAITING_PER_CONNECTION) {
      line.waiting.push(() => handle(line, handler, req, res))
    } else {
      line.overflowed = true
    }
  }
}

import type { PGlite } from '@electric-sql/pglite'
import { PGLiteSocketServer } from '@electric-sql/pglite-socket'

/**
 * PGlite served on a loopback port by pglite-socket, as the embedded store serves it
 * (src/db/embedded-worker.ts), with `COPY ... FROM STDIN` working.
 *
 * pglite-socket hands PGlite each message of the wire protocol in a call of its own, and PGlite
 * runs a COPY's statement only with its data in the same call: a COPY started in one call cannot
 * take the CopyData of the next, and the connection loses its synchronization. So the server is
 * given PGlite behind `withCopyFromStdin`: a simple query that is a `COPY <table> [(columns)]
 * FROM STDIN` is answered at once with the CopyInResponse the client waits for, its CopyData are
 * held, and at CopyDone (or CopyFail) the statement and its data go to PGlite in one call, whose
 * own CopyInResponse is dropped from the answer. Until then the copy counts as an open
 * transaction, so pglite-socket serves no other connection in between (it runs one connection's
 * transaction before the others' queries).
 *
 * What it does not do: the data of one COPY are held in memory until its end (the service's
 * imports send theirs in statements of a few MiB); a COPY through the extended protocol, or
 * inside a multi-statement query, is not recognized and fails as before; an error of the
 * statement itself (a missing table) comes after its data were sent, as the client's answer to
 * CopyDone. The CopyInResponse sent at once names no columns (clients of the text and CSV
 * formats do not read them).
 */

// `COPY name [. name] [(column, ...)] FROM STDIN`, names bare or quoted; not `COPY (query) TO`
const NAME = String.raw`(?:[\w$]+|"(?:[^"]|"")*")`
const COPY_FROM_STDIN = new RegExp(String.raw`^\s*copy\s+${NAME}(?:\s*\.\s*${NAME})*\s*(?:\((?:[^()"]|"(?:[^"]|"")*")*\))?\s*from\s+stdin\b`, 'i')
const BINARY = /\bbinary\b/i

const QUERY = 0x51 // 'Q'
const COPY_IN_RESPONSE = 0x47 // 'G'
// Messages the backend takes while a copy-in lasts without ending it: CopyData, Flush, Sync
const CONTINUES_COPY = new Set([0x64, 0x48, 0x53])
// Messages PostgreSQL may send before a statement's first answer: NoticeResponse, ParameterStatus
const ASIDE = new Set([0x4e, 0x53])

/** The text of a simple query message: type, length, then the text ended by a zero byte. */
const queryText = (message: Uint8Array) => Buffer.from(message.buffer, message.byteOffset + 5, message.length - 6).toString()

/** CopyInResponse with an overall format (0 text, 1 binary) and no column. */
function copyInResponse (format: number): Buffer {
  const response = Buffer.alloc(8)
  response[0] = COPY_IN_RESPONSE
  response.writeInt32BE(7, 1)
  response.writeInt8(format, 5)
  response.writeInt16BE(0, 6)
  return response
}

/**
 * `onRawData` without the first CopyInResponse among the answer's leading messages, whichever
 * way PGlite cuts the answer into chunks.
 */
function withoutCopyInResponse (onRawData: (data: Uint8Array) => void) {
  let held = Buffer.alloc(0)
  let looking = true
  return (data: Uint8Array) => {
    if (!looking) return onRawData(data)
    held = Buffer.concat([held, data])
    while (looking && held.length >= 5) {
      const length = 1 + held.readInt32BE(1)
      if (held.length < length) return
      const type = held[0]!
      if (type === COPY_IN_RESPONSE) {
        held = held.subarray(length)
        looking = false
      } else if (ASIDE.has(type)) {
        onRawData(held.subarray(0, length))
        held = held.subarray(length)
      } else {
        looking = false
      }
    }
    if (!looking && held.length > 0) {
      onRawData(held)
      held = Buffer.alloc(0)
    }
  }
}

/**
 * `db` for pglite-socket, with `COPY ... FROM STDIN` (above). A Proxy, so that everything else
 * is PGlite's own; its methods are bound to PGlite itself, whose private fields a Proxy as `this`
 * cannot reach.
 */
function withCopyFromStdin (db: PGlite): PGlite {
  // The copy being received: its query, then what came after it
  let copy: Uint8Array[] | undefined

  const execProtocolRawStream: PGlite['execProtocolRawStream'] = async (message, options) => {
    if (copy !== undefined) {
      copy.push(message)
      if (CONTINUES_COPY.has(message[0]!)) return
      const whole = Buffer.concat(copy)
      copy = undefined
      return db.execProtocolRawStream(whole, { ...options, onRawData: withoutCopyInResponse(options.onRawData) })
    }
    // Never a throw from here: pglite-socket's queue stops for every connection after one
    if (message[0] === QUERY && message.length >= 6) {
      const text = queryText(message)
      const statement = COPY_FROM_STDIN.exec(text)
      if (statement !== null) {
        copy = [message]
        options.onRawData(copyInResponse(BINARY.test(text.slice(statement[0].length)) ? 1 : 0))
        return
      }
    }
    return db.execProtocolRawStream(message, options)
  }

  return new Proxy(db, {
    get (target, property) {
      if (property === 'execProtocolRawStream') return execProtocolRawStream
      // pglite-socket serves only this connection while it is true
      if (property === 'isInTransaction') return () => copy !== undefined || target.isInTransaction()
      // pglite-socket calls it only to roll back what a departed connection left open: a copy
      // it was sending ends with it
      if (property === 'exec') {
        return (...args: Parameters<PGlite['exec']>) => {
          copy = undefined
          return target.exec(...args)
        }
      }
      const value: unknown = Reflect.get(target, property, target)
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
}

/** Connections at once: the service's pool, its imports' pool, its health checks and a few tools. */
const MAX_CONNECTIONS = 16

/** PGlite served on a loopback port of the system's choosing. */
export async function serveOnLoopback (db: PGlite): Promise<{ server: PGLiteSocketServer, port: number }> {
  const server = new PGLiteSocketServer({ db: withCopyFromStdin(db), host: '127.0.0.1', port: 0, maxConnections: MAX_CONNECTIONS })
  await server.start()
  const [, port] = server.getServerConn().split(':')
  return { server, port: Number(port) }
}

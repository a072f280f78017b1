import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { Message, failure, type MessageText } from './envelope.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The 400 message for a body this route cannot parse (SPEC.md names one per endpoint). */
    invalidBodyMessage?: MessageText
  }
}

/** A failure whose status and client-facing text are known where it is raised. */
export class ApiError extends Error {
  constructor (readonly statusCode: number, override readonly message: MessageText) {
    super(message)
  }
}

/** Texts for the 4xx errors Fastify raises itself, before a route handler runs. */
const frameworkMessages: Record<number, MessageText> = {
  404: Message.RouteNotFound,
  405: Message.MethodNotAllowed,
  408: Message.RequestTimeout,
  413: Message.PayloadTooLarge,
  415: Message.UnsupportedMediaType,
  417: Message.ExpectationFailed,
  431: Message.HeadersTooLarge
}

/**
 * SQLSTATE classes and socket codes that mean "the database cannot serve us right now", as
 * opposed to a bug in a query: 08 connection exception, 53 insufficient resources, 57P0x
 * operator intervention (shutdown, terminated backend), 57014 statement timeout, and what a
 * new connection can be refused with: 55000 (database not accepting connections), 3D000
 * (database gone), 28 (credentials no longer accepted).
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|57P0|57014|55000|3D000|28)/
const UNAVAILABLE_SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EPIPE'])
// node-postgres raises these without a code when a connection dies, cannot be made in time (pool
// or client) or stops answering (query_timeout)
const UNAVAILABLE_POOL_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|timeout expired$|Client has encountered a connection error|Query read timeout)/

export function isDatabaseUnavailable (error: { code?: string, message?: string }): boolean {
  const code = error.code ?? ''
  return UNAVAILABLE_SQLSTATE.test(code) ||
    UNAVAILABLE_SOCKET_CODES.has(code) ||
    UNAVAILABLE_POOL_MESSAGES.test(error.message ?? '')
}

/**
 * The one error handler: every failure leaves as an envelope. 4xx keep their status with a
 * fixed text; anything else is logged with its cause and answered with a generic 5xx, so no
 * stack, SQL or driver text reaches a client.
 */
export function errorHandler (error: FastifyError | ApiError, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof ApiError) {
    return reply.code(error.statusCode).send(failure(error.statusCode, error.message))
  }
  const status = error.statusCode ?? 500
  if (status >= 400 && status < 500) {
    const message = status === 400
      ? request.routeOptions.config.invalidBodyMessage ?? Message.BadRequest
      : frameworkMessages[status] ?? Message.BadRequest
    return reply.code(status).send(failure(status, message))
  }
  if (isDatabaseUnavailable(error)) {
    request.log.error({ err: error }, 'database unavailable')
    return reply.code(503).send(failure(503, Message.ServiceUnavailable))
  }
  request.log.error({ err: error }, 'request failed')
  return reply.code(500).send(failure(500, Message.InternalServerError))
}

/**
 * Answers in the envelope on the raw socket, then closes it: for requests Node's HTTP server
 * handles itself, before or instead of Fastify.
 */
export function endSocketWithEnvelope (socket: Duplex, status: number, headers = '') {
  const body = JSON.stringify(failure(status, frameworkMessages[status] ?? Message.BadRequest))
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\n' +
      'X-Content-Type-Options: nosniff\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n${headers}` +
      `Connection: close\r\n\r\n${body}`)
  }
  socket.destroy()
}

/** Requests Node's HTTP parser rejects: oversized headers, bad syntax, timeouts. */
export function clientErrorHandler (error: NodeJS.ErrnoException, socket: Socket) {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const status = error.code === 'HPE_HEADER_OVERFLOW'
    ? 431
    : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400
  endSocketWithEnvelope(socket, status)
}

import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { isDatabaseUnavailable } from './db/unavailable.js'
import { Message, failure, statusMessage, type MessageText } from './envelope.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The 400 message for a body this route cannot parse (the contract names one per endpoint). */
    invalidBodyMessage?: MessageText
  }
}

/** A failure whose status and client-facing text are known where it is raised. */
export class ApiError extends Error {
  constructor (readonly statusCode: number, override readonly message: MessageText) {
    super(message)
  }
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
      : statusMessage(status)
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
 * The error handler of the routes that serve files (/docs/static/*, /console/*): a path `send`
 * refuses to serve (`..`, encoded or not, a backslash variant, a NUL, an absolute path after
 * `//`) is a 403 from @fastify/static, which is answered as a missing file is, `404 Route not
 * found`, telling nothing of how the path was refused.
 */
export function refusedPathIsNotFound (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  if (error.statusCode === 403) return reply.callNotFound()
  return errorHandler(error, request, reply)
}

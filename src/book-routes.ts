/**
 * What the book routes (routes/books.ts, routes/listing.ts) share: the parts of their OpenAPI
 * descriptions that are the same for each, the guard every one of them runs first, and how an
 * answer whose JSON is already written is sent.
 */
import type { Readable } from 'node:stream'
import type { FastifyInstance, FastifyReply } from 'fastify'
import { ApiError } from './errors.js'
import { Message } from './envelope.js'

/** For the OpenAPI document (the route schemas are its only source). */
export const EXAMPLE_BOOK = { id: 1, title: 'Dune', author: 'Frank Herbert', year: 1965 }
export const documented = { tags: ['books'], security: [{ token: [] }] }
// Every book route answers Bad request to an HTTP/1.1 request without Host, 401 to a missing or
// bad token, 500 and 503 when the database fails or cannot be reached; those with a body more
export const BAD_REQUEST = [Message.BadRequest] as const
export const EVERY_ROUTE = {
  401: [Message.AuthorizationRequired, Message.InvalidToken],
  500: [Message.InternalServerError],
  503: [Message.ServiceUnavailable]
} as const
export const WITH_BODY = { 413: [Message.PayloadTooLarge], 415: [Message.UnsupportedMediaType] } as const
/** A query string or header its schema rejects: the contract's `Invalid input`. */
export const invalidQuery = () => new ApiError(400, Message.InvalidInput)

/**
 * Guards every route the calling plugin registers after it: the API's limit per client first
 * (with API_RATE_LIMIT), so that a limited client costs not even a token's verification, then
 * the token. Answers the 429 the OpenAPI document lists for the routes when the limit is on.
 */
export function guardBookRoutes (fastify: FastifyInstance) {
  const { apiLimit, authenticate } = fastify
  if (apiLimit !== null) fastify.addHook('onRequest', apiLimit)
  fastify.addHook('onRequest', authenticate)
  return apiLimit === null ? {} : { 429: [Message.TooManyRequests] } as const
}

/**
 * Sends an envelope whose JSON is already written (PostgreSQL wrote the books' part), as a
 * string or a stream. The type provider types `send` by the route's response schema, for the
 * objects it serializes itself; a body written beforehand is sent as it is.
 */
export function sendWrittenJson (reply: FastifyReply, json: string | Readable) {
  return reply.type('application/json; charset=utf-8').send(json as never)
}

import { STATUS_CODES } from 'node:http'
import { Type, type SchemaOptions, type Static, type TNull, type TSchema } from '@sinclair/typebox'

/**
 * Every text a client can read in `message`, in one place. The first group is fixed word for word
 * by the contract; the second covers what the contract leaves open (both in docs/api.md).
 */
export const Message = {
  TokenGenerated: 'Token generated successfully',
  InvalidRequestPayload: 'Invalid request payload',
  InvalidCredentials: 'Invalid credentials',
  CouldNotGenerateToken: 'Could not generate token',
  BookCreated: 'Book created successfully',
  BooksRetrieved: 'Books retrieved successfully',
  BookRetrieved: 'Book retrieved successfully',
  BookUpdated: 'Book updated successfully',
  BookDeleted: 'Book deleted successfully',
  InvalidInput: 'Invalid input',
  BookNotFound: 'Book not found',
  AuthorizationRequired: 'Authorization token required',
  InvalidToken: 'Invalid token',

  BadRequest: 'Bad request',
  RouteNotFound: 'Route not found',
  MethodNotAllowed: 'Method not allowed',
  RequestTimeout: 'Request timeout',
  PayloadTooLarge: 'Payload too large',
  TooManyRequests: 'Too many requests',
  TooManyConnectionsFromAddress: 'Too many connections from this address',
  TooManyConnections: 'Too many connections',
  UnsupportedMediaType: 'Unsupported media type',
  ExpectationFailed: 'Expectation failed',
  IdempotencyKeyInProgress: 'A request with this idempotency key is in progress',
  IdempotencyKeyReused: 'Idempotency key already used with a different body',
  PreconditionFailed: 'Precondition failed',
  ListingTooCostly: 'Listing too costly: narrow or change its filters',
  BooksImported: 'Books imported',
  ImportChecked: 'Import checked',
  InvalidImport: 'Invalid import: send it with ?dry_run=true for the lines refused',
  TooManyImports: 'Too many imports at once',
  HeadersTooLarge: 'Request header fields too large',
  HttpVersionNotSupported: 'HTTP version not supported',
  InternalServerError: 'Internal server error',
  ServiceUnavailable: 'Service unavailable',
  ServiceLive: 'Service is live',
  ServiceReady: 'Service is ready'
} as const

export type MessageText = typeof Message[keyof typeof Message]

/**
 * The text of each 4xx that Fastify or Node's HTTP layer raises by itself, before or instead of a
 * route: the message table of the HTTP edge (plugins/app/http-edge.ts) and of the error handler.
 */
const STATUS_MESSAGES: Readonly<Record<number, MessageText>> = {
  404: Message.RouteNotFound,
  405: Message.MethodNotAllowed,
  408: Message.RequestTimeout,
  413: Message.PayloadTooLarge,
  415: Message.UnsupportedMediaType,
  417: Message.ExpectationFailed,
  431: Message.HeadersTooLarge,
  505: Message.HttpVersionNotSupported
}

/** The message for such a status; any other is a plain `Bad request`. */
export function statusMessage (status: number): MessageText {
  return STATUS_MESSAGES[status] ?? Message.BadRequest
}

export interface Envelope<T> {
  status: number
  message: string
  data: T
}

export function envelope<T> (status: number, message: MessageText, data: T): Envelope<T> {
  return { status, message, data }
}

export function failure (status: number, message: MessageText): Envelope<null> {
  return { status, message, data: null }
}

/** Response schema of an envelope around `data`; also drives the fast serializer. */
export function EnvelopeSchema<T extends TSchema> (data: T, options?: SchemaOptions) {
  return Type.Object({
    status: Type.Integer(),
    message: Type.String(),
    data
  }, options)
}

/** The type of every error's schema: the envelope with `data: null`. */
type ErrorEnvelopeSchema = ReturnType<typeof EnvelopeSchema<TNull>>

/**
 * Named examples for the OpenAPI document, one per message. @fastify/swagger moves `x-examples`
 * to the response's media type and `x-response-description` to the response; the serializer
 * ignores both.
 */
function examples (status: number, messages: readonly MessageText[], data: unknown) {
  return Object.fromEntries(messages.map((message) => [message, { value: envelope(status, message, data) }]))
}

/**
 * The response schema of a route's success: its one message, `example` as the data, and the
 * response headers it documents (@fastify/swagger reads `headers`; the serializer ignores it).
 */
export function SuccessSchema<T extends TSchema> (status: number, message: MessageText, data: T, example: Static<T>, headers?: Record<string, unknown>) {
  return EnvelopeSchema(data, {
    'x-response-description': message,
    'x-examples': examples(status, [message], example),
    ...(headers === undefined ? {} : { headers })
  })
}

type FailureStatus = 400 | 401 | 404 | 409 | 412 | 413 | 415 | 422 | 429 | 500 | 503

/**
 * The response schemas of a route's failures, from each status it can answer to the messages it
 * sends with it. Every status is explicit (no `4xx`): the OpenAPI document lists exactly these.
 * A status missing here is still sent in the same envelope, by the default serializer.
 */
export function failureSchemas<const F extends Partial<Record<FailureStatus, readonly MessageText[]>>> (failures: F) {
  return Object.fromEntries(Object.entries(failures).map(([code, messages]) => {
    const status = Number(code)
    return [status, EnvelopeSchema(Type.Null(), {
      'x-response-description': `${STATUS_CODES[status]}: ${messages.join(', ')}`,
      'x-examples': examples(status, messages, null)
    })]
  })) as { [S in keyof F]: ErrorEnvelopeSchema }
}

import { Type, type TSchema } from '@sinclair/typebox'

/**
 * Every text a client can read in `message`, in one place. The first group is fixed word for word
 * by SPEC.md; the second covers what the spec leaves open (see the README).
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
  UnsupportedMediaType: 'Unsupported media type',
  ExpectationFailed: 'Expectation failed',
  HeadersTooLarge: 'Request header fields too large',
  InternalServerError: 'Internal server error',
  ServiceUnavailable: 'Service unavailable'
} as const

export type MessageText = typeof Message[keyof typeof Message]

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
export function EnvelopeSchema<T extends TSchema> (data: T) {
  return Type.Object({
    status: Type.Integer(),
    message: Type.String(),
    data
  })
}

export const ErrorEnvelopeSchema = EnvelopeSchema(Type.Null())

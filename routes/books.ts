/**
 * The routes of one book: `POST /book`, and `GET`, `PUT` and `DELETE /book/<id>` (the listing is
 * routes/listing.ts).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { BAD_REQUEST, EVERY_ROUTE, EXAMPLE_BOOK, WITH_BODY, documented, guardBookRoutes } from '../src/book-routes.js'
import { FIRST_VERSION, acceptedVersions, entityTag, noneMatchHolds, parseTagCondition, type TagCondition } from '../src/entity-tags.js'
import { Message, SuccessSchema, envelope, failureSchemas } from '../src/envelope.js'
import { ApiError, errorHandler } from '../src/errors.js'
import { BookCreateSchema, BookParamsSchema, BookPatchSchema, BookSchema, isBookId } from '../src/schemas/book.js'
import { IdempotencyKeyHeaderSchema, idempotencyKey } from '../src/schemas/idempotency-key.js'

const invalidInput = { invalidBodyMessage: Message.InvalidInput }

const ETAG_HEADER = { ETag: { type: 'string', description: 'The book\'s entity tag, strong; it changes whenever the book does' } }
const IF_MATCH = Type.Object({
  'if-match': Type.Optional(Type.String({
    description: 'Only if the book\'s current ETag is one of these (strong comparison), or * for any existing book; otherwise 412 and nothing changes'
  }))
})
/** The failures of PUT and DELETE /book/<id>, which take an `If-Match`. */
const CONDITIONAL_WRITE_FAILURES = {
  ...EVERY_ROUTE,
  ...WITH_BODY,
  400: [Message.InvalidInput, ...BAD_REQUEST],
  404: [Message.BookNotFound],
  412: [Message.PreconditionFailed]
} as const
/**
 * `onRequest` of the `/book/:id` routes, after authentication: an id no book can have is
 * answered 404 before the body is read and without a query.
 */
const requireBookId: onRequestHookHandler = function (request, reply, done) {
  const { id } = request.params as { id: string }
  done(isBookId(id) ? undefined : new ApiError(404, Message.BookNotFound))
}

/**
 * A conditional header as the route's book needs it; a malformed one is `Invalid input`, unless
 * the book is missing, which is answered `404` whatever the header says.
 */
async function tagCondition (value: string | undefined, id: string, repository: FastifyInstance['booksRepository']): Promise<TagCondition | undefined> {
  const condition = parseTagCondition(value)
  if (condition !== null) return condition
  throw await repository.exists(id) ? new ApiError(400, Message.InvalidInput) : new ApiError(404, Message.BookNotFound)
}

/** A write's outcome, or the failure a missing book (404) or an `If-Match` that failed (412) is. */
function throwIfRefused<T> (outcome: T | 'missing' | 'mismatch'): T {
  if (outcome === 'missing') throw new ApiError(404, Message.BookNotFound)
  if (outcome === 'mismatch') throw new ApiError(412, Message.PreconditionFailed)
  return outcome
}

const books: FastifyPluginAsyncTypebox = async (fastify) => {
  const { booksRepository } = fastify
  // The limit and the token first, on exactly these routes; with API_RATE_LIMIT every route
  // may also answer 429, and the OpenAPI document says so
  const limited = guardBookRoutes(fastify)

  /** The versions of book `id` an `If-Match` allows a write on; null without one, or for `*`. */
  async function ifMatchVersions (value: string | undefined, id: string): Promise<number[] | null> {
    const condition = await tagCondition(value, id, booksRepository)
    return condition === undefined ? null : acceptedVersions(condition, id)
  }

  /**
   * The error handler of PUT: the contract looks the book up before it parses the body, so a
   * body error is answered only for a book that exists, and a missing book is 404 whatever its
   * body. Looking up only on a body error gives every answer the same as looking up first, and
   * saves a query on every good request: the UPDATE finds a missing book itself.
   */
  async function missingBookBeforeBadBody (error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
    const bodyError = !(error instanceof ApiError) && [400, 413, 415].includes(error.statusCode ?? 0)
    if (bodyError && !await booksRepository.exists((request.params as { id: string }).id)) {
      return errorHandler(new ApiError(404, Message.BookNotFound), request, reply)
    }
    return errorHandler(error, request, reply)
  }

  fastify.post('/book', {
    config: invalidInput,
    schema: {
      ...documented,
      summary: 'Create a book',
      operationId: 'createBook',
      headers: Type.Object({ 'idempotency-key': Type.Optional(IdempotencyKeyHeaderSchema) }),
      body: BookCreateSchema,
      response: {
        201: SuccessSchema(201, Message.BookCreated, BookSchema, EXAMPLE_BOOK, ETAG_HEADER),
        ...failureSchemas({
          ...EVERY_ROUTE,
          ...limited,
          ...WITH_BODY,
          400: [Message.InvalidInput, ...BAD_REQUEST],
          409: [Message.IdempotencyKeyInProgress],
          422: [Message.IdempotencyKeyReused]
        })
      }
    }
  }, async function (request, reply) {
    const key = request.headers['idempotency-key']
    const created = await booksRepository.create(request.body, key === undefined ? undefined : idempotencyKey(key))
    switch (created.outcome) {
      case 'busy':
        throw new ApiError(409, Message.IdempotencyKeyInProgress)
      case 'mismatch':
        throw new ApiError(422, Message.IdempotencyKeyReused)
      default:
        return reply.code(201).header('etag', entityTag(created.book.id, FIRST_VERSION)).send(envelope(201, Message.BookCreated, created.book))
    }
  })

  fastify.get('/book/:id', {
    onRequest: requireBookId,
    schema: {
      ...documented,
      summary: 'Read a book',
      operationId: 'getBook',
      params: BookParamsSchema,
      headers: Type.Object({
        'if-none-match': Type.Optional(Type.String({
          description: 'When the book\'s current ETag is one of these (weak comparison), or * : 304 Not Modified, without a body'
        }))
      }),
      response: {
        200: SuccessSchema(200, Message.BookRetrieved, BookSchema, EXAMPLE_BOOK, ETAG_HEADER),
        304: { description: 'Not Modified: the book still has an ETag that If-None-Match names', headers: ETAG_HEADER, type: 'null' },
        ...failureSchemas({ ...EVERY_ROUTE, ...limited, 400: [Message.InvalidInput, ...BAD_REQUEST], 404: [Message.BookNotFound] })
      }
    }
  }, async function (request, reply) {
    const { id } = request.params
    const stored = await booksRepository.find(id)
    if (stored === null) throw new ApiError(404, Message.BookNotFound)
    const tag = entityTag(id, stored.version)
    reply.header('etag', tag)
    const condition = await tagCondition(request.headers['if-none-match'], id, booksRepository)
    if (condition !== undefined && !noneMatchHolds(condition, id, stored.version)) return reply.code(304).send()
    return envelope(200, Message.BookRetrieved, stored.book)
  })

  fastify.put('/book/:id', {
    config: invalidInput,
    onRequest: requireBookId,
    errorHandler: missingBookBeforeBadBody,
    schema: {
      ...documented,
      summary: 'Update the fields of a book given in the body; absent ones keep their values',
      operationId: 'updateBook',
      params: BookParamsSchema,
      headers: IF_MATCH,
      body: BookPatchSchema,
      response: {
        200: SuccessSchema(200, Message.BookUpdated, BookSchema, EXAMPLE_BOOK, ETAG_HEADER),
        ...failureSchemas({ ...CONDITIONAL_WRITE_FAILURES, ...limited })
      }
    }
  }, async function (request, reply) {
    const { id } = request.params
    const updated = throwIfRefused(await booksRepository.update(id, request.body, await ifMatchVersions(request.headers['if-match'], id)))
    reply.header('etag', entityTag(id, updated.version))
    return envelope(200, Message.BookUpdated, updated.book)
  })

  fastify.delete('/book/:id', {
    onRequest: requireBookId,
    schema: {
      ...documented,
      summary: 'Delete a book',
      operationId: 'deleteBook',
      params: BookParamsSchema,
      headers: IF_MATCH,
      response: {
        200: SuccessSchema(200, Message.BookDeleted, Type.Null(), null),
        // Bad request also for a body that is sent and cannot be parsed
        ...failureSchemas({ ...CONDITIONAL_WRITE_FAILURES, ...limited })
      }
    }
  }, async function (request) {
    const { id } = request.params
    throwIfRefused(await booksRepository.delete(id, await ifMatchVersions(request.headers['if-match'], id)))
    return envelope(200, Message.BookDeleted, null)
  })
}

export default books

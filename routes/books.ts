import type { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { FIRST_VERSION, acceptedVersions, entityTag, noneMatchHolds, parseTagCondition, type TagCondition } from '../src/entity-tags.js'
import { acceptedSecrets } from '../src/config.js'
import { Message, SuccessSchema, envelope, failureSchemas } from '../src/envelope.js'
import { ApiError, errorHandler } from '../src/errors.js'
import { ListingOverBudget, isWalk, listingCursors, nextPage, walkOf, type Position, type Walk } from '../src/listing.js'
import { clientOf } from '../src/listing-slots.js'
import { GROWN_PAGE_ROWS, PageBudget, listingStream, type ListingPage, type ReadPage, type ReadPageBeyond } from '../src/listing-stream.js'
import { BookCreateSchema, BookParamsSchema, BookPatchSchema, BookSchema, isBookId } from '../src/schemas/book.js'
import { IdempotencyKeyHeaderSchema, idempotencyKey } from '../src/schemas/idempotency-key.js'
import { ListingQuerySchema } from '../src/schemas/listing.js'

const invalidInput = { invalidBodyMessage: Message.InvalidInput }

/** For the OpenAPI document (the route schemas below are its only source). */
const EXAMPLE_BOOK = { id: 1, title: 'Dune', author: 'Frank Herbert', year: 1965 }
const documented = { tags: ['books'], security: [{ token: [] }] }
// Every book route answers Bad request to an HTTP/1.1 request without Host, 401 to a missing or
// bad token, 500 and 503 when the database fails or cannot be reached; those with a body more
const BAD_REQUEST = [Message.BadRequest] as const
const EVERY_ROUTE = {
  401: [Message.AuthorizationRequired, Message.InvalidToken],
  500: [Message.InternalServerError],
  503: [Message.ServiceUnavailable]
} as const
const WITH_BODY = { 413: [Message.PayloadTooLarge], 415: [Message.UnsupportedMediaType] } as const
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
/** A query string or header its schema rejects: the contract's `Invalid input`. */
const invalidQuery = () => new ApiError(400, Message.InvalidInput)

/** Up to this many books are answered in one piece; a longer listing is streamed. */
const SMALL_LISTING = 1000
const LISTING_START = `{"status":200,"message":"${Message.BooksRetrieved}","data":[`
/**
 * `onRequest` of the `/book/:id` routes, after authentication: an id no book can have is
 * answered 404 before the body is read and without a query.
 */
const requireBookId: onRequestHookHandler = function (request, reply, done) {
  const { id } = request.params as { id: string }
  done(isBookId(id) ? undefined : new ApiError(404, Message.BookNotFound))
}

/**
 * Sends an envelope whose JSON is already written (PostgreSQL wrote the books' part), as a
 * string or a stream. The type provider types `send` by the route's response schema, for the
 * objects it serializes itself; a body written beforehand is sent as it is.
 */
function sendWrittenJson (reply: FastifyReply, json: string | Readable) {
  return reply.type('application/json; charset=utf-8').send(json as never)
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
  const { booksRepository, listingsRepository, authenticate, apiLimit } = fastify
  // With API_RATE_LIMIT every route may also answer 429, and the OpenAPI document says so
  const limited = apiLimit === null ? {} : { 429: [Message.TooManyRequests] } as const
  const cursors = listingCursors(fastify.config.SECRET_TOKEN, acceptedSecrets(fastify.config))
  const grownPages = new PageBudget(GROWN_PAGE_ROWS)

  /**
   * The first page of a walk, read for `client`: one that went over its budget is the client's
   * own too-costly request, answered 422 (a page after it, once the status has gone out, cuts
   * the listing off: src/request-log.ts).
   */
  async function firstWalkPage (walk: Walk, position: Position | null, limit: number, client: string): Promise<ListingPage> {
    try {
      return await listingsRepository.walkPage(walk, position, limit, client)
    } catch (err) {
      throw err instanceof ListingOverBudget ? new ApiError(422, Message.ListingTooCostly) : err
    }
  }

  /** The versions of book `id` an `If-Match` allows a write on; null without one, or for `*`. */
  async function ifMatchVersions (value: string | undefined, id: string): Promise<number[] | null> {
    const condition = await tagCondition(value, id, booksRepository)
    return condition === undefined ? null : acceptedVersions(condition, id)
  }

  /** The envelope of up to SMALL_LISTING books in one piece, or of more streamed page by page. */
  function sendListing (reply: FastifyReply, client: string, first: ListingPage, readPage: ReadPage, readBeyond?: ReadPageBeyond) {
    return sendWrittenJson(reply, first.count <= SMALL_LISTING
      ? `${LISTING_START}${first.json}]}`
      // Too many to hold: stream them, page by page, as the client reads
      : listingStream(`${LISTING_START}${first.json}`, first, SMALL_LISTING + 1, readPage,
        { budget: grownPages, connectionFree: () => listingsRepository.connectionFree(client), readBeyond, tracing: fastify.tracing }))
  }

  // Registered inside this plugin, so they guard exactly the book routes: the limit first, so
  // that a limited client costs not even a token's verification
  if (apiLimit !== null) fastify.addHook('onRequest', apiLimit)
  fastify.addHook('onRequest', authenticate)

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

  fastify.get('/books', {
    schemaErrorFormatter: invalidQuery,
    schema: {
      ...documented,
      summary: 'List books: every book in id order, or a page, filtered and sorted',
      description: 'Without parameters, every book in ascending id order. With `limit`, one page; a `Link` header ' +
        '(rel="next") names the next one while more may follow. Invalid parameters, a parameter given twice or ' +
        'a cursor not made for this sort and these filters: 400 Invalid input. A page with a filter that PostgreSQL ' +
        'cannot read within the listing budget (LISTING_BUDGET_MS): 422 Listing too costly.',
      operationId: 'listBooks',
      querystring: ListingQuerySchema,
      response: {
        200: SuccessSchema(200, Message.BooksRetrieved, Type.Array(BookSchema), [EXAMPLE_BOOK], {
          Link: { type: 'string', description: 'The next page, `</books?...>; rel="next"`, while more books may follow a page' }
        }),
        ...failureSchemas({ ...EVERY_ROUTE, ...limited, 400: [Message.InvalidInput, ...BAD_REQUEST], 422: [Message.ListingTooCostly] })
      }
    }
  }, async function (request, reply) {
    const { query } = request
    const client = clientOf(request)
    if (!isWalk(query)) {
      // Every book, as the contract's listing always was
      const { pageBeyond } = listingsRepository
      return sendListing(reply, client, await listingsRepository.firstPage(SMALL_LISTING + 1),
        (after, limit, signal) => listingsRepository.pageAfter(after.id, limit, client, signal),
        pageBeyond && ((after, skip, limit, signal) => pageBeyond(after, skip, limit, client, signal)))
    }
    const walk = walkOf(query)
    if (walk === null) throw invalidQuery()
    const position = query.cursor === undefined ? null : cursors.decode(walk, query.cursor)
    if (position === null && query.cursor !== undefined) throw invalidQuery()
    if (query.limit !== undefined) {
      const limit = Number(query.limit)
      const page = await firstWalkPage(walk, position, limit, client)
      // A full page may have more after it; the page after the last full one is empty
      if (page.count === limit && page.last !== null) {
        reply.header('link', `<${nextPage(query, cursors.encode(walk, page.last))}>; rel="next"`)
      }
      return sendWrittenJson(reply, `${LISTING_START}${page.json}]}`)
    }
    return sendListing(reply, client, await firstWalkPage(walk, position, SMALL_LISTING + 1, client),
      (after, limit, signal) => listingsRepository.walkPage(walk, after, limit, client, signal))
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

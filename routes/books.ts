import { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import type { ListingPage } from '../plugins/app/books-repository.js'
import { Message, SuccessSchema, envelope, failureSchemas } from '../src/envelope.js'
import { ApiError, errorHandler } from '../src/errors.js'
import { BookCreateSchema, BookParamsSchema, BookPatchSchema, BookSchema, isBookId } from '../src/schemas/book.js'
import { IdempotencyKeyHeaderSchema, idempotencyKey } from '../src/schemas/idempotency-key.js'

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

/** Up to this many books are answered in one piece; a longer listing is streamed. */
const SMALL_LISTING = 1000
/**
 * Books per query while streaming: about 37 KB of JSON for short titles. A stalled listing holds
 * two pages (below), so a thousand of them hold about 75 MB. With pages of 1,000 a thousand
 * stalled listings took the process to 422 MiB in CI, over the 400 MiB the issue allows
 * (test/process/alone/stalled-listings.test.ts); with 500, 305 to 325 MiB.
 */
const STREAM_PAGE = 500
const LISTING_START = `{"status":200,"message":"${Message.BooksRetrieved}","data":[`

/**
 * The envelope of a long listing, in pieces: the first page already read, then each next page
 * as the client takes the previous one (backpressure). A listing holds two pages at most: the
 * one being written, until the socket has handed all of it to the kernel, and the next one, read
 * meanwhile. Nothing is buffered beyond that (`highWaterMark: 0`): a page is asked for only
 * when the one before has gone out. A client that goes away stops the reading. A failure after
 * the first piece cannot change the status any more: the stream errors, the connection is cut
 * and the body stays incomplete JSON, so no client takes a partial list for the whole one.
 */
function listingStream (first: ListingPage, repository: FastifyInstance['booksRepository']): Readable {
  const readAfter = (page: ListingPage) => {
    // A short page is the last: no need to ask for more
    if (page.count < STREAM_PAGE || page.lastId === null) return null
    const reading = repository.pageAfter(page.lastId, STREAM_PAGE, departed.signal)
    // Awaited in read(); this only keeps a read left behind by a departed client from being unhandled
    reading.catch(() => {})
    return reading
  }
  // Aborted once the stream is destroyed: after its end, or early (the client left, a page failed)
  const departed = new AbortController()
  let head: string | null = LISTING_START + first.json
  let next = readAfter(first)
  return new Readable({
    highWaterMark: 0,
    read () {
      if (head !== null) {
        this.push(head)
        head = null
      } else if (next === null) {
        this.push(']}')
        this.push(null)
      } else {
        next.then((page) => {
          next = departed.signal.aborted ? null : readAfter(page)
          if (page.count > 0) {
            this.push(`,${page.json}`)
          } else {
            // The page before was full and the last
            this.push(']}')
            this.push(null)
          }
        }, (err: Error) => this.destroy(err))
      }
    },
    destroy (err, callback) {
      departed.abort()
      callback(err)
    }
  })
}

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

const books: FastifyPluginAsyncTypebox = async (fastify) => {
  const { booksRepository, authenticate } = fastify

  // Registered inside this plugin, so it guards exactly the book routes
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
        201: SuccessSchema(201, Message.BookCreated, BookSchema, EXAMPLE_BOOK),
        ...failureSchemas({
          ...EVERY_ROUTE,
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
        return reply.code(201).send(envelope(201, Message.BookCreated, created.book))
    }
  })

  fastify.get('/books', {
    schema: {
      ...documented,
      summary: 'List every book, in ascending id order',
      operationId: 'listBooks',
      response: {
        200: SuccessSchema(200, Message.BooksRetrieved, Type.Array(BookSchema), [EXAMPLE_BOOK]),
        ...failureSchemas({ ...EVERY_ROUTE, 400: BAD_REQUEST })
      }
    }
  }, async function (request, reply) {
    const first = await booksRepository.firstPage(SMALL_LISTING + 1)
    return sendWrittenJson(reply, first.count <= SMALL_LISTING
      ? `${LISTING_START}${first.json}]}`
      // Too many to hold: stream them, page by page, as the client reads
      : listingStream(first, booksRepository))
  })

  fastify.get('/book/:id', {
    onRequest: requireBookId,
    schema: {
      ...documented,
      summary: 'Read a book',
      operationId: 'getBook',
      params: BookParamsSchema,
      response: {
        200: SuccessSchema(200, Message.BookRetrieved, BookSchema, EXAMPLE_BOOK),
        ...failureSchemas({ ...EVERY_ROUTE, 400: BAD_REQUEST, 404: [Message.BookNotFound] })
      }
    }
  }, async function (request) {
    const book = await booksRepository.find(request.params.id)
    if (book === null) throw new ApiError(404, Message.BookNotFound)
    return envelope(200, Message.BookRetrieved, book)
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
      body: BookPatchSchema,
      response: {
        200: SuccessSchema(200, Message.BookUpdated, BookSchema, EXAMPLE_BOOK),
        ...failureSchemas({ ...EVERY_ROUTE, ...WITH_BODY, 400: [Message.InvalidInput, ...BAD_REQUEST], 404: [Message.BookNotFound] })
      }
    }
  }, async function (request) {
    const book = await booksRepository.update(request.params.id, request.body)
    if (book === null) throw new ApiError(404, Message.BookNotFound)
    return envelope(200, Message.BookUpdated, book)
  })

  fastify.delete('/book/:id', {
    onRequest: requireBookId,
    schema: {
      ...documented,
      summary: 'Delete a book',
      operationId: 'deleteBook',
      params: BookParamsSchema,
      response: {
        200: SuccessSchema(200, Message.BookDeleted, Type.Null(), null),
        // Bad request also for a body that is sent and cannot be parsed
        ...failureSchemas({ ...EVERY_ROUTE, ...WITH_BODY, 400: BAD_REQUEST, 404: [Message.BookNotFound] })
      }
    }
  }, async function (request) {
    if (!await booksRepository.delete(request.params.id)) throw new ApiError(404, Message.BookNotFound)
    return envelope(200, Message.BookDeleted, null)
  })
}

export default books

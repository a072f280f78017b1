import { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { BookTuple } from '../plugins/app/books-repository.js'
import { EnvelopeSchema, ErrorEnvelopeSchema, Message, envelope, type Envelope } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import {
  BookCreateSchema, BookParamsSchema, BookPatchSchema, BookSchema, parseBookId, type Book
} from '../src/schemas/book.js'

const errorResponses = { '4xx': ErrorEnvelopeSchema, '5xx': ErrorEnvelopeSchema }
const invalidInput = { invalidBodyMessage: Message.InvalidInput }

/** Up to this many books are answered at once; a longer listing is streamed. */
const SMALL_LISTING = 1000
/** Books per query while streaming (about 190 KB of JSON); the service holds two pages at most. */
const STREAM_PAGE = 2500

function tupleToBook ([id, title, author, year]: BookTuple): Book {
  return { id: Number(id), title, author, year }
}

/** The JSON of `rows`, comma-separated; `id` is bigint text, a valid JSON number as it is. */
function booksJson (rows: BookTuple[]): string {
  return rows.map(([id, title, author, year]) =>
    `{"id":${id},"title":${JSON.stringify(title)},"author":${JSON.stringify(author)},"year":${year}}`).join(',')
}

/**
 * The envelope of a long listing, in pieces: the first page already read, then each next page
 * as the client takes the previous one (backpressure); the page after is read while one is
 * being written. A client that goes away stops the reading. A failure after the first piece
 * cannot change the status any more: the stream errors, the connection is cut and the body
 * stays incomplete JSON, so no client takes a partial list for the whole one.
 */
async function * listingChunks (first: BookTuple[], repository: FastifyInstance['booksRepository']) {
  yield `{"status":200,"message":"${Message.BooksRetrieved}","data":[${booksJson(first)}`
  const readAfter = (lastId: string) => {
    const reading = repository.jsonPage(lastId, STREAM_PAGE)
    // Awaited below; this only keeps a read left behind by a departed client from being unhandled
    reading.catch(() => {})
    return reading
  }
  let next = readAfter(first[first.length - 1]![0])
  for (let page = await next; page !== null; page = await next) {
    next = readAfter(page.lastId)
    yield `,${page.json}`
  }
  yield ']}'
}

/**
 * `onRequest` of the `/book/:id` routes, after authentication: an id no book can have is
 * answered 404 before the body is read and without a query.
 */
async function requireBookId (request: FastifyRequest) {
  const { id } = request.params as { id: string }
  if (parseBookId(id) === null) throw new ApiError(404, Message.BookNotFound)
}

const books: FastifyPluginAsyncTypebox = async (fastify) => {
  const { booksRepository, authenticate } = fastify

  // Registered inside this plugin, so it guards exactly the book routes
  fastify.addHook('onRequest', authenticate)

  fastify.post('/book', {
    config: invalidInput,
    schema: {
      body: BookCreateSchema,
      response: { 201: EnvelopeSchema(BookSchema), ...errorResponses }
    }
  }, async function (request, reply) {
    const book = await booksRepository.create(request.body)
    return reply.code(201).send(envelope(201, Message.BookCreated, book))
  })

  fastify.get('/books', {
    schema: {
      response: { 200: EnvelopeSchema(Type.Array(BookSchema)), ...errorResponses }
    }
  }, async function (request, reply) {
    const first = await booksRepository.page('0', SMALL_LISTING + 1)
    if (first.length <= SMALL_LISTING) {
      return envelope(200, Message.BooksRetrieved, first.map(tupleToBook))
    }
    // Too many to hold: stream them, page by page, as the client reads. The stream is the same
    // envelope, written by hand (the type provider only knows serialized bodies)
    const stream = Readable.from(listingChunks(first, booksRepository), { highWaterMark: 1 })
    return reply.type('application/json; charset=utf-8').send(stream as unknown as Envelope<Book[]>)
  })

  fastify.get('/book/:id', {
    onRequest: requireBookId,
    schema: {
      params: BookParamsSchema,
      response: { 200: EnvelopeSchema(BookSchema), ...errorResponses }
    }
  }, async function (request) {
    const book = await booksRepository.find(request.params.id)
    if (book === null) throw new ApiError(404, Message.BookNotFound)
    return envelope(200, Message.BookRetrieved, book)
  })

  fastify.put('/book/:id', {
    config: invalidInput,
    onRequest: requireBookId,
    // SPEC.md: the book is looked up before the body is parsed
    preParsing: async function (request) {
      const { id } = request.params as { id: string }
      if (!await booksRepository.exists(id)) throw new ApiError(404, Message.BookNotFound)
    },
    schema: {
      params: BookParamsSchema,
      body: BookPatchSchema,
      response: { 200: EnvelopeSchema(BookSchema), ...errorResponses }
    }
  }, async function (request) {
    // Deleted between the lookup and now
    const book = await booksRepository.update(request.params.id, request.body)
    if (book === null) throw new ApiError(404, Message.BookNotFound)
    return envelope(200, Message.BookUpdated, book)
  })

  fastify.delete('/book/:id', {
    onRequest: requireBookId,
    schema: {
      params: BookParamsSchema,
      response: { 200: EnvelopeSchema(Type.Null()), ...errorResponses }
    }
  }, async function (request) {
    if (!await booksRepository.delete(request.params.id)) throw new ApiError(404, Message.BookNotFound)
    return envelope(200, Message.BookDeleted, null)
  })
}

export default books

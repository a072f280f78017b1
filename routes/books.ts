import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyRequest } from 'fastify'
import { EnvelopeSchema, ErrorEnvelopeSchema, Message, envelope } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import {
  BookCreateSchema, BookParamsSchema, BookPatchSchema, BookSchema, parseBookId
} from '../src/schemas/book.js'

const errorResponses = { '4xx': ErrorEnvelopeSchema, '5xx': ErrorEnvelopeSchema }
const invalidInput = { invalidBodyMessage: Message.InvalidInput }

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
  }, async function () {
    return envelope(200, Message.BooksRetrieved, await booksRepository.list())
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

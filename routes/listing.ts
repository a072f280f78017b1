/**
 * `GET /books`: every book, or a page of a walk (filters, sort, `limit`, `cursor`), streamed page
 * by page once it is too long to hold (src/listing-stream.ts).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyReply } from 'fastify'
import { BAD_REQUEST, EVERY_ROUTE, EXAMPLE_BOOK, documented, guardBookRoutes, invalidQuery, sendWrittenJson } from '../src/book-routes.js'
import { acceptedSecrets } from '../src/config.js'
import { Message, SuccessSchema, failureSchemas } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import { ListingOverBudget, isWalk, listingCursors, nextPage, walkOf, type Position, type Walk } from '../src/listing.js'
import { clientOf } from '../src/listing-slots.js'
import { GROWN_PAGE_ROWS, PageBudget, listingStream, type ListingPage, type ReadPage, type ReadPageBeyond } from '../src/listing-stream.js'
import { BookSchema } from '../src/schemas/book.js'
import { ListingQuerySchema } from '../src/schemas/listing.js'

/** Up to this many books are answered in one piece; a longer listing is streamed. */
const SMALL_LISTING = 1000
const LISTING_START = `{"status":200,"message":"${Message.BooksRetrieved}","data":[`

const listing: FastifyPluginAsyncTypebox = async (fastify) => {
  const { listingsRepository } = fastify
  const limited = guardBookRoutes(fastify)
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

  /** The envelope of up to SMALL_LISTING books in one piece, or of more streamed page by page. */
  function sendListing (reply: FastifyReply, client: string, first: ListingPage, readPage: ReadPage, readBeyond?: ReadPageBeyond) {
    return sendWrittenJson(reply, first.count <= SMALL_LISTING
      ? `${LISTING_START}${first.json}]}`
      // Too many to hold: stream them, page by page, as the client reads
      : listingStream(`${LISTING_START}${first.json}`, first, SMALL_LISTING + 1, readPage,
        { budget: grownPages, connectionFree: () => listingsRepository.connectionFree(client), readBeyond, tracing: fastify.tracing }))
  }

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
}

export default listing

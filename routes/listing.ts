/**
 * `GET /books`: every book, or a page of a walk (filters, sort, `limit`, `cursor`), streamed page
 * by page once it is too long to hold (src/listing-stream.ts); in the envelope, or as CSV or
 * NDJSON when `Accept` asks for them (src/media-types.ts: the export).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { Readable } from 'node:stream'
import type { FastifyReply } from 'fastify'
import { BAD_REQUEST, EVERY_ROUTE, EXAMPLE_BOOK, documented, guardBookRoutes, invalidQuery, sendWrittenJson } from '../src/book-routes.js'
import { acceptedSecrets } from '../src/config.js'
import { BOOKS_CSV_HEADER, bookCsvLine } from '../src/csv-text.js'
import type { PageFormat } from '../src/db/listings-sql.js'
import { EnvelopeSchema, Message, envelope, failureSchemas } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import { ListingOverBudget, isWalk, listingCursors, nextPage, walkOf, type Position, type Walk } from '../src/listing.js'
import { clientOf } from '../src/listing-slots.js'
import { SearchWithoutWords } from '../src/search.js'
import {
  ENVELOPE_JOINS, GROWN_PAGE_ROWS, LINE_JOINS, PageBudget, listingStream, type ListingPage, type PageJoins, type ReadPage, type ReadPageBeyond
} from '../src/listing-stream.js'
import { CSV_MEDIA_TYPE, NDJSON_ANSWER_TYPE, answerFormat, type AnswerFormat } from '../src/media-types.js'
import { BookSchema } from '../src/schemas/book.js'
import { ListingQuerySchema } from '../src/schemas/listing.js'

/** Up to this many books are answered in one piece; a longer listing is streamed. */
const SMALL_LISTING = 1000
const LISTING_START = `{"status":200,"message":"${Message.BooksRetrieved}","data":[`

/**
 * How each format of `answerFormat` is answered: the format PostgreSQL writes the pages in, what
 * comes before the first page, how the pages join, the media type.
 */
interface Answer {
  pages: PageFormat
  head: string
  joins: PageJoins
  type: string
}
const ANSWERS: Record<AnswerFormat, Answer> = {
  envelope: { pages: 'json', head: LISTING_START, joins: ENVELOPE_JOINS, type: 'application/json; charset=utf-8' },
  csv: { pages: 'csv', head: BOOKS_CSV_HEADER, joins: LINE_JOINS, type: CSV_MEDIA_TYPE },
  ndjson: { pages: 'ndjson', head: '', joins: LINE_JOINS, type: NDJSON_ANSWER_TYPE }
}

/** The answer written beforehand, as a string or a stream; the type provider types `send` by the envelope's schema. */
function sendAnswer (reply: FastifyReply, answer: Answer, body: string | Readable) {
  return answer.pages === 'json' ? sendWrittenJson(reply, body) : reply.type(answer.type).send(body as never)
}

/**
 * `Vary: Accept` on every answer, added to what another hook may have put there (CORS's
 * `Origin`): a cache must not hand a CSV export to a client that asked for the envelope.
 */
function varyOnAccept (reply: FastifyReply) {
  const vary = reply.getHeader('vary')
  reply.header('vary', vary === undefined ? 'Accept' : `${String(vary)}, Accept`)
}

const EXAMPLE_CSV = `${BOOKS_CSV_HEADER}${bookCsvLine(EXAMPLE_BOOK)}`
const EXAMPLE_NDJSON = `${JSON.stringify(EXAMPLE_BOOK)}\n`

const listing: FastifyPluginAsyncTypebox = async (fastify) => {
  const { listingsRepository } = fastify
  // Before the guard: its failures vary with Accept as much as the listing does
  fastify.addHook('onRequest', async function (_request, reply) { varyOnAccept(reply) })
  const limited = guardBookRoutes(fastify)
  const cursors = listingCursors(fastify.config.SECRET_TOKEN, acceptedSecrets(fastify.config))
  const grownPages = new PageBudget(GROWN_PAGE_ROWS)

  /**
   * The first page of a walk, read for `client`: one that went over its budget is the client's
   * own too-costly request, answered 422 (a page after it, once the status has gone out, cuts
   * the listing off: src/request-log.ts).
   */
  async function firstWalkPage (walk: Walk, position: Position | null, limit: number, client: string, format: PageFormat): Promise<ListingPage> {
    try {
      return await listingsRepository.walkPage(walk, position, limit, client, format)
    } catch (err) {
      if (err instanceof SearchWithoutWords) throw invalidQuery()
      throw err instanceof ListingOverBudget ? new ApiError(422, Message.ListingTooCostly) : err
    }
  }

  /** Up to SMALL_LISTING books in one piece, or more streamed page by page. */
  function sendListing (reply: FastifyReply, answer: Answer, client: string, first: ListingPage, readPage: ReadPage, readBeyond?: ReadPageBeyond) {
    return sendAnswer(reply, answer, first.count <= SMALL_LISTING
      ? `${answer.head}${first.text}${answer.joins.end}`
      // Too many to hold: stream them, page by page, as the client reads
      : listingStream(`${answer.head}${first.text}`, first, SMALL_LISTING + 1, readPage,
        { budget: grownPages, connectionFree: () => listingsRepository.connectionFree(client), readBeyond, tracing: fastify.tracing },
        answer.joins))
  }

  fastify.get('/books', {
    schemaErrorFormatter: invalidQuery,
    schema: {
      ...documented,
      summary: 'List books: every book in id order, or a page, filtered and sorted; as JSON, CSV or NDJSON',
      description: 'Without parameters, every book in ascending id order. With `limit`, one page; a `Link` header ' +
        '(rel="next") names the next one while more may follow. Invalid parameters, a parameter given twice or ' +
        'a cursor not made for this sort and these filters: 400 Invalid input. A page with a filter that PostgreSQL ' +
        'cannot read within the listing budget (LISTING_BUDGET_MS): 422 Listing too costly. ' +
        'The books come in the envelope, or, when `Accept` names `text/csv` or `application/x-ndjson` and prefers ' +
        'it (q-values; a wildcard only ever selects the envelope), as CSV (a header line, then one line per book, ' +
        'CRLF) or as NDJSON (one book object per line). Every failure is the envelope. A failure after the first ' +
        'bytes ends the connection without the chunked terminator: the answer is then visibly incomplete.',
      operationId: 'listBooks',
      querystring: ListingQuerySchema,
      response: {
        200: {
          description: Message.BooksRetrieved,
          headers: {
            Link: { type: 'string', description: 'The next page, `</books?...>; rel="next"`, while more books may follow a page' },
            Vary: { type: 'string', description: '`Accept`: the format depends on it' }
          },
          content: {
            'application/json': {
              schema: EnvelopeSchema(Type.Array(BookSchema)),
              examples: { [Message.BooksRetrieved]: { value: envelope(200, Message.BooksRetrieved, [EXAMPLE_BOOK]) } }
            },
            'text/csv': {
              schema: {
                type: 'string',
                description: 'RFC 4180, UTF-8: the header `id,title,author,year`, one line per book, CRLF; a field quoted ' +
                  '(its quotes doubled) when it is empty or holds a comma, a quote, a CR or an LF, as PostgreSQL\'s COPY ... CSV writes it'
              },
              example: EXAMPLE_CSV
            },
            'application/x-ndjson': {
              schema: { type: 'string', description: 'One book object per line (LF), as the envelope holds it' },
              example: EXAMPLE_NDJSON
            }
          }
        },
        ...failureSchemas({ ...EVERY_ROUTE, ...limited, 400: [Message.InvalidInput, ...BAD_REQUEST], 422: [Message.ListingTooCostly] })
      }
    }
  }, async function (request, reply) {
    const { query } = request
    const client = clientOf(request)
    const answer = ANSWERS[answerFormat(request.headers.accept)]
    const format = answer.pages
    if (!isWalk(query)) {
      // Every book, as the contract's listing always was
      const { pageBeyond } = listingsRepository
      return sendListing(reply, answer, client, await listingsRepository.firstPage(SMALL_LISTING + 1, format),
        (after, limit, signal) => listingsRepository.pageAfter(after.id, limit, client, format, signal),
        pageBeyond && ((after, skip, limit, signal) => pageBeyond(after, skip, limit, client, format, signal)))
    }
    const walk = walkOf(query)
    if (walk === null) throw invalidQuery()
    const position = query.cursor === undefined ? null : cursors.decode(walk, query.cursor)
    if (position === null && query.cursor !== undefined) throw invalidQuery()
    if (query.limit !== undefined) {
      const limit = Number(query.limit)
      const page = await firstWalkPage(walk, position, limit, client, format)
      // A full page may have more after it; the page after the last full one is empty
      if (page.count === limit && page.last !== null) {
        reply.header('link', `<${nextPage(query, cursors.encode(walk, page.last))}>; rel="next"`)
      }
      return sendAnswer(reply, answer, `${answer.head}${page.text}${answer.joins.end}`)
    }
    return sendListing(reply, answer, client, await firstWalkPage(walk, position, SMALL_LISTING + 1, client, format),
      (after, limit, signal) => listingsRepository.walkPage(walk, after, limit, client, format, signal))
  })
}

export default listing

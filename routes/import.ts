/**
 * `POST /books`: an import of many books, from CSV, NDJSON or a JSON array, all or nothing. The
 * body is taken whole as it arrives (src/received-body.ts), then read (src/import-parse.ts), each
 * valid book spooled (src/import-spool.ts); once it has ended with no problem, one transaction stores every book
 * (plugins/app/imports-repository.ts), and the answer streams the books back from the spool with
 * their ids, in input order, in the format the client accepts. A dry run reads and checks the
 * whole body and stores nothing.
 */
import { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { errorCodes, type FastifyReply, type FastifyRequest } from 'fastify'
import { isIdentityCoding } from '../src/body-text.js'
import { BAD_REQUEST, EVERY_ROUTE, EXAMPLE_BOOK, documented, guardBookRoutes, invalidQuery, sendWrittenJson } from '../src/book-routes.js'
import { BOOKS_CSV_HEADER, bookCsvLine } from '../src/csv-text.js'
import { Message, SuccessSchema, envelope, failureSchemas } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import { importFingerprint, importedBooks, type IdRun } from '../src/import-ids.js'
import { ImportSpool } from '../src/import-spool.js'
import { ReceivedBody } from '../src/received-body.js'
import { importFormat, readImport, type ImportFormat, type ImportProblem } from '../src/import-parse.js'
import { CSV_MEDIA_TYPE, NDJSON_MEDIA_TYPE, answerFormat, type AnswerFormat } from '../src/media-types.js'
import { BookSchema } from '../src/schemas/book.js'
import { IdempotencyKeyHeaderSchema, idempotencyKey } from '../src/schemas/idempotency-key.js'

/** The body types an import is read from. */
const IMPORT_MEDIA_TYPES = ['text/csv', 'application/x-ndjson', 'application/json']
/** The problems a dry run reports one by one; it counts them all. */
const REPORTED_PROBLEMS = 100
/**
 * The slowest an admitted import's body may come, once past the request timeout: 512 kbit/s,
 * under what any link a catalogue is sent over carries, and a gigabyte in under five hours.
 */
const IMPORT_BODY_MIN_BYTES_PER_S = 64 * 1024

/** Seconds a client is asked to wait before it tries an import again, with a 503. */
const RETRY_AFTER_S = 5
/** Books the answer reads from the spool at once. */
const ANSWER_ROWS = 2000

const ImportQuerySchema = Type.Object({
  dry_run: Type.Optional(Type.Union([Type.Literal('true'), Type.Literal('false')], {
    description: 'true: read and check the whole body, store nothing, and answer 200 with the report'
  }))
}, { propertyNames: { enum: ['dry_run'] } })

const ProblemSchema = Type.Object({
  line: Type.Integer({ description: 'The 1-based line of the body where the record starts' }),
  book: Type.Union([Type.Integer(), Type.Null()], { description: 'The 1-based place of the book in the input; null for a problem that is not one book\'s' }),
  error: Type.String()
})
const ReportSchema = Type.Object({
  books: Type.Integer({ description: 'The books read' }),
  valid: Type.Boolean({ description: 'Whether an import of this body would be stored' }),
  problems: Type.Array(ProblemSchema, { description: `The first ${REPORTED_PROBLEMS} problems` }),
  problem_count: Type.Integer({ description: 'Every problem found' })
})
const EXAMPLE_REPORT = { books: 2, valid: false, problems: [{ line: 3, book: 2, error: 'year: must be an integer' }], problem_count: 1 }

/** Whether `Prefer` (RFC 7240) asks for `return=minimal`. */
function prefersMinimal (prefer: string | string[] | undefined): boolean {
  const values = Array.isArray(prefer) ? prefer : prefer === undefined ? [] : [prefer]
  return values.some((value) => value.split(',').some((preference) =>
    /^return\s*=\s*"?minimal"?$/i.test(preference.split(';', 1)[0]!.trim())))
}

/** The answer's text, piece by piece, in `format`; the spool is closed once it is read. */
async function * answerText (spool: ImportSpool, ids: IdRun[], format: AnswerFormat) {
  try {
    if (format === 'csv') yield BOOKS_CSV_HEADER
    if (format === 'envelope') yield `{"status":201,"message":"${Message.BooksImported}","data":[`
    let first = true
    for await (const books of importedBooks(spool, ids, ANSWER_ROWS)) {
      if (format === 'csv') yield books.map(bookCsvLine).join('')
      else if (format === 'ndjson') yield books.map((book) => `${JSON.stringify(book)}\n`).join('')
      else {
        yield `${first ? '' : ','}${books.map((book) => JSON.stringify(book)).join(',')}`
        first = false
      }
    }
    if (format === 'envelope') yield ']}'
  } finally {
    await spool.close()
  }
}

const importRoute: FastifyPluginAsyncTypebox = async (fastify) => {
  const { importsRepository, config, connections } = fastify
  const limited = guardBookRoutes(fastify)
  const importBounds = { maxBytes: config.IMPORT_MAX_BYTES, maxBooks: config.IMPORT_MAX_BOOKS }
  let running = 0

  // Bounds checked before the body is read, after the token: its length, then a place
  fastify.addHook('onRequest', async function (request, reply) {
    if (Number(request.headers['content-length']) > config.IMPORT_MAX_BYTES) throw new ApiError(413, Message.PayloadTooLarge)
    if (running >= importsRepository.atOnce) {
      reply.header('retry-after', String(RETRY_AFTER_S))
      throw new ApiError(503, Message.TooManyImports)
    }
    running++
    // Admitted: its body may outlast the request timeout while it comes at this rate
    connections.allowSlowBody(request.raw, IMPORT_BODY_MIN_BYTES_PER_S)
    // Held until the answer is over, or its connection gone: the transaction itself ends first
    let held = true
    reply.raw.once('close', () => {
      if (held) running--
      held = false
    })
  })
  // A body left unread (an answer before its end) cannot be followed by another request
  fastify.addHook('onSend', async function (request, reply) {
    if (!request.raw.readableEnded) reply.header('connection', 'close')
  })

  // The body is handed to the route as the stream it is, for the three types an import reads
  fastify.removeAllContentTypeParsers()
  fastify.addContentTypeParser(IMPORT_MEDIA_TYPES, function (request: FastifyRequest, payload, done) {
    // A charset other than UTF-8 is refused by `importFormat`, in the handler
    if (!isIdentityCoding(request.headers['content-encoding'])) {
      done(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(), undefined)
      return
    }
    done(null, payload)
  })
  fastify.addContentTypeParser('*', function (request: FastifyRequest, _payload, done) {
    done(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(request.headers['content-type']), undefined)
  })

  /** The report of a dry run: every problem counted, the first ones listed. */
  async function dryRun (body: AsyncIterable<Buffer>, format: ImportFormat) {
    const problems: ImportProblem[] = []
    let problemCount = 0
    let books = 0
    for await (const items of readImport(body, format, importBounds)) {
      for (const item of items) {
        if (item.kind === 'book') {
          books = Math.max(books, item.index)
          continue
        }
        problemCount++
        if (item.problem.book !== null) books = Math.max(books, item.problem.book)
        if (problems.length < REPORTED_PROBLEMS) problems.push(item.problem)
      }
    }
    return envelope(200, Message.ImportChecked, { books, valid: problemCount === 0, problems, problem_count: problemCount })
  }

  /** The body's books spooled, with their fingerprint; the first problem refuses the import. */
  async function spoolImport (body: AsyncIterable<Buffer>, format: ImportFormat, spool: ImportSpool) {
    const fingerprint = importFingerprint()
    for await (const items of readImport(body, format, importBounds)) {
      const books = items.map((item) => {
        if (item.kind === 'problem') throw new ApiError(400, Message.InvalidImport)
        fingerprint.add(item.book)
        return item.book
      })
      await spool.write(books)
    }
    await spool.flush()
    return fingerprint.digest()
  }

  /** The created books, as the client asked for them. */
  function sendImported (request: FastifyRequest, reply: FastifyReply, spool: ImportSpool, ids: IdRun[]) {
    reply.code(201)
    if (prefersMinimal(request.headers.prefer)) {
      spool.discard()
      return reply.header('preference-applied', 'return=minimal')
        .send(envelope(201, Message.BooksImported, { count: ids.reduce((sum, run) => sum + run.count, 0) }) as never)
    }
    const format = answerFormat(request.headers.accept)
    const text = Readable.from(answerText(spool, ids, format), { objectMode: false })
    if (format === 'envelope') return sendWrittenJson(reply, text)
    return reply.type(format === 'csv' ? CSV_MEDIA_TYPE : NDJSON_MEDIA_TYPE).send(text)
  }

  fastify.post('/books', {
    schemaErrorFormatter: invalidQuery,
    schema: {
      ...documented,
      summary: 'Import books: CSV, NDJSON or a JSON array, all or nothing',
      description: 'The body is `text/csv` (a header line naming title, author and year), `application/x-ndjson` ' +
        '(one book object per line) or `application/json` (an array of books); each book is validated as POST /book ' +
        'validates one. Any invalid book or malformed body: 400 Invalid import, and nothing is stored; `?dry_run=true` ' +
        'answers 200 with the lines refused and why, storing nothing. Stored: 201 with the books in input order, with ' +
        'their ids, as the envelope, CSV or NDJSON (Accept); `Prefer: return=minimal`: only their count.',
      operationId: 'importBooks',
      querystring: ImportQuerySchema,
      // For the OpenAPI document: the body is read as a stream, never as a parsed value to validate
      body: {
        content: {
          'text/csv': {
            schema: {
              description: 'RFC 4180, UTF-8: a header line naming title, author and year in any order (an id column is ignored), then a book per record',
              examples: ['title,author,year\r\nDune,Frank Herbert,1965\r\n']
            }
          },
          'application/x-ndjson': {
            schema: { description: 'A book object per line, as POST /book takes one', examples: ['{"title":"Dune","author":"Frank Herbert","year":1965}\n'] }
          },
          'application/json': {
            schema: { description: 'An array of book objects, as POST /book takes one', examples: [[{ title: 'Dune', author: 'Frank Herbert', year: 1965 }]] }
          }
        }
      },
      headers: Type.Object({
        'idempotency-key': Type.Optional(IdempotencyKeyHeaderSchema),
        prefer: Type.Optional(Type.String({ description: '`return=minimal`: the answer holds only the count of the books stored (RFC 7240)' }))
      }),
      response: {
        200: SuccessSchema(200, Message.ImportChecked, ReportSchema, EXAMPLE_REPORT),
        201: SuccessSchema(201, Message.BooksImported, Type.Union([Type.Array(BookSchema), Type.Object({ count: Type.Integer() })]), [EXAMPLE_BOOK], {
          'Preference-Applied': { type: 'string', description: '`return=minimal`, when the answer holds only the count' }
        }),
        ...failureSchemas({
          ...EVERY_ROUTE,
          ...limited,
          400: [Message.InvalidImport, Message.InvalidInput, ...BAD_REQUEST],
          409: [Message.IdempotencyKeyInProgress],
          413: [Message.PayloadTooLarge],
          415: [Message.UnsupportedMediaType],
          422: [Message.IdempotencyKeyReused],
          503: [...EVERY_ROUTE[503], Message.TooManyImports]
        })
      }
    }
  }, async function (request, reply) {
    const format = importFormat(request.headers['content-type'])
    // A POST without a body, or with one that no parser took
    if (format === null || !(request.body instanceof Readable)) throw new ApiError(415, Message.UnsupportedMediaType)
    // The whole body first, at the pace it comes (src/request-deadline.ts); then its books
    const received = await ReceivedBody.receive(request.body, config.IMPORT_MAX_BYTES)
    // Whatever ends the request, the files go with it
    reply.raw.once('close', () => received.discard())
    const body = received.chunks()
    if (request.query.dry_run === 'true') return dryRun(body, format).finally(() => received.discard())
    const spool = await ImportSpool.open()
    reply.raw.once('close', () => spool.discard())
    try {
      const fingerprint = await spoolImport(body, format, spool).finally(() => received.discard())
      const key = request.headers['idempotency-key']
      // The client waits for the transaction without a byte either way: each chunk stored is
      // activity, or the send timeout would cut off a long one (src/connections.ts)
      const { socket } = request.raw
      const stored = await importsRepository.store(spool, key === undefined ? undefined : { key: idempotencyKey(key), fingerprint }, () => {
        const timeout = connections.sendTimeoutOf(socket)
        if (timeout !== undefined) socket.setTimeout(timeout)
      })
      switch (stored.outcome) {
        case 'busy':
          throw new ApiError(409, Message.IdempotencyKeyInProgress)
        case 'mismatch':
          throw new ApiError(422, Message.IdempotencyKeyReused)
        default:
          return sendImported(request, reply, spool, stored.ids)
      }
    } catch (err) {
      await spool.close()
      throw err
    }
  })
}

export default importRoute

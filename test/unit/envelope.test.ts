/**
 * The envelope: the exact message texts, the message of each status Fastify or Node raises by
 * itself, the envelope's shape and key order, and the response schemas built around it.
 */
import { Type } from '@sinclair/typebox'
import { Ajv } from 'ajv'
import t from 'tap'
import { EnvelopeSchema, Message, SuccessSchema, envelope, failure, failureSchemas, statusMessage } from '../../src/envelope.js'

t.test('Message holds first the texts the contract fixes, word for word', async (t) => {
  t.strictSame(Object.entries(Message).slice(0, 13), [
    ['TokenGenerated', 'Token generated successfully'],
    ['InvalidRequestPayload', 'Invalid request payload'],
    ['InvalidCredentials', 'Invalid credentials'],
    ['CouldNotGenerateToken', 'Could not generate token'],
    ['BookCreated', 'Book created successfully'],
    ['BooksRetrieved', 'Books retrieved successfully'],
    ['BookRetrieved', 'Book retrieved successfully'],
    ['BookUpdated', 'Book updated successfully'],
    ['BookDeleted', 'Book deleted successfully'],
    ['InvalidInput', 'Invalid input'],
    ['BookNotFound', 'Book not found'],
    ['AuthorizationRequired', 'Authorization token required'],
    ['InvalidToken', 'Invalid token']
  ])
})

t.test('Message holds then exactly these texts for what the spec leaves open, and no two keys share a text', async (t) => {
  t.strictSame(Object.entries(Message).slice(13), [
    ['BadRequest', 'Bad request'],
    ['RouteNotFound', 'Route not found'],
    ['MethodNotAllowed', 'Method not allowed'],
    ['RequestTimeout', 'Request timeout'],
    ['PayloadTooLarge', 'Payload too large'],
    ['TooManyRequests', 'Too many requests'],
    ['TooManyConnectionsFromAddress', 'Too many connections from this address'],
    ['TooManyConnections', 'Too many connections'],
    ['UnsupportedMediaType', 'Unsupported media type'],
    ['ExpectationFailed', 'Expectation failed'],
    ['IdempotencyKeyInProgress', 'A request with this idempotency key is in progress'],
    ['IdempotencyKeyReused', 'Idempotency key already used with a different body'],
    ['PreconditionFailed', 'Precondition failed'],
    ['ListingTooCostly', 'Listing too costly: narrow or change its filters'],
    ['BooksImported', 'Books imported'],
    ['ImportChecked', 'Import checked'],
    ['InvalidImport', 'Invalid import: send it with ?dry_run=true for the lines refused'],
    ['TooManyImports', 'Too many imports at once'],
    ['HeadersTooLarge', 'Request header fields too large'],
    ['HttpVersionNotSupported', 'HTTP version not supported'],
    ['InternalServerError', 'Internal server error'],
    ['ServiceUnavailable', 'Service unavailable'],
    ['ServiceLive', 'Service is live'],
    ['ServiceReady', 'Service is ready']
  ])
  const texts = Object.values(Message)
  t.equal(new Set(texts).size, texts.length)
})

t.test('statusMessage gives each status Fastify or Node raises by itself its own text', async (t) => {
  t.strictSame([404, 405, 408, 413, 415, 417, 431, 505].map((status) => [status, statusMessage(status)]), [
    [404, 'Route not found'],
    [405, 'Method not allowed'],
    [408, 'Request timeout'],
    [413, 'Payload too large'],
    [415, 'Unsupported media type'],
    [417, 'Expectation failed'],
    [431, 'Request header fields too large'],
    [505, 'HTTP version not supported']
  ])
})

t.test('statusMessage gives any other status a plain Bad request', async (t) => {
  for (const status of [400, 401, 403, 406, 409, 411, 414, 416, 422, 429, 451]) {
    t.equal(statusMessage(status), 'Bad request', String(status))
  }
})

t.test('envelope is {status, message, data} with the keys in that order, data as given', async (t) => {
  const data = { id: 1, title: 't' }
  const wrapped = envelope(201, Message.BookCreated, data)
  t.equal(JSON.stringify(wrapped), '{"status":201,"message":"Book created successfully","data":{"id":1,"title":"t"}}')
  t.equal(wrapped.data, data, 'the data itself, not a copy')
  t.equal(JSON.stringify(envelope(200, Message.BooksRetrieved, [])), '{"status":200,"message":"Books retrieved successfully","data":[]}')
})

t.test('failure is an envelope with null data', async (t) => {
  t.equal(JSON.stringify(failure(404, Message.BookNotFound)), '{"status":404,"message":"Book not found","data":null}')
})

t.test('EnvelopeSchema requires an integer status, a string message and the given data, and carries the options', async (t) => {
  const schema = EnvelopeSchema(Type.Array(Type.Integer()), { description: 'a list' })
  t.match(schema, {
    type: 'object',
    required: ['status', 'message', 'data'],
    properties: { status: { type: 'integer' }, message: { type: 'string' }, data: { type: 'array', items: { type: 'integer' } } },
    description: 'a list'
  })
  const validate = new Ajv().compile(schema)
  t.ok(validate({ status: 200, message: 'ok', data: [1, 2] }), 'an envelope of the data')
  t.notOk(validate({ status: 200.5, message: 'ok', data: [] }), 'a fractional status')
  t.notOk(validate({ status: 200, message: 1, data: [] }), 'a message that is not a string')
  t.notOk(validate({ status: 200, message: 'ok', data: ['x'] }), 'data of another schema')
  t.notOk(validate({ status: 200, message: 'ok' }), 'no data')
})

t.test('SuccessSchema describes the response by its message and gives one example, the envelope of the example data', async (t) => {
  const example = { id: 7 }
  const schema = SuccessSchema(201, Message.BookCreated, Type.Object({ id: Type.Integer() }), example)
  t.match(schema, { type: 'object', properties: { data: { type: 'object', properties: { id: { type: 'integer' } } } } })
  t.equal(schema['x-response-description'], 'Book created successfully')
  t.strictSame(schema['x-examples'], {
    'Book created successfully': { value: { status: 201, message: 'Book created successfully', data: { id: 7 } } }
  })
})

t.test('failureSchemas gives exactly the statuses asked for, each described by its reason phrase and messages, with an example per message', async (t) => {
  const schemas = failureSchemas({ 400: [Message.InvalidInput, Message.BadRequest], 404: [Message.BookNotFound] })
  t.strictSame(Object.keys(schemas), ['400', '404'])
  t.match(schemas[400], { type: 'object', properties: { status: { type: 'integer' }, message: { type: 'string' }, data: { type: 'null' } } })
  t.equal(schemas[400]['x-response-description'], 'Bad Request: Invalid input, Bad request')
  t.strictSame(schemas[400]['x-examples'], {
    'Invalid input': { value: { status: 400, message: 'Invalid input', data: null } },
    'Bad request': { value: { status: 400, message: 'Bad request', data: null } }
  })
  t.equal(schemas[404]['x-response-description'], 'Not Found: Book not found')
  t.strictSame(schemas[404]['x-examples'], {
    'Book not found': { value: { status: 404, message: 'Book not found', data: null } }
  })
})

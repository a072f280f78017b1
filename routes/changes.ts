import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { Message, failureSchemas } from '../src/envelope.js'
import { ApiError } from '../src/errors.js'
import { RECONNECT_MS } from '../src/changes.js'

const FEED_EXAMPLE = `retry: ${RECONNECT_MS}\nid: 0000000000000041.Rt3c0xGm1dZkXQ2n8pWb7A\n\nid: 0000000000000042.8pkzA1Yp9DPCvF1kbyQMdA\nevent: updated\ndata: {"id":1,"title":"Dune","author":"Frank Herbert","year":1965}\n\n`

/** GET /books/changes: the feed of changes (plugins/app/changes-feed.ts; docs/api.md, Live changes). */
const changes: FastifyPluginAsyncTypebox = async (fastify) => {
  const { changesFeed } = fastify
  const invalidInput = () => new ApiError(400, Message.InvalidInput)

  // Registered inside this plugin, so they guard exactly this route, the limit first
  if (fastify.apiLimit !== null) fastify.addHook('onRequest', fastify.apiLimit)
  fastify.addHook('onRequest', fastify.authenticate)

  fastify.get('/books/changes', {
    schemaErrorFormatter: invalidInput,
    schema: {
      tags: ['books'],
      security: [{ token: [] }],
      summary: 'Follow every create, update and delete as it commits (server-sent events)',
      description: 'A response that stays open: one event per change, `created`, `updated` or `deleted`, with the ' +
        'book as stored after it (`{"id":..}` for a delete). `Last-Event-ID` resumes after that change; `reset` ' +
        'says the client must reload the list; `token-expired` ends the feed when the token does.',
      operationId: 'followChanges',
      headers: Type.Object({
        'last-event-id': Type.Optional(Type.String({ description: 'The id of the last event received: the feed resumes after it' }))
      }),
      response: {
        200: {
          description: 'The feed, as long as the token is valid',
          content: { 'text/event-stream': { schema: { type: 'string', example: FEED_EXAMPLE } } }
        },
        ...failureSchemas({
          400: [Message.InvalidInput, Message.BadRequest],
          401: [Message.AuthorizationRequired, Message.InvalidToken],
          500: [Message.InternalServerError],
          503: [Message.ServiceUnavailable],
          // With API_RATE_LIMIT
          ...(fastify.apiLimit === null ? {} : { 429: [Message.TooManyRequests] } as const)
        })
      }
    }
  }, async function (request, reply) {
    if (changesFeed.closing()) throw new ApiError(503, Message.ServiceUnavailable)
    const lastEventId = request.headers['last-event-id']
    // An empty id is no id: the event stream format's own reading of an empty `id:`
    const after = lastEventId === undefined || lastEventId === '' ? undefined : changesFeed.ids.decode(lastEventId)
    if (after === null) throw invalidInput()
    const feed = await changesFeed.open(after, request.tokenExpiresAt, reply.raw)
    // A proxy that buffers responses (nginx) must pass each event on as it comes
    return reply.type('text/event-stream; charset=utf-8').header('x-accel-buffering', 'no').send(feed as never)
  })
}

export default changes

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { boundedQuery } from '../src/db/bounded-query.js'
import { Message, SuccessSchema, envelope, failure, failureSchemas } from '../src/envelope.js'

/**
 * How long readiness waits for the database's answer. Its own bound, shorter than the pool's
 * (src/db/time-bounds.ts), so a probe is answered within about a second also when every
 * connection is busy or the network swallows packets.
 */
export const READY_TIMEOUT_MS = 1000

const ReadySchema = Type.Object({ database: Type.Literal('up') })

/**
 * The health checks, without a token, cheap enough to poll every second, on the public port or,
 * with ADMIN_PORT set, on the admin listener only (plugins/app/admin-listener.ts):
 *
 * - `GET /health/live`: the process answers; never touches the database, so a database outage
 *   does not get the process restarted.
 * - `GET /health/ready`: the database answers `SELECT 1` within `READY_TIMEOUT_MS` through the
 *   pool (no connection of its own), sent as the book routes' statements are, so a connection
 *   that reached a standby is not ready either; 503 when not, and from the moment shutdown
 *   begins, so a load balancer stops sending before the listener goes.
 *
 * Their request lines are logged at `debug`. A change of readiness is logged once (`warn` when
 * the database stops answering, with the cause; `info` when it answers again), not each poll.
 */
const health: FastifyPluginAsyncTypebox = async (fastify) => {
  const { pg, log, isClosing, operationsRoute } = fastify
  const polled = { requestLogLevel: 'debug' } as const

  // One `SELECT 1` at a time, shared by every probe that comes while it runs: a database that
  // stops answering holds one pooled query, however many probes arrive
  let pending: Promise<Error | null> | null = null
  function pingDatabase (): Promise<Error | null> {
    pending ??= boundedQuery(pg.pool, { text: 'SELECT 1' }).then(() => null, (err: Error) => err).finally(() => { pending = null })
    return pending
  }

  async function databaseAnswers (): Promise<Error | null> {
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<Error>((resolve) => {
      timer = setTimeout(resolve, READY_TIMEOUT_MS, new Error(`the database did not answer within ${READY_TIMEOUT_MS} ms`))
    })
    try {
      return await Promise.race([pingDatabase(), deadline])
    } finally {
      clearTimeout(timer)
    }
  }

  let ready = true
  function record (error: Error | null) {
    if (error !== null && ready) log.warn({ err: error }, 'not ready: the database does not answer')
    if (error === null && !ready) log.info('ready again: the database answers')
    ready = error === null
  }

  fastify.get('/health/live', operationsRoute({
    config: polled,
    schema: {
      summary: 'Liveness: the process answers (the database is not asked)',
      tags: ['operations'],
      operationId: 'getLiveness',
      response: { 200: SuccessSchema(200, Message.ServiceLive, Type.Null(), null) }
    }
  }), async function () {
    return envelope(200, Message.ServiceLive, null)
  })

  fastify.get('/health/ready', operationsRoute({
    config: polled,
    schema: {
      summary: `Readiness: the database answers within ${READY_TIMEOUT_MS} ms and the service is not shutting down`,
      tags: ['operations'],
      operationId: 'getReadiness',
      response: {
        200: SuccessSchema(200, Message.ServiceReady, ReadySchema, { database: 'up' }),
        ...failureSchemas({ 503: [Message.ServiceUnavailable] })
      }
    }
  }), async function (request, reply) {
    if (isClosing()) return reply.code(503).send(failure(503, Message.ServiceUnavailable))
    const error = await databaseAnswers()
    record(error)
    if (error !== null) return reply.code(503).send(failure(503, Message.ServiceUnavailable))
    return envelope(200, Message.ServiceReady, { database: 'up' as const })
  })
}

export default health

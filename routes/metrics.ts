import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'

/**
 * `GET /metrics`: the app's metrics (plugins/app/metrics.ts) in Prometheus text format, for a
 * scraper. Not the envelope: Prometheus reads only its own format. Public on the service port
 * like the health checks; it carries counts and timings, no data, tokens or configuration.
 */
const metrics: FastifyPluginAsyncTypebox = async (fastify) => {
  const { registry } = fastify.metrics

  fastify.get('/metrics', {
    schema: {
      summary: 'Prometheus metrics: requests by route and status, the database pool, the process',
      tags: ['operations'],
      operationId: 'getMetrics',
      response: {
        200: {
          description: 'Prometheus text exposition format 0.0.4, not the JSON envelope',
          content: { [registry.contentType]: { schema: Type.String() } }
        }
      }
    }
  }, async function (request, reply) {
    const text = await registry.metrics()
    return reply.type(registry.contentType).send(text)
  })
}

export default metrics

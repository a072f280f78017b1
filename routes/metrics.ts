import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'

/**
 * `GET /metrics`: the app's metrics (plugins/app/metrics.ts) in Prometheus text format, for a
 * scraper. Not the envelope: Prometheus reads only its own format. No token, like the health
 * checks, and like them on the admin listener only when ADMIN_PORT is set
 * (plugins/app/admin-listener.ts): it carries no data, tokens or configuration, but counts (of
 * failed logins too), the pool's size and the Node.js version, which are the operator's business.
 */
const metrics: FastifyPluginAsyncTypebox = async (fastify) => {
  const { metrics: { registry }, operationsRoute } = fastify

  fastify.get('/metrics', operationsRoute({
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
  }), async function (request, reply) {
    const text = await registry.metrics()
    return reply.type(registry.contentType).send(text)
  })
}

export default metrics

/**
 * Adds `fastify.metrics` (`createMetrics`, below; GET /metrics renders its registry) and an
 * `onResponse` hook that observes every response, callback style (no promise per request).
 * Requests answered before routing (an undecodable URL) skip the hooks: the HTTP edge observes
 * those itself (plugins/app/http-edge.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Pool } from 'pg'
import { Gauge, Registry, collectDefaultMetrics, type Metric } from 'prom-client'
import { RequestDurations, UNMATCHED_ROUTE } from '../../src/request-metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    metrics: ReturnType<typeof createMetrics>
  }
}

/**
 * The app's Prometheus metrics, in a Registry of its own (not prom-client's global one, so
 * several apps in one process, as in the tests, each count their own): response times by
 * route and status, the database pool read when scraped, and prom-client's process and
 * Node.js figures (CPU, memory, event loop delay, GC, handles).
 */
function createMetrics (pool: Pool) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })

  const durations = new RequestDurations()
  // A metric prom-client's types do not list, though its Registry renders it like its own
  registry.registerMetric(durations as unknown as Metric)

  const poolGauges: Array<[string, string, () => number]> = [
    ['db_pool_connections', 'Connections the database pool holds, in use or idle', () => pool.totalCount],
    ['db_pool_idle_connections', 'Connections the database pool holds idle', () => pool.idleCount],
    ['db_pool_waiting_requests', 'Queries waiting for a database connection', () => pool.waitingCount],
    // The pool's own bound: DB_POOL_MAX on a server, 1 on PGlite (plugins/external/postgres.ts)
    ['db_pool_max_connections', 'Most connections the database pool may hold', () => pool.options.max ?? 0]
  ]
  for (const [name, help, read] of poolGauges) {
    registry.registerMetric(new Gauge({ name, help, registers: [], collect () { this.set(read()) } }))
  }

  return {
    registry,

    /** Counts a finished request under its route pattern, never its URL. */
    observe (request: FastifyRequest, reply: FastifyReply) {
      durations.observe(request.method, request.routeOptions.url ?? UNMATCHED_ROUTE, reply.statusCode, reply.elapsedTime / 1000)
    }
  }
}

export default fp(async function metrics (fastify) {
  const metrics = createMetrics(fastify.pg.pool)
  fastify.decorate('metrics', metrics)
  fastify.addHook('onResponse', function (request, reply, done) {
    metrics.observe(request, reply)
    done()
  })
}, { name: 'metrics', dependencies: ['postgres'] })

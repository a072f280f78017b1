import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Pool } from 'pg'
import { Gauge, Registry, collectDefaultMetrics, type Metric } from 'prom-client'
import { RequestDurations, UNMATCHED_ROUTE } from '../../src/request-metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics
  }
}

/**
 * The app's Prometheus metrics, in a Registry of its own (not prom-client's global one, so
 * several apps in one process, as in the tests, each count their own): response times by
 * route and status, the database pool read when scraped, and prom-client's process and
 * Node.js figures (CPU, memory, event loop delay, GC, handles).
 */
export function createMetrics (pool: Pool, poolMax: number) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })

  const durations = new RequestDurations()
  // A metric prom-client's types do not list, though its Registry renders it like its own
  registry.registerMetric(durations as unknown as Metric)

  const poolGauges: Array<[string, string, () => number]> = [
    ['db_pool_connections', 'Connections the database pool holds, in use or idle', () => pool.totalCount],
    ['db_pool_idle_connections', 'Connections the database pool holds idle', () => pool.idleCount],
    ['db_pool_waiting_requests', 'Queries waiting for a database connection', () => pool.waitingCount],
    ['db_pool_max_connections', 'Most connections the database pool may hold (DB_POOL_MAX)', () => poolMax]
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

type Metrics = ReturnType<typeof createMetrics>

const byServer = new WeakMap<FastifyInstance['server'], Metrics>()

/**
 * The metrics of the app on this HTTP server, for requests answered outside the app's
 * encapsulated context, where `fastify.metrics` is not visible: those of `frameworkErrors`
 * (src/app.ts), which get the root instance.
 */
export function metricsOf (server: FastifyInstance['server']): Metrics | undefined {
  return byServer.get(server)
}

/**
 * Observes every response in one callback-style `onResponse` hook (no promise per request).
 * Requests answered before routing (an undecodable URL) skip the hooks: src/app.ts observes
 * those itself.
 */
export default fp(async function metrics (fastify) {
  const metrics = createMetrics(fastify.pg.pool, fastify.config.DB_POOL_MAX)
  fastify.decorate('metrics', metrics)
  byServer.set(fastify.server, metrics)
  fastify.addHook('onResponse', function (request, reply, done) {
    metrics.observe(request, reply)
    done()
  })
}, { name: 'metrics', dependencies: ['postgres'] })

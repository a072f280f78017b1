/**
 * Adds `fastify.operationsRoute`, `fastify.adminAddress` and `fastify.listenerConstraints`, and
 * with ADMIN_PORT set, a listener
 * of its own for the operations endpoints (`/health/*`, `/metrics`): the route constraint
 * `listener`, an `onReady` hook that starts the admin server on ADMIN_HOST (127.0.0.1 unless
 * set), and an `onClose` hook that closes it. Without ADMIN_PORT, only the two decorators: no
 * constraint, no server.
 *
 * The operations endpoints get a listener of their own, as PostgREST's admin server does: what
 * they show (failed logins, the pool, the Node.js version) is for the operator, not for every
 * client.
 *
 * One app, two `http.Server`s: the admin one hands its requests to this instance's router
 * (`fastify.routing`), so every hook, header, log line and metric is the same on both ports, and
 * the readiness state during a shutdown is the one state of the app. The router tells the two
 * apart by a route constraint (find-my-way's own mechanism, as for `Accept-Version`), derived
 * from which server accepted the request and required when derived: the operations routes
 * match only what came through the admin listener, every other route only what came through the
 * public one, and the rest is the not-found handler's 404 `Route not found`, exactly what an
 * unknown path answers. A second Fastify instance would need its own hooks, error handler,
 * metrics registry and shutdown state, kept in step with this one's by hand.
 *
 * The admin server gets the public server's timeouts and Node-level edge handlers (client
 * errors, CONNECT, Expect), and `fastify.connections` keeps its connections as it keeps the
 * public server's (src/connections.ts), with bounds of their own (ADMIN_MAX_CONNECTIONS, counted
 * against the descriptors apart from the public ones), so it answers a hostile client as the
 * public port does. It listens once the app is ready (a port already taken fails the start-up)
 * and closes last: Fastify closes its own server first, after the drain
 * (plugins/app/connections.ts), and only then runs the `onClose` hooks. So a probe of the admin port sees readiness 503 from the signal on, through
 * SHUTDOWN_DELAY_MS and the drain, until the process is about to exit.
 */
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance, RouteShorthandOptions } from 'fastify'
import fp from 'fastify-plugin'
import { ADMIN_CONNECTION_HARD_CAP, ADMIN_MAX_CONNECTIONS, ADMIN_MAX_CONNECTIONS_PER_ADDRESS } from '../../src/config.js'
import { HTTP_SERVER_OPTIONS } from '../../src/http.js'
import { describeListenError } from '../../src/start-up.js'

/** The route constraint of the operations routes while ADMIN_PORT is set. */
const ADMIN_ONLY = { listener: 'admin' } as const

/** A route's entry in the router, as find-my-way's constraint stores hold it. */
type RouteStore = Parameters<ReturnType<Parameters<FastifyInstance['addConstraintStrategy']>[0]['storage']>['set']>[1]

/** The Node-level events the HTTP edge and Fastify answer on the public server. */
const EDGE_EVENTS = ['clientError', 'connect', 'checkExpectation'] as const

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The options of an operations route (health, metrics) with what ADMIN_PORT asks of it:
     * answered on the admin listener only, and left out of the OpenAPI document of the public
     * port. Without ADMIN_PORT, the options as they are.
     */
    operationsRoute: <T extends RouteShorthandOptions>(options: T) => T
    /** Where the admin listener listens, once it does; null without ADMIN_PORT or before ready. */
    adminAddress: () => AddressInfo | null
    /**
     * The route constraints a request was routed with, for a lookup of the routes it could have
     * reached (the 404/405 of plugins/app/http-edge.ts): the admin listener's, or none.
     */
    listenerConstraints: (raw: IncomingMessage) => typeof ADMIN_ONLY | undefined
  }
}

export default fp(async function adminListener (fastify) {
  const { config, log } = fastify
  const port = config.ADMIN_PORT
  let address: AddressInfo | null = null
  fastify.decorate('adminAddress', () => address)
  /** Requests that came in through the admin listener; what the `listener` constraint reads. */
  const viaAdmin = new WeakSet<IncomingMessage>()
  fastify.decorate('listenerConstraints', (raw: IncomingMessage) => viaAdmin.has(raw) ? ADMIN_ONLY : undefined)

  if (port === undefined) {
    fastify.decorate('operationsRoute', <T extends RouteShorthandOptions>(options: T): T => options)
    return
  }
  // PORT=0 is a port of its own too
  if (port !== 0 && port === config.PORT) {
    throw new Error(`ADMIN_PORT must differ from PORT (both are ${port})`)
  }

  fastify.addConstraintStrategy({
    name: 'listener',
    storage () {
      const stores = new Map<unknown, RouteStore>()
      return {
        get: (value: unknown) => stores.get(value) ?? null,
        set: (value: unknown, store: RouteStore) => { stores.set(value, store) }
      }
    },
    deriveConstraint: (req: IncomingMessage) => viaAdmin.has(req) ? ADMIN_ONLY.listener : undefined,
    // A request of the admin listener matches only routes constrained to it
    mustMatchWhenDerived: true
  })
  fastify.decorate('operationsRoute', <T extends RouteShorthandOptions>(options: T): T =>
    ({ ...options, constraints: ADMIN_ONLY, schema: { ...options.schema, hide: true } }))

  const server = createServer(HTTP_SERVER_OPTIONS, (req, res) => {
    viaAdmin.add(req)
    fastify.routing(req, res)
  })
  fastify.connections.attach(server, {
    bounds: {
      max: ADMIN_MAX_CONNECTIONS,
      maxPerAddress: ADMIN_MAX_CONNECTIONS_PER_ADDRESS,
      hardCap: ADMIN_CONNECTION_HARD_CAP,
      names: { max: 'the admin port\'s bound', maxPerAddress: 'the admin port\'s bound per address' }
    }
  })

  fastify.addHook('onReady', async function () {
    // Taken now, when every plugin has added its own
    for (const event of EDGE_EVENTS) {
      for (const listener of fastify.server.listeners(event)) server.on(event, listener as (...args: unknown[]) => void)
    }
    await new Promise<void>((resolve, reject) => {
      // In words naming ADMIN_PORT and ADMIN_HOST: a start-up failure is one line (src/start-failure.ts)
      const failed = (err: Error) => reject(new Error(describeListenError(err, 'ADMIN_PORT', 'ADMIN_HOST') ?? err.message, { cause: err }))
      server.once('error', failed)
      server.listen(port, config.ADMIN_HOST, () => {
        server.off('error', failed)
        resolve()
      })
    })
    address = server.address() as AddressInfo
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
    log.info({ address: address.address, port: address.port }, `Admin server listening at http://${host}:${address.port}`)
  })

  fastify.addHook('onClose', async function () {
    if (!server.listening) return
    // The public server has closed by now; requests in flight here finish (their responses say
    // `Connection: close`, plugins/app/connections.ts), idle connections are closed at once
    await new Promise((resolve) => server.close(resolve))
    log.info('admin server closed')
  })
}, { name: 'admin-listener', dependencies: ['env', 'connections'] })

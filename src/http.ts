/**
 * What the HTTP edge (plugins/app/http-edge.ts), the CORS wrapper (plugins/external/cors.ts),
 * the authenticate hook and the two HTTP servers know of the service's HTTP surface, written once.
 */
import type { ServerOptions } from 'node:http'

/** The options of the public server (src/app.ts) and of the admin listener's. */
export const HTTP_SERVER_OPTIONS: ServerOptions = {
  // Node's one timeout for every request of the server, off: the app keeps one per request
  // (src/request-deadline.ts, REQUEST_TIMEOUT_MS), which an import's body may outlast while it comes
  requestTimeout: 0,
  // Above the 60 s idle timeout of common load balancers, so they close first (Fastify's default)
  keepAliveTimeout: 72_000,
  headersTimeout: 5_000,
  // How often Node enforces the request and headers timeouts; its default of 30 s would blur them
  connectionsCheckingInterval: 1_000,
  // The HTTP edge answers a missing Host in the envelope instead
  requireHostHeader: false
}

/**
 * The methods the service has routes for: what `Allow` may list and what a preflight allows. No
 * OPTIONS: no route of ours has it, and with CORS on, the preflight route matches every path.
 */
export const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE'] as const

/**
 * The request headers a client of the API sets itself: the token, the body's type, a create's
 * key, the preconditions on a book's ETag.
 */
export const REQUEST_HEADERS = ['Authorization', 'Content-Type', 'Idempotency-Key', 'If-Match', 'If-None-Match'] as const

/**
 * The response headers a browser's script may read besides the simple ones: the request id,
 * which matches an answer to its log line, the wait that comes with a 429 or a 503, a book's
 * ETag, the Link to a listing's next page, and the rate limits' fields (RateLimit-Policy, RateLimit).
 */
export const EXPOSED_HEADERS = ['X-Request-Id', 'Retry-After', 'ETag', 'Link', 'RateLimit-Policy', 'RateLimit'] as const

/**
 * How many fields named `name` (lower case) a request's `rawHeaders` holds: Node keeps only the
 * first of a repeated `Host` or `Authorization` in `headers`.
 */
export function fieldCount (rawHeaders: string[], name: string): number {
  let count = 0
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const field = rawHeaders[i]!
    // Most names are skipped without lower-casing them
    if (field.length === name.length && field.toLowerCase() === name) count++
  }
  return count
}

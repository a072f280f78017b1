/**
 * Adds, when `CORS_ORIGINS` lists the origins of browser front-ends, @fastify/cors: its
 * `onRequest` hook, which gives those origins CORS headers and answers their preflights, and its
 * `OPTIONS *` route. With `CORS_ORIGINS` empty (the default) it registers nothing, so nothing
 * changes and no request pays for it.
 *
 * Only listed origins get CORS headers: an origin function, because with a plain list
 * @fastify/cors would still answer any origin's preflight with the allowed methods and headers.
 * A preflight is answered in the hook, before authentication, on every path (the `OPTIONS *`
 * route; the HTTP edge keeps OPTIONS out of its 405 `Allow`). Not strict: a strict plugin
 * answers an OPTIONS without `Access-Control-Request-Method` with a plain-text 400, outside the
 * envelope. No credentials: the token travels in `Authorization`, set by the page's script,
 * never in a cookie.
 *
 * @see https://github.com/fastify/fastify-cors
 */
import fastifyCors from '@fastify/cors'
import fp from 'fastify-plugin'
import { EXPOSED_HEADERS, METHODS, REQUEST_HEADERS } from '../../src/http.js'

/** The origins in `CORS_ORIGINS`, in the form browsers send them (`new URL(...).origin`). */
function parseOrigins (value: string): Set<string> {
  const origins = new Set<string>()
  for (const entry of value.split(',').map((part) => part.trim()).filter(Boolean)) {
    let origin: string
    try {
      origin = new URL(entry).origin
    } catch {
      throw new Error(`CORS_ORIGINS: ${entry} is not an origin (scheme://host[:port])`)
    }
    origins.add(origin)
  }
  return origins
}

export default fp(async function cors (fastify) {
  const origins = parseOrigins(fastify.config.CORS_ORIGINS)
  if (origins.size === 0) return
  await fastify.register(fastifyCors, {
    origin: (origin, callback) => callback(null, origin !== undefined && origins.has(origin)),
    methods: [...METHODS],
    allowedHeaders: [...REQUEST_HEADERS],
    exposedHeaders: [...EXPOSED_HEADERS],
    // Chromium caps a cached preflight at 2 hours
    maxAge: 7200,
    strictPreflight: false
  })
}, { name: 'cors', dependencies: ['env'] })

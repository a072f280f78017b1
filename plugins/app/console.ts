/**
 * Adds the web console at `/console/`: the routes of @fastify/static for the files `npm run build`
 * made of console/ (not its `reply.sendFile` and `reply.download`), a `GET /console` route that
 * redirects there, and, for those routes alone (an encapsulated plugin), an `onSend` hook that
 * sets the Content-Security-Policy (CONSOLE_CSP) and `Referrer-Policy: no-referrer`, and an error
 * handler. The console is a page that uses only the public API with a token, like any client.
 *
 * What is on disk is served, so a new `npm run build` is served at once, page and bundles
 * together (routes made per file at start-up would serve the new page with no route for its new
 * bundles). A path that is not a file is the service's ordinary `404 Route not found`, also one
 * that `send` refuses (`..`, encoded or not: `refusedPathIsNotFound`, as under /docs/static/),
 * and another method the ordinary 405. The bundles' names carry a hash of their content, so
 * they may be cached for good; the page itself is checked again on every load. The routes are
 * hidden from the OpenAPI document: they are not the API.
 *
 * Without a build (a test run straight from the sources) the console is not served, and the
 * log says so once.
 *
 * @see https://github.com/fastify/fastify-static
 */
import { existsSync } from 'node:fs'
import { join, relative, sep } from 'node:path'
import fastifyStatic from '@fastify/static'
import fp from 'fastify-plugin'
import { refusedPathIsNotFound } from '../../src/errors.js'
import { PROJECT_ROOT } from '../../src/project-root.js'

/** Where `npm run build` puts the console (console/vite.config.mts). */
export const CONSOLE_DIR = join(PROJECT_ROOT, 'dist', 'console')
/**
 * Where the console is served. `npm run dev` (tools/dev.ts) reads it from the built service to
 * print the console's address, by a path that no import names (hence the tag for knip).
 * @public
 */
export const CONSOLE_PATH = '/console/'

/**
 * The console's pages may load and call nothing but this service: no inline script or style, no
 * other origin, no frames around them. Every text from the API is written as text (textContent),
 * so this is the second line against a title such as `<img src=x onerror=...>`, not the first.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  // The worker that sorts a long list (console/sort-worker.ts)
  "worker-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join('; ')

export default fp<{ directory?: string }>(async function consolePages (fastify, { directory = CONSOLE_DIR }) {
  if (!existsSync(join(directory, 'index.html'))) {
    fastify.log.warn({ directory }, 'console not built (npm run build): /console/ is not served')
    return
  }
  // Encapsulated: the header hook and the error handler stay with the console's routes
  await fastify.register(async function console (pages) {
    pages.setErrorHandler(refusedPathIsNotFound)
    pages.addHook('onSend', function (request, reply, payload, done) {
      reply.header('content-security-policy', CONSOLE_CSP)
      reply.header('referrer-policy', 'no-referrer')
      done(null, payload)
    })
    pages.get('/console', { schema: { hide: true } }, async function (request, reply) {
      return reply.redirect(CONSOLE_PATH, 301)
    })
    await pages.register(fastifyStatic, {
      root: directory,
      prefix: CONSOLE_PATH,
      decorateReply: false,
      dotfiles: 'ignore',
      cacheControl: false,
      setHeaders (reply, path) {
        // Where the file is under the directory served, whatever directories hold that one
        const hashed = relative(directory, path).startsWith(`assets${sep}`)
        reply.header('cache-control', hashed ? 'public, max-age=31536000, immutable' : 'no-cache')
      }
    })
  })
}, { name: 'console' })

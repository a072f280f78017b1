/**
 * Adds the routes of @fastify/swagger-ui: the interactive reference at `GET /docs`, and its own
 * routes (`/docs/static/*`, `/docs/json`, `/docs/yaml`), hidden from the OpenAPI document. They
 * sit in an encapsulated plugin with an error handler of their own: a path under `/docs/static/`
 * that `send` refuses is answered as a missing file is (`refusedPathIsNotFound`). What the plugin
 * decorates (`swaggerCSP`) and its `onSend` hook (the Content-Security-Policy) stay there too.
 *
 * From the files of the installed package only: the base layout (no top bar with its outside
 * link and URL box), no online validator, and a Content-Security-Policy that lets the page load
 * nothing from anywhere else.
 *
 * @see https://github.com/fastify/fastify-swagger-ui
 */
import fastifySwaggerUi from '@fastify/swagger-ui'
import fp from 'fastify-plugin'
import { refusedPathIsNotFound } from '../../src/errors.js'

export default fp(async function swaggerUi (fastify) {
  // Encapsulated, so that the documentation routes alone get this error handler
  await fastify.register(async function documentation (docs) {
    docs.setErrorHandler(refusedPathIsNotFound)
    await docs.register(fastifySwaggerUi, {
      routePrefix: '/docs',
      validatorUrl: false,
      uiConfig: { layout: 'BaseLayout', deepLinking: true },
      theme: { title: 'bookkeeping API' },
      staticCSP: {
        'default-src': "'self'",
        'base-uri': "'self'",
        'connect-src': "'self'",
        'font-src': "'self' data:",
        'form-action': "'self'",
        'frame-ancestors': "'self'",
        'img-src': "'self' data:",
        'object-src': "'none'",
        'script-src': "'self'",
        'script-src-attr': "'none'",
        'style-src': "'self'"
      }
    })
  })
}, { name: 'swagger-ui', dependencies: ['swagger'] })

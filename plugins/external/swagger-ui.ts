import fastifySwaggerUi from '@fastify/swagger-ui'
import fp from 'fastify-plugin'
import { refusedPathIsNotFound } from '../../src/errors.js'

/**
 * The interactive reference at `GET /docs`, from the files of the installed package only: the
 * base layout (no top bar with its outside link and URL box), no online validator, and a
 * Content-Security-Policy that lets the page load nothing from anywhere else. Its own routes
 * (`/docs/static/*`, `/docs/json`, `/docs/yaml`) are hidden from the document.
 *
 * A path under `/docs/static/` that `send` refuses is answered as a missing file is
 * (`refusedPathIsNotFound`).
 *
 * @see https://github.com/fastify/fastify-swagger-ui
 */
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

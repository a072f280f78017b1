/**
 * Adds `fastify.swagger()` (@fastify/swagger, whose `onRoute` hook collects the routes registered
 * after this plugin) and the route `GET /openapi.json`, which serves what it returns: the OpenAPI
 * 3.1 document of those routes, built from their schemas (summary, tags, security, every response
 * with its messages as examples). 3.1, not 3.0: its schemas are JSON Schema 2020-12, so the route
 * schemas appear as they are (`data: null` stays `type: 'null'`). Routes with `schema.hide` (this
 * one, those of /docs) are left out.
 *
 * @see https://github.com/fastify/fastify-swagger
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import fastifySwagger from '@fastify/swagger'
import fp from 'fastify-plugin'
import { PROJECT_ROOT } from '../../src/project-root.js'

export default fp(async function swagger (fastify) {
  await fastify.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'bookkeeping',
        version: (JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }).version,
        description: 'Book records behind signed tokens. Every response is the envelope ' +
          '`{status, message, data}`; `data` is null on every error.'
      },
      tags: [
        { name: 'token', description: 'A token for the book operations, in exchange for the credentials' },
        { name: 'books', description: 'Create, list, read, update and delete books (token required)' },
        { name: 'operations', description: 'For load balancers, orchestrators and metric scrapers' }
      ],
      components: {
        securitySchemes: {
          token: {
            type: 'apiKey',
            in: 'header',
            name: 'Authorization',
            description: 'The token from POST /token as the bare header value, without `Bearer `'
          }
        }
      }
    }
  })

  fastify.get('/openapi.json', { schema: { hide: true } }, async function () {
    return fastify.swagger()
  })
}, { name: 'swagger' })

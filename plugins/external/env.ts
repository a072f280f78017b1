import fastifyEnv from '@fastify/env'
import { ConfigSchema, type Config } from '../../src/config.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

/**
 * Validates the environment against `ConfigSchema` and exposes it as `fastify.config`.
 * Its error names each offending variable (`env must have required property 'DB_URL'`).
 * fastify-cli has already loaded a `.env` file, if any, into the environment.
 *
 * @see https://github.com/fastify/fastify-env
 */
export default fastifyEnv

export const autoConfig = {
  confKey: 'config',
  schema: ConfigSchema,
  dotenv: false
}

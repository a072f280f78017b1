import fastifyEnv from '@fastify/env'
import fp from 'fastify-plugin'
import { ConfigSchema, type Config, type ConfigInput } from '../../src/config.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

export interface EnvOptions {
  /** Values to read instead of the environment (a test's build); absent, `process.env`. */
  environment?: ConfigInput
}

/**
 * Validates the configuration against `ConfigSchema` and exposes it as `fastify.config`. Its
 * error names each offending variable (`env must have required property 'DB_URL'`).
 * fastify-cli has already loaded a `.env` file, if any, into the environment. A build given its
 * own `environment` reads only that, so builds side by side in one process each see their own.
 *
 * @see https://github.com/fastify/fastify-env
 */
export default fp<EnvOptions>(async function env (fastify, { environment }) {
  await fastify.register(fastifyEnv, {
    confKey: 'config',
    schema: ConfigSchema,
    dotenv: false,
    ...(environment === undefined ? {} : { env: false, data: environment })
  })
}, { name: 'env' })

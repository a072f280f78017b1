/**
 * Adds `fastify.config`: the configuration, validated against `ConfigSchema` by @fastify/env
 * (which also adds `fastify.getEnvs` and `request.getEnvs`, unused here). A value that fails
 * stops the start-up with an error that names each offending variable, what it holds and what
 * it should hold (`describeConfigErrors`). fastify-cli has already loaded a `.env` file, if any,
 * into the environment. A build given its own `environment` reads only that, so builds side by
 * side in one process each see their own.
 *
 * @see https://github.com/fastify/fastify-env
 */
import fastifyEnv from '@fastify/env'
import fp from 'fastify-plugin'
import { ConfigSchema, describeConfigErrors, type Config, type ConfigError, type ConfigInput } from '../../src/config.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

export interface EnvOptions {
  /** Values to read instead of the environment (a test's build); absent, `process.env`. */
  environment?: ConfigInput
}

export default fp<EnvOptions>(async function env (fastify, { environment }) {
  try {
    await fastify.register(fastifyEnv, {
      confKey: 'config',
      schema: ConfigSchema,
      dotenv: false,
      ...(environment === undefined ? {} : { env: false, data: environment })
    })
  } catch (err) {
    const described = describeConfigErrors((err as { errors?: ConfigError[] }).errors ?? [], environment ?? process.env)
    throw described === '' ? err : new Error(described, { cause: err })
  }
}, { name: 'env' })

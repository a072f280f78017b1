/**
 * What `fastify start` reads besides the command line (its `-c` option): where to listen and at
 * which level to log, from `PORT`, `HOST` and `LOG_LEVEL`, with the defaults of src/config.ts.
 * fastify-cli loads this module after it has loaded a `.env` file, so those three are read like
 * every other variable. An invalid value is left to the app, whose configuration schema
 * names the variable at start-up. fastify-cli `require`s the module: its named exports are the
 * options (Node.js loads an ES module for `require` as its namespace object).
 */
import { DEFAULT_HOST, DEFAULT_LOG_LEVEL, DEFAULT_PORT, LOG_LEVELS } from './config.js'

const level = process.env.LOG_LEVEL

// Named exports: fastify-cli `require`s this file and takes its properties, which are the
// exports themselves whether it is compiled to CommonJS or, required, an ES module.
// An empty value counts as unset, as it did in the shell's `${PORT:-8080}`
export const port = process.env.PORT || String(DEFAULT_PORT)
export const address = process.env.HOST || DEFAULT_HOST
// The logger is made before the app checks its configuration, and pino would throw its own
// words at an unknown level; with the default instead, the app's check names LOG_LEVEL
export const logLevel = LOG_LEVELS.find((known) => known === level) ?? DEFAULT_LOG_LEVEL

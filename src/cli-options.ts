/**
 * What `fastify start` reads besides the command line (its `-c` option): where to listen and at
 * which level to log, from `PORT`, `HOST` and `LOG_LEVEL`, with the defaults of src/config.ts.
 * fastify-cli loads this module after it has loaded a `.env` file, so those three are read like
 * every other variable. An invalid value still reaches the app, whose configuration schema
 * names the variable at start-up.
 */
import { DEFAULT_HOST, DEFAULT_LOG_LEVEL, DEFAULT_PORT } from './config.js'

// An empty value counts as unset, as it did in the shell's `${PORT:-8080}`
export = {
  port: process.env.PORT || String(DEFAULT_PORT),
  address: process.env.HOST || DEFAULT_HOST,
  logLevel: process.env.LOG_LEVEL || DEFAULT_LOG_LEVEL
}

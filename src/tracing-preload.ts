/**
 * Preloaded by `npm start` (`fastify start -r`, first) and so by `npm run dev` and every tool and
 * test that starts the service: tracing, when an OTLP endpoint is configured
 * (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, and not
 * OTEL_SDK_DISABLED=true; docs/operations.md, Tracing). Otherwise it does nothing and loads
 * nothing: no module of OpenTelemetry enters the process.
 *
 * On, it starts the SDK (src/tracing-sdk.ts) before the app's first import. The instrumentation
 * of `pg` patches the module as it is loaded: required (as @fastify/postgres does) through the
 * require hook the SDK installs, imported (an ES module's `import pg from 'pg'`) through
 * the loader hook of @opentelemetry/instrumentation (import-in-the-middle's), registered here for
 * `pg` and `pg-pool` alone, so that no other module is wrapped. fastify-cli `require`s its
 * preloads: this module and the SDK's load synchronously (no top-level await).
 */
import { createRequire, register } from 'node:module'

const env = process.env
const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT

if (endpoint && env.OTEL_SDK_DISABLED?.trim().toLowerCase() !== 'true') {
  const require = createRequire(import.meta.url)
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include: ['pg', 'pg-pool'] } })
  try {
    require('./tracing-sdk.js')
  } catch (err) {
    // As every failed start-up ends (src/start-failure.ts): one line that says what to change
    process.stderr.write(`bookkeeping: start-up failed: tracing: ${(err as Error).message}\n`)
    process.exit(1)
  }
}

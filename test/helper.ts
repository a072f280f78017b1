/**
 * The app as `fastify start -o` builds it, for tests through `inject`: each build with its own
 * configuration, on its own database, closed when its test ends.
 */
import { fileURLToPath } from 'node:url'
import { build as buildApplication } from 'fastify-cli/helper.js'
import type { FastifyInstance, FastifyServerOptions, InjectOptions, LightMyRequestResponse } from 'fastify'
import type { Test } from 'tap'
import type { AppOptions } from '../src/app.js'
import type { ConfigInput } from '../src/config.js'
import { STORE, createDatabase } from './helpers/database.js'

/** The app's module, as the tests run it (test/build.js) */
const APP_PATH = fileURLToPath(new URL('../src/app.js', import.meta.url))
export const USERNAME = 'librarian'
export const PASSWORD = 'correct horse battery staple'
export const SECRET = 'test-secret-that-is-at-least-32-bytes-long!'

/** The configuration the service gets in tests, on the database at `dbUrl`. */
export function testEnv (dbUrl: string): Record<string, string> {
  return {
    DB_URL: dbUrl,
    SECRET_TOKEN: SECRET,
    AUTH_USERNAME: USERNAME,
    AUTH_PASSWORD: PASSWORD,
    // Far above what any test file sends; test/app/rate-limit.test.ts checks the limit
    TOKEN_RATE_LIMIT: '10000',
    TOKEN_USERNAME_RATE_LIMIT: '10000',
    // As the service does itself for `pglite:` URLs: PGlite's one session cannot hold the same
    // prepared statements for two connections
    ...(STORE === 'pglite' ? { DB_POOL_MAX: '1' } : {}),
    // TEST_DB_DIALECT=citus: the SQL for Citus, on whatever store the tests run on (npm run test:citus-sql)
    ...(process.env.TEST_DB_DIALECT === undefined ? {} : { DB_DIALECT: process.env.TEST_DB_DIALECT })
  }
}

/**
 * The app as `fastify start -o` builds it (same plugin, same server options), on `dbUrl` or a
 * fresh database, with `env` over the test configuration and `serverOptions` under the app's own
 * (the app's win), closed when the test ends. The configuration goes to this build alone: the
 * process environment is neither read nor written.
 */
export async function build (
  t: Test, dbUrl?: string, env: ConfigInput = {}, serverOptions: FastifyServerOptions = {}
): Promise<FastifyInstance> {
  const appOptions: AppOptions = { environment: { ...testEnv(dbUrl ?? await createDatabase(t)), ...env } }
  const app = await buildApplication(['-o', APP_PATH], appOptions, serverOptions) as unknown as FastifyInstance
  t.teardown(() => app.close())
  return app
}

export async function getToken (app: FastifyInstance): Promise<string> {
  const response = await app.inject({
    method: 'POST',
    url: '/token',
    payload: { username: USERNAME, password: PASSWORD }
  })
  return response.json().data.token
}

/** POST /token with `payload` as its JSON body (a string is sent as it is). */
export function postToken (app: FastifyInstance, payload: unknown, headers: Record<string, string> = {}) {
  return app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload)
  })
}

/** Runs an inject with the token set, returning status and parsed body. */
export async function call (app: FastifyInstance, token: string, options: InjectOptions) {
  const response = await app.inject({
    ...options,
    headers: { authorization: token, ...options.headers }
  })
  return { status: response.statusCode, body: response.json(), headers: response.headers }
}

/** The envelope of an error: its status, its message, no data. */
export function errorEnvelope (status: number, message: string) {
  return { status, message, data: null }
}

/**
 * Asserts an answer: the HTTP status, a JSON body, and exactly the envelope `{status, message,
 * data}` with that status.
 */
export function expectEnvelope (t: Test, response: LightMyRequestResponse, status: number, message: string, data: unknown = null) {
  t.equal(response.statusCode, status, `HTTP ${status}`)
  t.match(response.headers['content-type'], /^application\/json/, 'JSON body')
  const body = response.json()
  t.strictSame(Object.keys(body).sort(), ['data', 'message', 'status'], 'exactly the envelope keys')
  t.strictSame(body, { status, message, data }, `envelope ${status} ${message}`)
}

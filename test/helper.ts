import { randomBytes } from 'node:crypto'
import { build as buildApplication } from 'fastify-cli/helper.js'
import type { FastifyInstance, FastifyServerOptions, InjectOptions } from 'fastify'
import pg from 'pg'
import type { Test } from 'tap'

export const ADMIN_URL = process.env.TEST_DB_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
export const APP_PATH = 'src/app.ts'
export const USERNAME = 'librarian'
export const PASSWORD = 'correct horse battery staple'
export const SECRET = 'test-secret-that-is-at-least-32-bytes-long!'

/** `postgres://...` of a database named `name` on the admin URL's server. */
export function databaseUrl (name: string): string {
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  return url.toString()
}

async function admin<T> (fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL })
  await client.connect()
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}

/** A fresh, empty database for this test file, dropped when the file ends. */
export async function createDatabase (t: Test): Promise<string> {
  const name = `bookkeeping_test_${process.pid}_${randomBytes(4).toString('hex')}`
  await admin((client) => client.query(`CREATE DATABASE ${name}`))
  t.teardown(() => admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)))
  return databaseUrl(name)
}

/** The environment the service is started with in tests. */
export function testEnv (dbUrl: string): Record<string, string> {
  return {
    DB_URL: dbUrl,
    SECRET_TOKEN: SECRET,
    AUTH_USERNAME: USERNAME,
    AUTH_PASSWORD: PASSWORD,
    // Far above what any test file sends; test/operations.test.ts checks the limit itself
    TOKEN_RATE_LIMIT: '10000'
  }
}

/**
 * The app as `fastify start -o` builds it (same plugin, same server options), on `dbUrl` or a
 * fresh database, with `env` over the test environment and `serverOptions` under the app's own
 * (the app's win), closed when the test ends.
 */
export async function build (
  t: Test, dbUrl?: string, env: Record<string, string> = {}, serverOptions: FastifyServerOptions = {}
): Promise<FastifyInstance> {
  Object.assign(process.env, testEnv(dbUrl ?? await createDatabase(t)), env)
  const app = await buildApplication(['-o', APP_PATH], {}, serverOptions) as unknown as FastifyInstance
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

/** Runs an inject with the token set, returning status and parsed body. */
export async function call (app: FastifyInstance, token: string, options: InjectOptions) {
  const response = await app.inject({
    ...options,
    headers: { authorization: token, ...options.headers }
  })
  return { status: response.statusCode, body: response.json(), headers: response.headers }
}

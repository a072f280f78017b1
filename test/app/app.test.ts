/**
 * The root plugin: not encapsulated, so what it decorates is visible on the instance fastify-cli
 * creates; each build reads the configuration it is given, not the process environment; the
 * logger's redaction.
 */
import t from 'tap'
import { build, PASSWORD, SECRET } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'

t.test('the app\'s decorators are visible on the root instance', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)
  for (const name of ['config', 'pg', 'sqlDialect', 'readBudget', 'booksRepository', 'listingsRepository', 'changeLog', 'idempotencyKeys', 'metrics', 'jwt', 'authenticate', 'isClosing']) {
    t.ok(app.hasDecorator(name), `app.${name}`)
  }
  t.equal(typeof app.booksRepository.find, 'function', 'the repository itself, not a copy in a child context')
  t.equal((await app.pg.query('SELECT 1 AS one')).rows[0].one, 1, 'app.pg reaches the database')
  t.equal(app.isClosing(), false, 'not closing while running')
})

t.test('two builds in one process each read their own configuration; the environment is untouched', { skip: STORE_INDEPENDENT }, async (t) => {
  const environmentBefore = { ...process.env }
  const dbUrl = await createDatabase(t)
  const first = await build(t, dbUrl, { TOKEN_RATE_LIMIT: '7', CORS_ORIGINS: 'https://a.example' })
  const second = await build(t, dbUrl, { TOKEN_RATE_LIMIT: '9' })
  t.equal(first.config.TOKEN_RATE_LIMIT, 7, 'the first build sees its own value')
  t.equal(second.config.TOKEN_RATE_LIMIT, 9, 'the second its own')
  t.equal(first.config.CORS_ORIGINS, 'https://a.example')
  t.equal(second.config.CORS_ORIGINS, '', 'a value given to the first build only is not seen by the second')
  const preflight = (app: typeof first) => app.inject({
    method: 'OPTIONS', url: '/books', headers: { origin: 'https://a.example', 'access-control-request-method': 'GET' }
  })
  t.equal((await preflight(first)).statusCode, 204, 'the first build answers CORS as configured')
  t.equal((await preflight(second)).statusCode, 405, 'the second has CORS off')
  t.strictSame({ ...process.env }, environmentBefore, 'building wrote nothing into process.env')
})

t.test('a build does not read the process environment', { skip: STORE_INDEPENDENT }, async (t) => {
  // A variable the test configuration does not set: were the environment read, the build would see it
  process.env.CORS_ORIGINS = 'https://from-the-environment.example'
  t.teardown(() => { delete process.env.CORS_ORIGINS })
  const app = await build(t)
  t.equal(app.config.CORS_ORIGINS, '', 'the default, not the environment\'s value')
})

t.test('the logger censors secrets should a line ever carry them', { skip: STORE_INDEPENDENT }, async (t) => {
  const lines: string[] = []
  const stream = { write: (line: string) => { lines.push(line) } }
  const app = await build(t, undefined, {}, { logger: { level: 'info', stream } })
  app.log.info({
    req: { headers: { authorization: 'header-token' } },
    password: 'top-level-password',
    body: { password: 'body-password', token: 'body-token' },
    config: { SECRET_TOKEN: SECRET, SECRET_TOKEN_ACCEPTED: 'an-accepted-secret-at-least-32-bytes-long', AUTH_PASSWORD: PASSWORD, DB_URL: 'postgres://u:db-password@h/d' }
  }, 'probe')
  const probe = lines.find((line) => line.includes('"probe"')) ?? ''
  t.match(probe, /\[redacted\]/, 'the probe line was written, censored')
  for (const secret of ['header-token', 'top-level-password', 'body-password', 'body-token', SECRET, 'an-accepted-secret', PASSWORD, 'db-password']) {
    t.notOk(probe.includes(secret), `no ${secret.slice(0, 12)}... in the line`)
  }
})

/**
 * Every way a start-up fails ends with one line on stderr that names the cause and the variable
 * to change, and exit code 1 (src/start-failure.ts, src/start-up.ts, describeConfigErrors in
 * src/config.ts): before the app has loaded (configuration, the log level the logger is made
 * with, a REDIS_URL it cannot use), once it has (a port that is taken, an address this machine
 * does not have; the admin port's in test/process/admin-port.test.ts), and in
 * `npm run dev`'s own set-up. Real processes, real listeners in the way.
 * docs/troubleshooting.md lists these lines and their fixes.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PASSWORD, SECRET, testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { clusterState, DB_SHUTDOWNED, DEV_COMMAND, expectStartupFailure, portInUse, temporaryDirectory } from '../helpers/service.js'

t.jobs = 2

t.test('before the app has loaded', { skip: STORE_INDEPENDENT }, async (t) => {
  // Six failed starts, nothing shared but the database none of them may come up on: three at once
  t.jobs = 3
  // A real, empty database: were a check missing, the service would come up on it
  const valid = testEnv(await createDatabase(t))
  t.test('an unknown LOG_LEVEL is named with the levels there are, not in pino\'s words', (t) =>
    expectStartupFailure(t, { ...valid, LOG_LEVEL: 'verbose' },
      /^bookkeeping: start-up failed: LOG_LEVEL is "verbose"; set LOG_LEVEL to one of fatal, error, warn, info, debug, trace, silent$/,
      { secrets: [SECRET, PASSWORD] }))
  t.test('a DB_URL that is not a URL is named with the forms it takes, not a regular expression', (t) =>
    expectStartupFailure(t, { ...valid, DB_URL: 'localhost:5432' },
      /^bookkeeping: start-up failed: DB_URL is "localhost:5432"; set DB_URL to postgres:\/\/user:password@host:port\/database, pglite:<directory> or pglite:memory$/,
      { secrets: [SECRET, PASSWORD] }))
  t.test('the password in a mistyped DB_URL is masked', (t) =>
    expectStartupFailure(t, { ...valid, DB_URL: 'postgress://bookkeeping:hunter2-db@db.example/books' },
      /^bookkeeping: start-up failed: DB_URL is "postgress:\/\/bookkeeping:\*\*\*@db\.example\/books"; set DB_URL to /,
      { secrets: [SECRET, PASSWORD, 'hunter2-db'] }))
  t.test('a short secret (one byte short) is named by its length only, and every bad variable is named', (t) =>
    expectStartupFailure(t, { ...valid, SECRET_TOKEN: SECRET.slice(0, 31), PORT: 'eighty' },
      /^bookkeeping: start-up failed: SECRET_TOKEN is 31 characters long; set SECRET_TOKEN to a random string of at least 32 characters .*; PORT is "eighty"; set PORT to a port number/,
      { secrets: [SECRET.slice(0, 31), PASSWORD] }))
  t.test('an accepted secret one byte short is named by the lengths of the list only', (t) =>
    expectStartupFailure(t, { ...valid, SECRET_TOKEN_ACCEPTED: `${SECRET},${SECRET.slice(0, 31)}` },
      /^bookkeeping: start-up failed: SECRET_TOKEN_ACCEPTED is 2 secrets, 43, 31 characters long; set SECRET_TOKEN_ACCEPTED to secrets separated by commas, each a random string of at least 32 characters without a comma or a space at either end; empty for none$/,
      { secrets: [SECRET, SECRET.slice(0, 31), PASSWORD] }))
  t.test('nothing set at all (npm start on a fresh clone)', (t) =>
    expectStartupFailure(t, {},
      /^bookkeeping: start-up failed: DB_URL is not set; set DB_URL to .*; SECRET_TOKEN is not set; .*; AUTH_USERNAME is not set; .*; AUTH_PASSWORD is not set; /))
})

t.test('an invalid REDIS_URL is named, without its password', { skip: STORE_INDEPENDENT }, async (t) => {
  const valid = testEnv(await createDatabase(t))
  const secret = 'redis-password-that-must-stay-private'
  for (const value of [`redis://:${secret}@127.0.0.1:99999`, `redis://:${secret}@127.0.0.1:6379/0?db=1`]) {
    t.test(value.replace(secret, '...'), (t) =>
      expectStartupFailure(t, { ...valid, REDIS_URL: value }, /^bookkeeping: start-up failed: .*REDIS_URL/, { secrets: [secret, SECRET, PASSWORD] }))
  }
})

t.test('once the app has loaded: where to listen', { skip: STORE_INDEPENDENT }, async (t) => {
  const valid = testEnv(await createDatabase(t))
  t.test('a port in use names PORT', async (t) => {
    const port = await portInUse(t)
    await expectStartupFailure(t, { ...valid, PORT: String(port) },
      new RegExp(`^bookkeeping: start-up failed: port ${port} on 127\\.0\\.0\\.1 is already in use by another process; stop that process or set PORT to a free port$`),
      { secrets: [SECRET, PASSWORD] })
  })
  t.test('an address this machine does not have names HOST', (t) =>
    // 192.0.2.0/24 is reserved for documentation (RFC 5737): no machine has it
    expectStartupFailure(t, { ...valid, HOST: '192.0.2.1' },
      /^bookkeeping: start-up failed: 192\.0\.2\.1 is not an address of this machine; set HOST to one of its addresses/,
      { secrets: [SECRET, PASSWORD] }))
  t.test('a host name that does not resolve names HOST', (t) =>
    // .invalid never resolves (RFC 2606)
    expectStartupFailure(t, { ...valid, HOST: 'bookkeeping.invalid' },
      /^bookkeeping: start-up failed: HOST "bookkeeping\.invalid" does not resolve to an address \(\w+\); set HOST to an address of this machine$/,
      { secrets: [SECRET, PASSWORD] }))
})

t.test('npm run dev', { skip: STORE_INDEPENDENT }, async (t) => {
  t.test('a second npm run dev on a port in use names PORT, and the embedded database closes cleanly', async (t) => {
    const dataDir = temporaryDirectory(t)
    const port = await portInUse(t)
    await expectStartupFailure(t, { DEV_DATA_DIR: dataDir, HOST: undefined, PORT: String(port) },
      new RegExp(`^bookkeeping: start-up failed: port ${port} on 127\\.0\\.0\\.1 is already in use by another process; stop that process or set PORT to a free port$`),
      { command: DEV_COMMAND })
    t.equal(clusterState(join(dataDir, 'pglite')), DB_SHUTDOWNED, 'the database it had opened was shut down, not left to recover')
  })
  t.test('a development data directory that cannot be written names DEV_DATA_DIR', async (t) => {
    const file = join(temporaryDirectory(t), 'a-file')
    writeFileSync(file, '')
    await expectStartupFailure(t, { DEV_DATA_DIR: join(file, 'data') },
      /^bookkeeping: start-up failed: cannot keep the development data in \S+\/a-file\/data \(ENOTDIR\); set DEV_DATA_DIR to a directory you can write$/,
      { command: DEV_COMMAND })
  })
  t.test('damaged kept credentials are named, and left as they are', async (t) => {
    const dataDir = temporaryDirectory(t)
    mkdirSync(dataDir, { recursive: true })
    writeFileSync(join(dataDir, 'dev-credentials.json'), '{"SECRET_TOKEN": "trunc')
    await expectStartupFailure(t, { DEV_DATA_DIR: dataDir },
      /^bookkeeping: start-up failed: \S+\/dev-credentials\.json is not valid JSON; repair it, or delete it for a new secret and password$/,
      { command: DEV_COMMAND })
    t.equal(readFileSync(join(dataDir, 'dev-credentials.json'), 'utf8'), '{"SECRET_TOKEN": "trunc', 'not overwritten')
  })
})

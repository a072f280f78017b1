/**
 * src/cli-options.ts reads PORT, HOST and LOG_LEVEL once, when it is loaded. A child Node.js,
 * with an environment of its own, loads it afresh for each case (from the JavaScript the tests
 * run, test/build.js), so nothing writes into this process's `process.env`.
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { DEFAULT_HOST, DEFAULT_LOG_LEVEL, DEFAULT_PORT } from '../../src/config.js'

// Beside this file, as the tests run it: no loader needed
const MODULE = new URL('../../src/cli-options.js', import.meta.url).href

type Environment = { PORT?: string, HOST?: string, LOG_LEVEL?: string }

const CASES = {
  given: { PORT: '3000', HOST: '127.0.0.1', LOG_LEVEL: 'debug' },
  none: {},
  onlyPort: { PORT: '3000' },
  onlyHost: { HOST: '::1' },
  onlyLevel: { LOG_LEVEL: 'warn' },
  empty: { PORT: '', HOST: '', LOG_LEVEL: '' },
  invalid: { PORT: 'eighty', HOST: ' ', LOG_LEVEL: 'loud' }
} satisfies Record<string, Environment>

/**
 * Run in one child for all cases (one start-up instead of seven): for each case, the child sets
 * its own three variables to the case's and loads the module afresh (a URL of its own per case).
 */
const CHILD = `
const [cases, module] = JSON.parse(process.argv[1])
const loaded = {}
for (const [name, env] of Object.entries(cases)) {
  for (const variable of ['PORT', 'HOST', 'LOG_LEVEL']) {
    if (variable in env) process.env[variable] = env[variable]
    else delete process.env[variable]
  }
  loaded[name] = { ...await import(module + '?' + name) }
}
process.stdout.write(JSON.stringify(loaded))
`

async function loadAll (): Promise<Record<keyof typeof CASES, unknown>> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', CHILD, JSON.stringify([CASES, MODULE])], {
    // Nothing of this environment: the three variables are the cases' alone
    env: {}
  })
  return JSON.parse(stdout)
}

const DEFAULTS = { port: String(DEFAULT_PORT), address: DEFAULT_HOST, logLevel: DEFAULT_LOG_LEVEL }

// Started now, while the first tests run
const loading = loadAll()

t.test('the defaults are those of src/config.ts: port 8080 (a string), 0.0.0.0, info', async (t) => {
  t.strictSame(DEFAULTS, { port: '8080', address: '0.0.0.0', logLevel: 'info' })
})

t.test('PORT, HOST and LOG_LEVEL given are passed on as they are, under port, address and logLevel', async (t) => {
  t.strictSame((await loading).given, { port: '3000', address: '127.0.0.1', logLevel: 'debug' })
})

t.test('unset, each of PORT, HOST and LOG_LEVEL takes its default from src/config.ts', async (t) => {
  t.strictSame((await loading).none, DEFAULTS, 'none set')
  t.strictSame((await loading).onlyPort, { ...DEFAULTS, port: '3000' }, 'only PORT set')
  t.strictSame((await loading).onlyHost, { ...DEFAULTS, address: '::1' }, 'only HOST set')
  t.strictSame((await loading).onlyLevel, { ...DEFAULTS, logLevel: 'warn' }, 'only LOG_LEVEL set')
})

t.test('an empty PORT, HOST or LOG_LEVEL counts as unset', async (t) => {
  t.strictSame((await loading).empty, DEFAULTS)
})

t.test('an invalid port or address is passed on unchanged, an unknown level as the default, for the app\'s configuration schema to report', async (t) => {
  // pino would refuse the unknown level in its own words before the app could name LOG_LEVEL
  t.strictSame((await loading).invalid, { port: 'eighty', address: ' ', logLevel: DEFAULT_LOG_LEVEL })
})

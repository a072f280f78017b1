/**
 * `npm run dev`: the service on this machine with nothing set up. Every variable that is not
 * set (in the environment or in a `.env` file) gets a development value: the embedded database
 * with its data in ./data/pglite, a signing secret and credentials generated once and kept in
 * ./data/dev-credentials.json (so tokens and the password survive a restart), and 127.0.0.1 to
 * listen on (the password is printed: this machine only). DEV_DATA_DIR puts ./data elsewhere.
 * It prints what it chose, starts the server in this very process with package.json's own
 * `start` arguments, through fastify-cli's documented `listen` (the same start-up as `fastify
 * start`; no wrapper process stands between a signal and the server, so a terminal's Ctrl-C
 * reaches it as it reaches `npm start`), and once it listens prints the two lines the README's
 * walk-through starts from. `npm start` itself still requires every variable.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { PROJECT_ROOT as ROOT } from '../src/project-root.js'

/** A module of the built service (dist/): the very one the server loads, not a copy of the tools'. */
const builtService = (file: string): Promise<unknown> => import(pathToFileURL(path.join(ROOT, 'dist', file)).href)
// First: a failure from here on is one line on stderr, as under `npm start`
await builtService('src/start-failure.js')
const { CONSOLE_PATH } = await builtService('plugins/app/console.js') as { CONSOLE_PATH: string }

const DATA_DIR = process.env.DEV_DATA_DIR ? path.resolve(process.env.DEV_DATA_DIR) : path.join(ROOT, 'data')
const CREDENTIALS = path.join(DATA_DIR, 'dev-credentials.json')

interface Credentials {
  SECRET_TOKEN: string
  AUTH_USERNAME: string
  AUTH_PASSWORD: string
}

function developmentCredentials (): Credentials {
  let kept: string
  try {
    kept = fs.readFileSync(CREDENTIALS, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw unusableDataDir(err)
    return generatedCredentials()
  }
  try {
    return JSON.parse(kept) as Credentials
  } catch {
    // Not overwritten: the secret signed the tokens in use, and the password may be written down
    throw new Error(`${CREDENTIALS} is not valid JSON; repair it, or delete it for a new secret and password`)
  }
}

function generatedCredentials (): Credentials {
  const generated = {
    SECRET_TOKEN: randomBytes(32).toString('base64url'),
    AUTH_USERNAME: 'dev',
    AUTH_PASSWORD: randomBytes(12).toString('base64url')
  }
  try {
    fs.mkdirSync(DATA_DIR, { recursive: true })
    fs.writeFileSync(CREDENTIALS, `${JSON.stringify(generated, null, 2)}\n`, { mode: 0o600 })
  } catch (err) {
    throw unusableDataDir(err)
  }
  return generated
}

function unusableDataDir (err: unknown): Error {
  return new Error(`cannot keep the development data in ${DATA_DIR} (${(err as NodeJS.ErrnoException).code}); set DEV_DATA_DIR to a directory you can write`)
}

/** `value` as one word of a POSIX shell, whatever it holds. */
function shellQuoted (value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`
}

/**
 * The two lines the README's walk-through starts from: where the service answers and the body
 * of its login, quoted for a shell, so the walk-through works as printed with these values;
 * then where the console is.
 */
function printWalkThrough (fastify: FastifyInstance): void {
  const { address, port } = fastify.server.address() as AddressInfo
  // Listening on every interface, the service answers on the loopback one too
  const host = address === '0.0.0.0' ? '127.0.0.1' : address === '::' ? '[::1]' : address.includes(':') ? `[${address}]` : address
  const login = JSON.stringify({ username: env.AUTH_USERNAME, password: env.AUTH_PASSWORD })
  process.stderr.write([
    '',
    '  Walk-through (README.md): paste these two lines into a shell, then the README\'s commands',
    `    BASE=http://${host}:${port}`,
    `    LOGIN=${shellQuoted(login)}`,
    '',
    `  Console: open http://${host}:${port}${CONSOLE_PATH} in a browser and sign in as ${env.AUTH_USERNAME}`,
    ''
  ].join('\n') + '\n')
}

// Where `npm start` runs, for the relative paths of its arguments and the `.env` file
process.chdir(ROOT)
// Read now, as fastify-cli reads it when it loads (filling in only what is unset, ignoring a file
// it cannot read): what `.env` sets gets no development value
try {
  process.loadEnvFile()
} catch {}

const env = process.env
const chosen: string[] = []
if (!env.HOST) {
  env.HOST = '127.0.0.1'
  chosen.push('HOST=127.0.0.1 (this machine only)')
}
if (!env.DB_URL) {
  env.DB_URL = `pglite:${path.join(DATA_DIR, 'pglite')}`
  chosen.push(`DB_URL=${env.DB_URL} (embedded PGlite, PostgreSQL in this process)`)
}
if (!env.SECRET_TOKEN || !env.AUTH_USERNAME || !env.AUTH_PASSWORD) {
  const credentials = developmentCredentials()
  for (const name of ['SECRET_TOKEN', 'AUTH_USERNAME', 'AUTH_PASSWORD'] as const) {
    if (env[name]) continue
    env[name] = credentials[name]
    chosen.push(name === 'SECRET_TOKEN'
      ? `SECRET_TOKEN=(generated, in ${path.relative(ROOT, CREDENTIALS)})`
      : `${name}=${credentials[name]}`)
  }
}
if (chosen.length > 0) {
  process.stderr.write([
    '',
    '  DEVELOPMENT SETUP, NOT FOR PRODUCTION: these were not set and got development values',
    ...chosen.map((line) => `    ${line}`),
    ''
  ].join('\n') + '\n')
}

// `npm start`'s arguments: package.json's `exec fastify start <arguments>`
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }
const startArguments = /^exec fastify start (.+)$/.exec(pkg.scripts.start)?.[1]
if (startArguments === undefined) throw new Error(`package.json's start script is not "exec fastify start ...": ${pkg.scripts.start}`)
// Imported here, after the chdir, not at the top (under ES modules a static import runs first):
// fastify-cli reads `.env` from the working directory as it loads
import('fastify-cli/helper.js')
  .then(({ default: { listen } }) => listen(startArguments.split(' ')))
  // A failed start-up rejects, and src/start-failure.ts reports it
  .then(printWalkThrough)

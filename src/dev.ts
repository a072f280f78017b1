/**
 * `npm run dev`: the service on this machine with nothing set up. Every variable that is not
 * set (in the environment or in a `.env` file) gets a development value: the embedded database
 * with its data in ./data/pglite, and a signing secret and credentials generated once and kept
 * in ./data/dev-credentials.json (so tokens and the password survive a restart). DEV_DATA_DIR
 * puts ./data elsewhere. It prints what it chose, then starts the server in this very process,
 * with package.json's own `start` arguments: no wrapper process stands between a signal and the
 * server, so a terminal's Ctrl-C reaches it as it reaches `npm start`. `npm start` itself still
 * requires every variable.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { DEFAULT_PORT } from './config.js'

const ROOT = path.resolve(__dirname, '..', '..')
const DATA_DIR = process.env.DEV_DATA_DIR ? path.resolve(process.env.DEV_DATA_DIR) : path.join(ROOT, 'data')
const CREDENTIALS = path.join(DATA_DIR, 'dev-credentials.json')

interface Credentials {
  SECRET_TOKEN: string
  AUTH_USERNAME: string
  AUTH_PASSWORD: string
}

function developmentCredentials (): Credentials {
  try {
    return JSON.parse(fs.readFileSync(CREDENTIALS, 'utf8')) as Credentials
  } catch {
    const generated = {
      SECRET_TOKEN: randomBytes(32).toString('base64url'),
      AUTH_USERNAME: 'dev',
      AUTH_PASSWORD: randomBytes(12).toString('base64url')
    }
    fs.mkdirSync(DATA_DIR, { recursive: true })
    fs.writeFileSync(CREDENTIALS, `${JSON.stringify(generated, null, 2)}\n`, { mode: 0o600 })
    return generated
  }
}

// Where `npm start` runs, for the relative paths of its arguments and the `.env` file, which
// fastify-cli loads as soon as it is required
process.chdir(ROOT)
const { start } = require('fastify-cli/start.js') as { start: (args: string[]) => Promise<unknown> }

const env = process.env
const chosen: string[] = []
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
    `  Get a token: curl -s -X POST localhost:${env.PORT || DEFAULT_PORT}/token -H 'content-type: application/json' \\`,
    `    -d '{"username":"${env.AUTH_USERNAME}","password":"${env.AUTH_PASSWORD}"}'`,
    ''
  ].join('\n') + '\n')
}

// `npm start`'s arguments: package.json's `exec fastify start <arguments>`
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }
const startArguments = /^exec fastify start (.+)$/.exec(pkg.scripts.start)?.[1]
if (startArguments === undefined) throw new Error(`package.json's start script is not "exec fastify start ...": ${pkg.scripts.start}`)
// A failed start-up is reported by the preloaded src/start-failure.ts, as under `npm start`
start(startArguments.split(' '))

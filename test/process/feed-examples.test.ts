/**
 * The feed clients of docs/api.md (docs/examples/feed.mjs and feed.py), run as the programs a
 * reader would start, so they cannot rot. Between client and service a TCP proxy cuts the
 * connection: each client resumes with Last-Event-ID and prints every change once, in order. It
 * starts with a token that expires within seconds: on `token-expired` it logs in again and
 * resumes. Started with an id the service does not accept (made with a secret it no longer
 * accepts), it is answered 400, starts again without one and reloads, and misses nothing after.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { changeIds } from '../../src/changes.js'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { PASSWORD, USERNAME, build, call, getToken } from '../helper.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import { mint, nowSeconds } from '../helpers/tokens.js'
import { sleep, waitUntil } from '../helpers/wait.js'

const EXAMPLES = join(PROJECT_ROOT, 'docs', 'examples')

interface Printed {
  id?: string
  event: string
  data?: { id: number, title?: string }
}

for (const [name, command, file] of [['JavaScript', 'node', 'feed.mjs'], ['Python', 'python3', 'feed.py']] as const) {
  t.test(`${name}: every change once, across a dropped connection and an expired token`, { skip: STORE_INDEPENDENT }, async (t: Test) => {
    const app = await build(t)
    await app.listen({ port: 0, host: '127.0.0.1' })
    const token = await getToken(app)
    const proxy = await TcpProxy.start(t, (app.server.address() as { port: number }).port)
    const create = async (title: string) => (await call(app, token, { method: 'POST', url: '/book', payload: { title, author: 'A', year: 2000 } })).body.data.id as number

    // The token the client starts with expires at this second
    const exp = nowSeconds() + 4
    const child = spawn(command, [join(EXAMPLES, file)], {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/tmp',
        BOOKKEEPING_URL: `http://127.0.0.1:${proxy.port}`,
        BOOKKEEPING_USERNAME: USERNAME,
        BOOKKEEPING_PASSWORD: PASSWORD,
        BOOKKEEPING_TOKEN: mint({ payload: { exp } })
      },
      stdio: ['ignore', 'pipe', 'pipe']
    })
    t.teardown(() => { child.kill('SIGKILL') })
    const printed: Printed[] = []
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk
      const lines = stdout.split('\n')
      stdout = lines.pop()!
      for (const line of lines) printed.push(JSON.parse(line))
    })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    const received = (what: string, count: number) => waitUntil(() => printed.length >= count, 15_000, `${what} (printed ${JSON.stringify(printed)}; stderr ${stderr})`)

    // It starts with the token given: its first connection is the feed's
    await waitUntil(() => proxy.accepted >= 1, 15_000, `the client to connect (stderr ${stderr})`)
    await sleep(1000)
    const first = await create('first')
    await received('the first change', 1)
    await proxy.cut()
    const missed = await create('missed while cut')
    await call(app, token, { method: 'PUT', url: `/book/${first}`, payload: { title: 'first, changed' } })
    await proxy.restore()
    await received('the changes made while the connection was cut', 3)
    // Until the token it started with has expired, and the service has ended its feed for it
    await sleep(Math.max(0, exp * 1000 + 500 - Date.now()))
    const after = await create('after the token expired')
    await received('the change after the token expired', 4)
    await sleep(500)
    t.strictSame(printed.map((p) => [p.event, p.data?.id, p.data?.title]), [
      ['created', first, 'first'],
      ['created', missed, 'missed while cut'],
      ['updated', first, 'first, changed'],
      ['created', after, 'after the token expired']
    ], 'every change once, in order')
    t.equal(new Set(printed.map((p) => p.id)).size, 4, 'four ids')
    t.match(stderr, /resuming/, 'it said it resumed')
    t.ok(proxy.accepted >= 2, 'it reconnected')
  })

  t.test(`${name}: an id made with a secret no longer accepted is 400; it starts again and reloads`, { skip: STORE_INDEPENDENT }, async (t: Test) => {
    const app = await build(t)
    await app.listen({ port: 0, host: '127.0.0.1' })
    const token = await getToken(app)
    const child = spawn(command, [join(EXAMPLES, file)], {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/tmp',
        BOOKKEEPING_URL: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`,
        BOOKKEEPING_USERNAME: USERNAME,
        BOOKKEEPING_PASSWORD: PASSWORD,
        BOOKKEEPING_LAST_EVENT_ID: changeIds('a secret this service no longer accepts, 32+ bytes').encode(1)
      },
      stdio: ['ignore', 'pipe', 'pipe']
    })
    t.teardown(() => { child.kill('SIGKILL') })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    await waitUntil(() => stdout.includes('"reset"'), 15_000, `the reload (stdout ${stdout}; stderr ${stderr})`)
    const id = (await call(app, token, { method: 'POST', url: '/book', payload: { title: 'after the reload', author: 'A', year: 2000 } })).body.data.id as number
    await waitUntil(() => stdout.includes('after the reload'), 15_000, `the change after it (stdout ${stdout}; stderr ${stderr})`)
    const printed = stdout.trim().split('\n').map((line) => JSON.parse(line) as Printed)
    t.strictSame(printed.map((p) => [p.event, p.data?.id]), [['reset', undefined], ['created', id]], 'a reload, then every change')
    t.match(stderr, /starting over/, 'it said it started over')
  })
}

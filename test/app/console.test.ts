/**
 * How the service serves the console (plugins/app/console.ts): the page and its bundles from
 * the build, with the service's own headers and the console's Content-Security-Policy; a path
 * that is no file is the ordinary 404, another method the ordinary 405; nothing of it in the
 * OpenAPI document. What the page does is tested in a real browser (test/browser/).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import Fastify from 'fastify'
import t from 'tap'
import consolePages, { CONSOLE_CSP, CONSOLE_DIR } from '../../plugins/app/console.js'
import { Message } from '../../src/envelope.js'
import { build, errorEnvelope, expectEnvelope } from '../helper.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'

t.test('the console as the service serves it', { skip: STORE_INDEPENDENT }, async (t) => {
  const app = await build(t)

  t.test('GET /console redirects to /console/', async (t) => {
    const response = await app.inject('/console')
    t.equal(response.statusCode, 301)
    t.equal(response.headers.location, '/console/')
  })

  const page = await app.inject('/console/')
  t.test('the page: HTML, checked again on every load, with the service\'s headers', async (t) => {
    t.equal(page.statusCode, 200)
    t.match(page.headers['content-type'], /^text\/html/)
    t.equal(page.headers['cache-control'], 'no-cache')
    t.equal(page.headers['x-content-type-options'], 'nosniff')
    t.match(page.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'a request id, as on every answer')
    t.equal(page.headers['referrer-policy'], 'no-referrer')
    t.match(page.body, /<title>Bookkeeping console<\/title>/)
  })

  t.test('its policy allows the service\'s own origin only, and nothing inline', async (t) => {
    const csp = String(page.headers['content-security-policy'])
    t.equal(csp, CONSOLE_CSP)
    const directives = Object.fromEntries(csp.split(';').map((part) => {
      const [name = '', ...sources] = part.trim().split(/\s+/)
      return [name, sources]
    }))
    t.strictSame(directives['default-src'], ["'none'"], 'nothing that is not named below')
    for (const name of ['script-src', 'style-src', 'img-src', 'connect-src', 'worker-src']) {
      t.strictSame(directives[name], ["'self'"], `${name} 'self' only`)
    }
    t.strictSame(directives['frame-ancestors'], ["'none'"], 'never in a frame')
    t.notMatch(csp, /unsafe-|https?:|data:|\*/, 'no unsafe-inline or -eval, no other origin, no data: URL')
    t.notMatch(page.body, /<script(?![^>]*\bsrc=)[^>]*>|<style|\sstyle=|\son[a-z]+=/i, 'and the page has nothing inline for it to block')
  })

  const assets = [...page.body.matchAll(/(?:src|href)="(\/console\/[^"]+)"/g)].map(([, path]) => path!)
  t.test('every file the page loads is served, hashed ones cached for good', async (t) => {
    t.ok(assets.some((path) => /\/assets\/.+\.js$/.test(path)), 'a script bundle')
    t.ok(assets.some((path) => /\/assets\/.+\.css$/.test(path)), 'a style sheet')
    for (const path of assets) {
      const response = await app.inject(path)
      t.equal(response.statusCode, 200, path)
      t.equal(response.headers['content-security-policy'], CONSOLE_CSP, `${path}: the same policy`)
      t.equal(response.headers['x-content-type-options'], 'nosniff', `${path}: nosniff`)
      if (path.includes('/assets/')) {
        t.equal(response.headers['cache-control'], 'public, max-age=31536000, immutable', `${path}: immutable`)
      }
    }
  })

  t.test('its JavaScript is under 60 KB gzipped, all of it', async (t) => {
    const scripts = readdirSync(join(CONSOLE_DIR, 'assets')).filter((file) => file.endsWith('.js'))
    const gzipped = scripts.reduce((sum, file) => sum + gzipSync(readFileSync(join(CONSOLE_DIR, 'assets', file)), { level: 9 }).length, 0)
    t.ok(scripts.length > 0, `scripts: ${scripts.join(', ')}`)
    t.ok(gzipped < 60 * 1024, `${(gzipped / 1024).toFixed(1)} KB gzipped`)
  })

  t.test('HEAD answers as GET, without the body', async (t) => {
    const response = await app.inject({ method: 'HEAD', url: '/console/' })
    t.equal(response.statusCode, 200)
    t.equal(response.body, '')
    t.equal(response.headers['content-security-policy'], CONSOLE_CSP)
  })

  t.test('a path that is no file of the console is the ordinary 404', async (t) => {
    for (const path of ['/console/missing.js', '/console/assets/', '/console/../package.json', '/console/%2e%2e/package.json', '/console/.env']) {
      expectEnvelope(t, await app.inject(path), 404, Message.RouteNotFound)
    }
  })

  t.test('another method is the ordinary 405, with Allow', async (t) => {
    for (const method of ['POST', 'PUT', 'DELETE'] as const) {
      const response = await app.inject({ method, url: '/console/' })
      expectEnvelope(t, response, 405, Message.MethodNotAllowed)
      t.equal(response.headers.allow, 'GET, HEAD')
    }
  })

  t.test('the API does not change: / and the document', async (t) => {
    expectEnvelope(t, await app.inject('/'), 404, Message.RouteNotFound)
    const document = (await app.inject('/openapi.json')).json() as { paths: Record<string, unknown> }
    t.strictSame(Object.keys(document.paths).filter((path) => path.startsWith('/console')), [], 'no console path in /openapi.json')
    const books = await app.inject('/books')
    t.strictSame(books.json(), errorEnvelope(401, Message.AuthorizationRequired), 'the book routes still want a token')
    t.equal(books.headers['content-security-policy'], undefined, 'the console\'s policy stays on the console')
  })
})

t.test('without a build the console is not served, and the log says so', async (t) => {
  const directory = mkdtempSync(join(tmpdir(), 'bookkeeping-no-console-'))
  t.teardown(() => rmSync(directory, { recursive: true, force: true }))
  const lines: Array<{ level: number, msg: string, directory?: string }> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => lines.push(JSON.parse(line)) } } })
  t.teardown(() => app.close())
  await app.register(consolePages, { directory })
  t.equal((await app.inject('/console/')).statusCode, 404)
  t.match(lines, [{ msg: 'console not built (npm run build): /console/ is not served', directory }])
})

t.test('a new build is served at once, page and bundles together, without a restart', async (t) => {
  // Inside a directory named assets: only the console's own assets/ holds the hashed bundles
  const outer = mkdtempSync(join(tmpdir(), 'bookkeeping-console-'))
  t.teardown(() => rmSync(outer, { recursive: true, force: true }))
  const directory = join(outer, 'assets', 'console')
  mkdirSync(directory, { recursive: true })
  mkdirSync(join(directory, 'assets'))
  writeFileSync(join(directory, 'index.html'), '<script type="module" src="/console/assets/index-old.js"></script>')
  writeFileSync(join(directory, 'assets', 'index-old.js'), 'old()')
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(consolePages, { directory })
  t.equal((await app.inject('/console/assets/index-old.js')).body, 'old()')

  // What `npm run build` does: the output directory emptied, then the new files
  rmSync(join(directory, 'assets'), { recursive: true })
  mkdirSync(join(directory, 'assets'))
  writeFileSync(join(directory, 'index.html'), '<script type="module" src="/console/assets/index-new.js"></script>')
  writeFileSync(join(directory, 'assets', 'index-new.js'), 'new()')
  const page = await app.inject('/console/')
  t.match(page.body, /index-new\.js/, 'the new page')
  t.equal(page.headers['cache-control'], 'no-cache', 'checked again at every load, wherever the directory is')
  t.equal((await app.inject('/console/assets/index-new.js')).body, 'new()', 'and the bundle it loads')
  t.equal((await app.inject('/console/assets/index-old.js')).statusCode, 404, 'the old bundle is gone')
})

/**
 * `npm run docs:screenshots`: the pictures of the console in docs/, of a few well-known books,
 * taken again from the console as it is built now. The service is started as `npm start` starts
 * it (`Instance` of ./cluster.ts) on the embedded database in memory, so nothing else has to run;
 * Debian's Chromium (./chromium.ts) signs in through the console's own form and takes each
 * picture. The browser tests look at the same pages (test/browser/console-accessibility.test.ts)
 * and write nothing, so a test run leaves docs/ as it is.
 */
import { randomBytes } from 'node:crypto'
import path from 'node:path'
import { PROJECT_ROOT } from '../src/project-root.js'
import { launchChromium } from './chromium.js'
import { Instance } from './cluster.js'
import { freePort } from './topology/free-port.js'

/** The books the pictures show. */
export const SCREENSHOT_BOOKS = [
  { title: 'Dune', author: 'Frank Herbert', year: 1965 },
  { title: 'Emma', author: 'Jane Austen', year: 1815 },
  { title: 'Middlemarch', author: 'George Eliot', year: 1871 },
  { title: 'The Left Hand of Darkness', author: 'Ursula K. Le Guin', year: 1969 },
  { title: 'Things Fall Apart', author: 'Chinua Achebe', year: 1958 },
  { title: 'One Hundred Years of Solitude', author: 'Gabriel García Márquez', year: 1967 },
  { title: 'Beloved', author: 'Toni Morrison', year: 1987 },
  { title: 'Moby-Dick', author: 'Herman Melville', year: 1851 }
]

/** Each picture: its file in docs/, the window it is taken in, and the colour scheme. */
export const CONSOLE_SCREENSHOTS = [
  { file: 'console.png', viewport: { width: 1280, height: 800 }, colorScheme: 'light' as const },
  { file: 'console-narrow-dark.png', viewport: { width: 375, height: 812 }, colorScheme: 'dark' as const }
]

/** How long the console may take to show the whole list once signed in. */
const LIST_SHOWN_WITHIN_MS = 30_000

async function main () {
  const username = 'librarian'
  const password = randomBytes(12).toString('base64url')
  const instance = new Instance(0, await freePort(), {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    DB_URL: 'pglite:memory',
    SECRET_TOKEN: randomBytes(32).toString('base64url'),
    AUTH_USERNAME: username,
    AUTH_PASSWORD: password
  }, () => {})
  try {
    await instance.start()
    await storeBooks(instance.url, username, password)
    const browser = await launchChromium()
    try {
      for (const { file, viewport, colorScheme } of CONSOLE_SCREENSHOTS) {
        const context = await browser.newContext({ viewport, colorScheme })
        const page = await context.newPage()
        await page.goto(`${instance.url}/console/`)
        await page.getByLabel('Username', { exact: true }).fill(username)
        await page.getByLabel('Password', { exact: true }).fill(password)
        await page.getByRole('button', { name: 'Sign in', exact: true }).click()
        await page.getByRole('status').filter({ hasText: new RegExp(`^${SCREENSHOT_BOOKS.length} books$`) })
          .waitFor({ timeout: LIST_SHOWN_WITHIN_MS })
        await page.evaluate(() => document.fonts.ready)
        // The same picture every time: no focus ring, no pointer over anything
        await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
        await page.mouse.move(0, 0)
        await page.screenshot({ path: path.join(PROJECT_ROOT, 'docs', file) })
        console.log(`docs/${file}: ${viewport.width} × ${viewport.height}, ${colorScheme}`)
        await context.close()
      }
    } finally {
      await browser.close()
    }
  } finally {
    if (instance.child !== null) await instance.stop(0)
  }
}

/** Signs in through the API and stores SCREENSHOT_BOOKS, in order. */
async function storeBooks (url: string, username: string, password: string) {
  const signIn = await fetch(`${url}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username, password })
  })
  if (signIn.status !== 200) throw new Error(`POST /token answered ${signIn.status}: ${await signIn.text()}`)
  const { data: { token } } = await signIn.json() as { data: { token: string } }
  for (const book of SCREENSHOT_BOOKS) {
    const created = await fetch(`${url}/book`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: token },
      body: JSON.stringify(book)
    })
    if (created.status !== 201) throw new Error(`POST /book answered ${created.status}: ${await created.text()}`)
  }
}

// Run as a program (npm run docs:screenshots), not imported by the browser test
if (process.argv[1] === import.meta.filename) {
  main().catch((err: Error) => {
    console.error(`docs:screenshots: ${err.message}`)
    process.exitCode = 1
  })
}

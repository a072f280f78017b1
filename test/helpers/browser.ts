/**
 * A real browser for the tests under test/browser/: Debian's Chromium driven by playwright-core,
 * and what those tests read of a page (what it logged, axe-core's findings, where the focus is).
 */
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type * as Axe from 'axe-core'
import type { Browser, BrowserContextOptions, Locator, Page, Response } from 'playwright-core'
import type { Test } from 'tap'
import { launchChromium } from '../../tools/chromium.js'
import { PASSWORD, USERNAME } from '../helper.js'
import { sleep } from './wait.js'

/** How long a locator waits for what it looks for before the test reads what is there. */
const ACTION_TIMEOUT = 5000

/**
 * Debian's Chromium (`npm run setup:system` installs it; the tests skip without it, test/helpers/programs.ts),
 * closed when the test ends. One per test file: each test takes a context of its own from it.
 */
export async function launchBrowser (t: Test): Promise<Browser> {
  const browser = await launchChromium()
  t.teardown(() => browser.close())
  return browser
}

/** A page and what happened in it that no test expects, gathered as it happens. */
export interface WatchedPage {
  page: Page
  /** Content-Security-Policy violations: the console's reports and the page's own events */
  cspViolations: string[]
  /** Errors the page's scripts threw and nobody caught */
  pageErrors: string[]
  /** Native dialogs (`alert`, `confirm`, `prompt`) the page opened; each is dismissed */
  dialogs: string[]
}

/**
 * A page in a fresh context (its own storage: nothing of another test's session), closed when
 * the test ends. Every locator waits at most ACTION_TIMEOUT, so a missing element fails the test
 * in seconds, not after Playwright's default 30 s.
 */
export async function openPage (t: Test, browser: Browser, options: BrowserContextOptions = {}): Promise<WatchedPage> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options })
  t.teardown(() => context.close())
  context.setDefaultTimeout(ACTION_TIMEOUT)
  // Injected by the browser itself, not by the page, so the policy does not apply to it
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      console.error(`securitypolicyviolation: ${event.violatedDirective} blocked ${event.blockedURI}`)
    })
  })
  const page = await context.newPage()
  const watched: WatchedPage = { page, cspViolations: [], pageErrors: [], dialogs: [] }
  page.on('console', (message) => {
    const text = message.text()
    if (/securitypolicyviolation|Content Security Policy/i.test(text)) watched.cspViolations.push(text)
  })
  page.on('pageerror', (err) => watched.pageErrors.push(err.message))
  page.on('dialog', (dialog) => {
    watched.dialogs.push(`${dialog.type()}: ${dialog.message()}`)
    dialog.dismiss().catch(() => {})
  })
  return watched
}

/**
 * What `read` gives once `done` holds of it, or what it gave last after `ms`: for a state the
 * page reaches in its own time (a text, a count). The test then asserts on the value, so a
 * failure shows what the page had rather than a timeout.
 */
export async function settle<T> (read: () => Promise<T>, done: (value: T) => boolean, ms = ACTION_TIMEOUT): Promise<T> {
  const started = performance.now()
  for (;;) {
    let value: T | undefined
    let failed = false
    try {
      value = await read()
    } catch (err) {
      // The element is not there (yet): read again, unless time is up
      if (performance.now() - started > ms) throw err
      failed = true
    }
    if (!failed && (done(value as T) || performance.now() - started > ms)) return value as T
    await sleep(50)
  }
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

export interface AccessibilityViolation {
  id: string
  impact: string
  help: string
  /** The elements at fault, as CSS selectors, with what axe says is wrong with the first */
  nodes: string[]
  summary: string
}

/**
 * axe-core's violations of impact `serious` or `critical` in the page as it is now (or in
 * `include`, a CSS selector). The script goes in through the DevTools protocol, which the page's
 * Content-Security-Policy does not govern: the page's own policy stays as users get it.
 */
export async function seriousAccessibilityViolations (page: Page, include?: string): Promise<AccessibilityViolation[]> {
  if (!await page.evaluate(() => 'axe' in window)) await page.evaluate(AXE_SOURCE)
  return page.evaluate(async (include) => {
    const axe = (window as unknown as { axe: typeof Axe }).axe
    const results = await axe.run(include ?? document, { resultTypes: ['violations'] })
    return results.violations
      .filter(({ impact }) => impact === 'serious' || impact === 'critical')
      .map(({ id, impact, help, nodes }) => ({
        id,
        impact: impact ?? '',
        help,
        nodes: nodes.map(({ target }) => target.join(' ')),
        summary: nodes[0]?.failureSummary ?? ''
      }))
  }, include)
}

export interface Focused {
  tag: string
  /** aria-label, else the text of its label, else its own text */
  name: string
  /** The text of the table row it is in, if any */
  row: string | null
  /** The name of the dialog it is in (aria-label or aria-labelledby), if any */
  dialog: string | null
  /** Whether an outline or a box-shadow marks it */
  visible: boolean
  outline: string
  boxShadow: string
}

/**
 * The element that has the keyboard focus (looking into shadow roots), what it is, and whether it
 * is drawn with a visible focus ring: a non-none outline of some width, or a box-shadow. Null
 * when the focus is on nothing (the body).
 */
export function focused (page: Page): Promise<Focused | null> {
  return page.evaluate(() => {
    let element = document.activeElement
    while (element?.shadowRoot?.activeElement) element = element.shadowRoot.activeElement
    if (element === null || element === document.body || element === document.documentElement) return null
    const style = getComputedStyle(element)
    const labels = (element as HTMLInputElement).labels
    const dialog = element.closest('dialog, [role=dialog]')
    const labelledBy = dialog?.getAttribute('aria-labelledby')
    return {
      tag: element.tagName.toLowerCase(),
      name: (element.getAttribute('aria-label') ?? labels?.[0]?.textContent ?? element.textContent ?? '').trim(),
      row: element.closest('tr')?.textContent ?? null,
      dialog: dialog === null
        ? null
        : (dialog.getAttribute('aria-label') ??
          (labelledBy ? document.getElementById(labelledBy)?.textContent?.trim() : undefined) ?? ''),
      visible: (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0) ||
        (style.boxShadow !== 'none' && style.boxShadow !== ''),
      outline: `${style.outlineStyle} ${style.outlineWidth} ${style.outlineColor}`,
      boxShadow: style.boxShadow
    }
  })
}

/** `tag "name"`, to name a focused element in a message. */
export function describeFocus (focus: Focused | null): string {
  return focus === null ? 'nothing' : `${focus.tag} "${focus.name.slice(0, 40)}"`
}

/**
 * Presses `key` (Tab or Shift+Tab) until the focus is on an element `wanted` accepts (not at
 * all if it is there already), at most `max` times, as a keyboard user moves through a page. Returns the element, or null when it was
 * never reached; `unmarked` gets each element on the way that had no visible focus ring.
 */
export async function moveFocusTo (page: Page, wanted: (focus: Focused) => boolean,
  { key = 'Tab', max = 40, unmarked = [] }: { key?: 'Tab' | 'Shift+Tab', max?: number, unmarked?: string[] } = {}
): Promise<Focused | null> {
  const current = await focused(page)
  if (current !== null && wanted(current)) return current
  for (let presses = 0; presses < max; presses++) {
    await page.keyboard.press(key)
    const focus = await focused(page)
    if (focus !== null && !focus.visible) unmarked.push(`${describeFocus(focus)} (outline ${focus.outline}, box-shadow ${focus.boxShadow})`)
    if (focus !== null && wanted(focus)) return focus
  }
  return null
}

/** Asserts that nothing went wrong in the page that the user would not see: see WatchedPage. */
export function expectQuiet (t: Test, { cspViolations, pageErrors, dialogs }: WatchedPage) {
  t.strictSame(cspViolations, [], 'no Content-Security-Policy violation')
  t.strictSame(pageErrors, [], 'no uncaught error in the page')
  t.strictSame(dialogs, [], 'no native dialog (alert, confirm) opened')
}

// The console (console, at /console/), found the way its user finds things: by role and name

/** Where the console keeps the token, read at every call. */
export const TOKEN_KEY = 'bookkeeping.token'

/** The console's page, loaded afresh; its response (for its headers). */
export async function openConsole (page: Page, baseUrl: string): Promise<Response> {
  const response = await page.goto(`${baseUrl}/console/`)
  if (response === null) throw new Error('no response for /console/')
  return response
}

/** The answer of the next `POST /token` the page sends. */
export function tokenResponse (page: Page): Promise<Response> {
  return page.waitForResponse((response) =>
    response.request().method() === 'POST' && new URL(response.url()).pathname === '/token')
}

/**
 * Fills the sign-in form in `scope` (the page, or the `Sign in again` dialog) and submits it with
 * a click; the answer of the `POST /token` it sent.
 */
export async function signIn (scope: Page | Locator, { username = USERNAME, password = PASSWORD } = {}): Promise<Response> {
  const page = 'goto' in scope ? scope : scope.page()
  await scope.getByLabel('Username', { exact: true }).fill(username)
  await scope.getByLabel('Password', { exact: true }).fill(password)
  const [response] = await Promise.all([
    tokenResponse(page),
    scope.getByRole('button', { name: 'Sign in', exact: true }).click()
  ])
  return response
}

/** The status line that counts the books (the page has another status, for outcomes). */
export function countStatus (page: Page): Locator {
  return page.getByRole('status').filter({ hasText: /\bbooks?$/ })
}

/** The status line once it shows a whole list (`5,000 books`, `3 of 5 books`), not `Loading…`. */
export function loadedStatus (page: Page, ms = ACTION_TIMEOUT): Promise<string> {
  return settle(async () => (await countStatus(page).textContent()) ?? '',
    (text) => /^([\d,]+ of )?[\d,]+ books?$/.test(text.trim()), ms).then((text) => text.trim())
}

/**
 * The status line once it counts `expected`: right after an action the count shown may still be
 * the one before it. Past `ms`, the last count read, for the test to compare with `expected`.
 */
export function loadedStatusOf (page: Page, expected: string, ms = ACTION_TIMEOUT): Promise<string> {
  return settle(() => loadedStatus(page, ms), (status) => status === expected, ms)
}

export interface SentRequest {
  path: string
  /** The body, parsed as JSON; null when there was none */
  body: unknown
  /** The request's headers as sent, names in lower case */
  headers: Record<string, string>
}

/**
 * A function that gives the requests of `method` to a path matching `path` the page has sent
 * since this call, with their bodies. Read through the DevTools protocol, as the browser's own
 * network panel does: Playwright's `postData()` is null for a body that fetch sends from a
 * `Request` object (openapi-fetch's way), which the browser keeps as a stream.
 */
export async function recordRequests (page: Page, method: string, path: RegExp): Promise<() => Promise<SentRequest[]>> {
  const cdp = await page.context().newCDPSession(page)
  await cdp.send('Network.enable')
  const sent: Array<Promise<SentRequest>> = []
  cdp.on('Network.requestWillBeSent', ({ requestId, request }) => {
    const { pathname } = new URL(request.url)
    if (request.method !== method || !path.test(pathname)) return
    const headers = Object.fromEntries(Object.entries(request.headers).map(([name, value]) => [name.toLowerCase(), String(value)]))
    sent.push(request.hasPostData === true
      ? cdp.send('Network.getRequestPostData', { requestId })
        .then(({ postData }) => ({ path: pathname, body: JSON.parse(postData) as unknown, headers }))
      : Promise.resolve({ path: pathname, body: null, headers }))
  })
  return () => Promise.all(sent)
}

/** Signs in with the right password and waits until the list has loaded. */
export async function signedIn (page: Page, baseUrl: string): Promise<void> {
  await openConsole(page, baseUrl)
  await signIn(page)
  await page.getByRole('button', { name: 'Sign out', exact: true }).waitFor()
  await loadedStatus(page)
}

/**
 * The confirmation before a delete: a modal dialog, role `dialog` or `alertdialog` (what ARIA
 * suggests for a confirmation that interrupts).
 */
export function deleteDialog (page: Page): Locator {
  return page.getByRole('alertdialog', { name: 'Delete book' }).or(page.getByRole('dialog', { name: 'Delete book' }))
}

export function booksTable (page: Page): Locator {
  return page.getByRole('table', { name: 'Books' })
}

/** The rows of books in the DOM (the header row has no Edit button). */
export function bookRows (page: Page): Locator {
  return booksTable(page).getByRole('row').filter({ has: page.getByRole('button', { name: 'Edit', exact: true }) })
}

/** The row of the book whose cells contain `text` (a title unique to the test). */
export function bookRow (page: Page, text: string): Locator {
  return bookRows(page).filter({ hasText: text })
}

/** Id, title, author and year, as shown, of each book row in the DOM, in order. */
export function shownBooks (page: Page): Promise<string[][]> {
  return bookRows(page).evaluateAll((rows) => rows.map((row) =>
    [...row.children].slice(0, 4).map((cell) => cell.textContent?.trim() ?? '')))
}

/** The row of book `id` as the list shows it (id, title, author, year), or undefined. */
export async function shownBook (page: Page, id: number): Promise<string[] | undefined> {
  return (await shownBooks(page)).find((row) => row[0] === String(id))
}

/** The token the console holds now, or null. */
export function storedToken (page: Page): Promise<string | null> {
  return page.evaluate((key) => sessionStorage.getItem(key), TOKEN_KEY)
}

/**
 * Keeps the console from following the feed of changes (its request refused): it is then not
 * live, as in the moment before the feed brings a change, so what guards against changes made
 * elsewhere is the service's answer (a 404, an If-Match refused with 412).
 */
export async function notLive (page: Page): Promise<void> {
  await page.route('**/books/changes', (route) => route.abort())
}

/** A `GET /books` the page sent: its query, its answer's `Link` (`next`), or why it failed. */
export interface Listing { query: Record<string, string>, next: string | null, failed: string | null }

/** Every `GET /books` the page sends, with its answer's `Link` or why it failed. */
export function recordListings (page: Page): Listing[] {
  const listings: Listing[] = []
  const byRequest = new Map<unknown, Listing>()
  page.on('request', (request) => {
    const url = new URL(request.url())
    if (request.method() !== 'GET' || url.pathname !== '/books') return
    const listing = { query: Object.fromEntries(url.searchParams), next: null, failed: null }
    byRequest.set(request, listing)
    listings.push(listing)
  })
  page.on('response', (response) => {
    const listing = byRequest.get(response.request())
    if (listing !== undefined) listing.next = /^<([^>]+)>/.exec(response.headers().link ?? '')?.[1] ?? null
  })
  page.on('requestfailed', (request) => {
    const listing = byRequest.get(request)
    if (listing !== undefined) listing.failed = request.failure()?.errorText ?? 'failed'
  })
  return listings
}

/** Whether rows are still being read (placeholder rows in the DOM). */
export const reading = (page: Page) => booksTable(page).locator('tr.placeholder').count().then((n) => n > 0)

/** Scrolls the list to its top, its bottom or a pixel offset, then waits until the rows in sight are drawn and read. */
export async function scrollTo (page: Page, where: 'top' | 'bottom' | number): Promise<void> {
  await page.getByRole('region', { name: 'Book list' }).evaluate((element, where) => {
    element.scrollTop = where === 'top' ? 0 : where === 'bottom' ? element.scrollHeight : where
  }, where)
  // The rows in sight drawn, and read when they were not
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0))))
  await settle(() => reading(page), (busy) => !busy, 15_000)
}

/** Each book row in the DOM as [its place in the list from 0 (aria-rowindex less the heading), its id]. */
export function placedRows (page: Page): Promise<Array<[number, number]>> {
  return bookRows(page).evaluateAll((rows) => rows.map((row) =>
    [Number(row.getAttribute('aria-rowindex')) - 2, Number(row.children[0]?.textContent)] as [number, number]))
}

/** The rows in the DOM that are not in the place `ids` gives them. */
export async function misplaced (page: Page, ids: number[]): Promise<string[]> {
  return (await placedRows(page)).filter(([place, id]) => ids[place] !== id).map(([place, id]) => `row ${place}: id ${id}, not ${ids[place]}`)
}

/**
 * Scrolls down to the end of the list, a screenful at a time when `everyRow`, else to the bottom
 * again and again; the rows out of place on the way, and how many scrolls it took.
 */
export async function scrollToEnd (page: Page, ids: number[], { everyRow = false } = {}): Promise<{ wrong: string[], scrolls: number }> {
  const wrong: string[] = []
  const region = page.getByRole('region', { name: 'Book list' })
  for (let scrolls = 1; scrolls <= 400; scrolls++) {
    const before = await region.evaluate((element) => element.scrollTop)
    await scrollTo(page, everyRow ? before + (await region.evaluate((element) => element.clientHeight)) - 60 : 'bottom')
    wrong.push(...await misplaced(page, ids))
    const after = await region.evaluate((element) => [element.scrollTop, element.scrollHeight - element.clientHeight])
    if (after[0] === before && after[0]! >= after[1]! - 1 && !(await reading(page))) return { wrong, scrolls }
  }
  return { wrong: [...wrong, 'the end was not reached'], scrolls: 400 }
}

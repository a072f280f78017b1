/**
 * The web console (console, at /console/) for every user and every screen: axe-core's checks,
 * the keyboard alone with the focus always in sight, a phone's width, the dark scheme, and the
 * page's Content-Security-Policy. It also looks at the pages docs/ shows, as
 * `npm run docs:screenshots` (tools/docs-screenshots.ts) takes them, without writing them.
 */
import type { Locator, Page } from 'playwright-core'
import t from 'tap'
import { CONSOLE_SCREENSHOTS, SCREENSHOT_BOOKS as BOOKS } from '../../tools/docs-screenshots.js'
import { PASSWORD, USERNAME, testEnv } from '../helper.js'
import {
  bookRow, deleteDialog, describeFocus, expectQuiet, focused, launchBrowser, loadedStatus, loadedStatusOf, moveFocusTo, openConsole, openPage,
  seriousAccessibilityViolations, shownBooks, signedIn, type AccessibilityViolation, type Focused
} from '../helpers/browser.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService } from '../helpers/service.js'
import { needsPrograms } from '../helpers/programs.js'

/** Width and height of a PNG image, from its IHDR chunk. */
function pngSize (bytes: Buffer): [number, number] {
  return [bytes.readUInt32BE(16), bytes.readUInt32BE(20)]
}

/**
 * Why the element is not in full sight, or null when it is: inside the viewport, not cut off by
 * an ancestor that scrolls or clips, and on top at its centre (not covered).
 */
function outOfSight (locator: Locator): Promise<string | null> {
  return locator.evaluate((element) => {
    const box = element.getBoundingClientRect()
    const edges = (rect: DOMRect) =>
      `${Math.round(rect.left)}–${Math.round(rect.right)} × ${Math.round(rect.top)}–${Math.round(rect.bottom)}`
    if (box.width === 0 || box.height === 0) return 'it has no size'
    for (let parent = element.parentElement; parent !== null; parent = parent.parentElement) {
      if (getComputedStyle(parent).overflowX === 'visible') continue
      const clip = parent.getBoundingClientRect()
      if (box.left < clip.left - 0.5 || box.right > clip.right + 0.5) {
        return `it spans ${edges(box)} px, cut off by ${parent.tagName.toLowerCase()}#${parent.id} (${edges(clip)} px, overflow-x ${getComputedStyle(parent).overflowX})`
      }
    }
    if (box.left < 0 || box.top < 0 || box.right > innerWidth || box.bottom > innerHeight) {
      return `it spans ${edges(box)} px, outside the ${innerWidth} × ${innerHeight} viewport`
    }
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2)
    return hit !== null && element.contains(hit) ? null : `it is covered by ${hit?.tagName.toLowerCase()}.${hit?.className}`
  })
}

/** `id impact: help (where)` of each violation, one per line, to print when there are any. */
function describeViolations (violations: AccessibilityViolation[]): string {
  return violations.map(({ id, impact, help, nodes, summary }) =>
    `${id} (${impact}): ${help}\n  at ${nodes.join(', ')}\n  ${summary.replace(/\n/g, '\n  ')}`).join('\n')
}

t.test('the console for every user', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const token = await service.token()
  for (const book of BOOKS) await service.createBook(token, book)

  t.test('the pages of docs/\'s screenshots: 1280 × 800 in the light scheme, 375 wide in the dark one', async (t) => {
    const backgrounds: string[] = []
    for (const { file, viewport, colorScheme } of CONSOLE_SCREENSHOTS) {
      const watched = await openPage(t, browser, { viewport, colorScheme })
      const { page } = watched
      await signedIn(page, service.url)
      t.equal(await loadedStatus(page), `${BOOKS.length} books`, `${file}: the list of ${BOOKS.length} books`)
      await page.evaluate(() => document.fonts.ready)
      // The same picture every run: no focus ring, no pointer over anything
      await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
      await page.mouse.move(0, 0)
      t.strictSame(pngSize(await page.screenshot()), [viewport.width, viewport.height], `${file}: a picture of ${viewport.width} × ${viewport.height}`)
      backgrounds.push(await page.evaluate(() => getComputedStyle(document.body).backgroundColor))
      expectQuiet(t, watched)
    }
    t.not(backgrounds[0], backgrounds[1], `the dark scheme has a background of its own (${backgrounds.join(' / ')})`)
  })

  t.test('axe-core finds nothing serious or critical: signed out, the list (light and dark), the Add book dialog', async (t) => {
    const check = async (page: Page, what: string) => {
      const violations = await seriousAccessibilityViolations(page)
      if (violations.length > 0) t.comment(`${what}:\n${describeViolations(violations)}`)
      t.strictSame(violations.map(({ id }) => id), [], `${what}: no serious or critical violation`)
    }
    const watched = await openPage(t, browser, { colorScheme: 'light' })
    const { page } = watched
    await openConsole(page, service.url)
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    await check(page, 'signed out')
    await signedIn(page, service.url)
    await check(page, 'the list')
    await page.getByRole('button', { name: 'Add book', exact: true }).click()
    await page.getByRole('dialog', { name: 'Add book' }).waitFor()
    await check(page, 'the Add book dialog')
    expectQuiet(t, watched)

    const dark = await openPage(t, browser, { colorScheme: 'dark' })
    await signedIn(dark.page, service.url)
    await check(dark.page, 'the list in the dark scheme')
    expectQuiet(t, dark)
  })

  t.test('the Content-Security-Policy lets the page use only the service itself, and no inline script', async (t) => {
    const watched = await openPage(t, browser)
    const { page } = watched
    const response = await openConsole(page, service.url)
    const header = response.headers()['content-security-policy'] ?? ''
    t.comment(`content-security-policy: ${header}`)
    const directives = new Map(header.split(';').map((part) => part.trim().split(/\s+/)).filter(([name]) => name)
      .map(([name, ...sources]) => [name!, sources]))
    const scripts = directives.get('script-src') ?? directives.get('default-src')
    t.strictSame(scripts, ["'self'"], "scripts: from 'self' only")
    const others = [...directives].flatMap(([name, sources]) => sources.filter((source) => !["'self'", "'none'"].includes(source))
      .map((source) => `${name} ${source}`))
    t.strictSame(others, [], "no directive allows anything but 'self' or 'none' (no 'unsafe-inline', no other origin)")
    t.equal(await page.locator('script:not([src])').count(), 0, 'the page itself has no inline script')
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    await signedIn(page, service.url)
    await page.getByRole('button', { name: 'Add book', exact: true }).click()
    await page.getByRole('dialog', { name: 'Add book' }).getByRole('button', { name: 'Cancel', exact: true }).click()
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    expectQuiet(t, watched)
  })

  t.test('375 px wide: the page does not scroll sideways; Add book, Edit and Delete are in sight', async (t) => {
    const watched = await openPage(t, browser, { viewport: { width: 375, height: 740 } })
    const { page } = watched
    await openConsole(page, service.url)
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    const width = () => page.evaluate(() => document.documentElement.scrollWidth)
    t.ok(await width() <= 375, `signed out: the page is ${await width()} px wide`)
    await signedIn(page, service.url)
    t.ok(await width() <= 375, `the list: the page is ${await width()} px wide`)
    const row = bookRow(page, 'Dune')
    for (const [name, button] of [
      ['Add book', page.getByRole('button', { name: 'Add book', exact: true })],
      ['Edit', row.getByRole('button', { name: 'Edit', exact: true })],
      ['Delete', row.getByRole('button', { name: 'Delete', exact: true })]
    ] as const) {
      t.equal(await outOfSight(button), null, `${name} is in sight, not cut off or covered`)
    }
    await row.getByRole('button', { name: 'Edit', exact: true }).click()
    const dialog = page.getByRole('dialog', { name: 'Edit book' })
    await dialog.waitFor()
    const box = await dialog.boundingBox()
    t.ok(box !== null && box.x >= 0 && box.x + box.width <= 375, `the Edit dialog fits (${JSON.stringify(box)})`)
    t.equal(await outOfSight(dialog.getByRole('button', { name: 'Save', exact: true })), null, 'its Save button is in sight')
    t.ok(await width() <= 375, `with the dialog open: the page is ${await width()} px wide`)
    expectQuiet(t, watched)
  })

  t.test('by keyboard alone: sign in, add, edit and delete a book, the focus always marked', async (t) => {
    const watched = await openPage(t, browser)
    const { page } = watched
    const { keyboard } = page
    // Every element the focus stops on without a visible ring
    const unmarked: string[] = []
    const go = async (label: string, wanted: (focus: Focused) => boolean, key: 'Tab' | 'Shift+Tab' = 'Tab') => {
      const focus = await moveFocusTo(page, wanted, { key, unmarked, max: 60 })
      if (focus === null) throw new Error(`${key} never reached ${label}; the focus is on ${describeFocus(await focused(page))}`)
      return focus
    }
    const field = (name: string, dialog: string | null = null) => (focus: Focused) =>
      focus.tag === 'input' && focus.name === name && focus.dialog === dialog
    const button = (name: string, { dialog = null, row }: { dialog?: string | null, row?: string } = {}) => (focus: Focused) =>
      focus.tag === 'button' && focus.name === name && focus.dialog === dialog && (row === undefined || (focus.row ?? '').includes(row))
    const title = 'Kindred'

    await openConsole(page, service.url)
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    await go('Username', field('Username'))
    await keyboard.type(USERNAME)
    await go('Password', field('Password'))
    await keyboard.type(PASSWORD)
    await keyboard.press('Enter')
    await page.getByRole('button', { name: 'Sign out', exact: true }).waitFor()
    await loadedStatus(page)

    await go('Add book', button('Add book'))
    await keyboard.press('Enter')
    await page.getByRole('dialog', { name: 'Add book' }).waitFor()
    t.equal((await focused(page))?.dialog, 'Add book', 'opening the dialog moves the focus into it')
    await go('Title', field('Title', 'Add book'))
    await keyboard.type(title)
    await go('Author', field('Author', 'Add book'))
    await keyboard.type('Octavia E. Butler')
    await go('Year', field('Year', 'Add book'))
    await keyboard.type('1979')
    t.equal((await moveFocusTo(page, field('Author', 'Add book'), { key: 'Shift+Tab', max: 1, unmarked }))?.name, 'Author',
      'Shift+Tab goes back from Year to Author')
    await go('Save', button('Save', { dialog: 'Add book' }))
    await keyboard.press('Space')
    await page.getByRole('dialog', { name: 'Add book' }).waitFor({ state: 'hidden' })
    await bookRow(page, title).waitFor()
    const created = (await shownBooks(page)).find((row) => row[1] === title)
    t.match(created, [/^\d+$/, title, 'Octavia E. Butler', '1979'], 'added')
    t.equal(describeFocus(await focused(page)), 'button "Add book"', 'closing the dialog gives the focus back to Add book')
    const id = Number(created?.[0])

    await go('Edit', button('Edit', { row: title }))
    await keyboard.press('Enter')
    await page.getByRole('dialog', { name: 'Edit book' }).waitFor()
    await go('Year', field('Year', 'Edit book'))
    await keyboard.press('ControlOrMeta+A')
    await keyboard.type('1980')
    await go('Save', button('Save', { dialog: 'Edit book' }))
    await keyboard.press('Enter')
    await page.getByRole('dialog', { name: 'Edit book' }).waitFor({ state: 'hidden' })
    t.strictSame((await service.request('GET', `/book/${id}`, { token })).body,
      { status: 200, message: 'Book retrieved successfully', data: { id, title, author: 'Octavia E. Butler', year: 1980 } }, 'edited')

    await go('Delete', button('Delete', { row: title }))
    await keyboard.press('Space')
    await deleteDialog(page).waitFor()
    t.equal((await focused(page))?.dialog, 'Delete book', 'the focus moves into the Delete book dialog')
    await go('Delete in the dialog', button('Delete', { dialog: 'Delete book' }))
    await keyboard.press('Enter')
    await deleteDialog(page).waitFor({ state: 'hidden' })
    t.equal((await service.request('GET', `/book/${id}`, { token })).status, 404, 'deleted')
    t.equal(await loadedStatusOf(page, `${BOOKS.length} books`), `${BOOKS.length} books`, 'the list is as before')

    t.strictSame(unmarked, [], 'every element the focus stopped on had a visible outline or box-shadow')
    expectQuiet(t, watched)
  })
})

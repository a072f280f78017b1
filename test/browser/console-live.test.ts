/**
 * The web console (console, at /console/) follows the feed of changes (`GET /books/changes`):
 * a book created, changed or deleted by another client shows, changes or goes within a second,
 * without the list being read again; the header says `Live`; the Edit dialog of a book changed
 * elsewhere says so with the new values; a row's button held down while a change is drawn acts
 * when released; after the connection drops or goes silent the console
 * says `Reconnecting…`, resumes with `Last-Event-ID` and shows what changed meanwhile; a `reset`
 * makes it read the list again; a list in pages counts a book deleted far from sight. The other
 * client is the test, through the API; the page reaches the service through a TCP proxy, which
 * the test cuts or blackholes.
 */
import type { Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { testEnv } from '../helper.js'
import {
  bookRow, bookRows, countStatus, deleteDialog, expectQuiet, launchBrowser, openPage, recordRequests, settle, shownBook, signIn, signedIn
} from '../helpers/browser.js'
import { createDatabase, pgClient, seedBooks, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService, type Service } from '../helpers/service.js'
import { needsPrograms } from '../helpers/programs.js'
import { TcpProxy } from '../helpers/tcp-proxy.js'
import type { BookCreate, BookPatch } from '../../src/schemas/book.js'

/** The console's bound: a change elsewhere shows within a second (docs/console.md). */
const WITHIN_MS = 1000
/** The console takes a connection silent for 15 s for dead, then waits the service's 2 s retry. */
const SILENT_DROP_MS = 20_000

const liveness = (page: Page) => page.getByRole('status').filter({ hasText: /^(Live|Connecting…|Reconnecting…)$/ })

/** What the indicator says once it says `expected` (or what it said last after `ms`). */
const livenessReads = (page: Page, expected: string, ms = 5000) =>
  settle(async () => ((await liveness(page).textContent()) ?? '').trim(), (text) => text === expected, ms)

/** Book `id` as the list shows it once `done` holds of it, and how long that took. */
async function shownWithin (page: Page, id: number, done: (row: string[] | undefined) => boolean, ms = WITHIN_MS) {
  const started = performance.now()
  const row = await settle(() => shownBook(page, id), done, ms + 500)
  return { row, ms: performance.now() - started }
}

/** The other client: changes through the API. */
function otherClient (service: Service, token: string) {
  return {
    create: (book: BookCreate) => service.createBook(token, book),
    async change (id: number, changes: BookPatch): Promise<void> {
      const response = await service.request('PUT', `/book/${id}`, { token, body: changes })
      if (response.status !== 200) throw new Error(`PUT /book/${id} answered ${response.status}: ${response.text}`)
    },
    async delete (id: number): Promise<void> {
      const response = await service.request('DELETE', `/book/${id}`, { token })
      if (response.status !== 200) throw new Error(`DELETE /book/${id} answered ${response.status}: ${response.text}`)
    }
  }
}

t.test('the console follows the changes made elsewhere', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const db = await pgClient(t, dbUrl)
  const other = otherClient(service, await service.token())

  /** A page signed in through a proxy of its own, live; the listings and feeds it asks for. */
  async function livePage (t: Test) {
    const proxy = await TcpProxy.start(t, service.port)
    const watched = await openPage(t, browser)
    const { page } = watched
    const listings = await recordRequests(page, 'GET', /^\/books$/)
    const feeds = await recordRequests(page, 'GET', /^\/books\/changes$/)
    await signedIn(page, `http://127.0.0.1:${proxy.port}`)
    t.equal(await livenessReads(page, 'Live'), 'Live', 'the header says the console is live')
    return { watched, page, proxy, listings, feeds }
  }

  t.test('created, changed and deleted elsewhere: shown within a second, the list not read again', async (t) => {
    const kept = await other.create({ title: 'Kept', author: 'Someone', year: 2000 })
    const { watched, page, listings } = await livePage(t)
    t.ok(await bookRow(page, 'Kept').isVisible(), 'the list shows the books there were')

    const created = await other.create({ title: 'Arrived live', author: 'Ursula K. Le Guin', year: 1969 })
    const shown = await shownWithin(page, created.id, (row) => row !== undefined)
    t.strictSame(shown.row, [String(created.id), 'Arrived live', 'Ursula K. Le Guin', '1969'], 'a book created elsewhere shows')
    t.ok(shown.ms < WITHIN_MS, `within a second (${Math.round(shown.ms)} ms)`)

    await other.change(created.id, { title: 'Changed live', year: 1970 })
    const changed = await shownWithin(page, created.id, (row) => row?.[1] === 'Changed live')
    t.strictSame(changed.row, [String(created.id), 'Changed live', 'Ursula K. Le Guin', '1970'], 'a change elsewhere shows in its row')
    t.ok(changed.ms < WITHIN_MS, `within a second (${Math.round(changed.ms)} ms)`)

    await other.delete(created.id)
    const deleted = await shownWithin(page, created.id, (row) => row === undefined)
    t.equal(deleted.row, undefined, 'a book deleted elsewhere goes')
    t.ok(deleted.ms < WITHIN_MS, `within a second (${Math.round(deleted.ms)} ms)`)

    // The console's own change comes back through the feed too: applied again, it changes nothing
    await page.getByRole('button', { name: 'Add book', exact: true }).click()
    const dialog = page.getByRole('dialog', { name: 'Add book' })
    await dialog.getByLabel('Title', { exact: true }).fill('Added here')
    await dialog.getByLabel('Author', { exact: true }).fill('Me')
    await dialog.getByLabel('Year', { exact: true }).fill('2024')
    await dialog.getByRole('button', { name: 'Save', exact: true }).click()
    await bookRow(page, 'Added here').waitFor()
    await page.waitForTimeout(WITHIN_MS)
    t.equal(await bookRow(page, 'Added here').count(), 1, 'a book added here shows once, its change from the feed applied over it')
    t.equal(await bookRows(page).count(), 2, 'beside the one kept')
    t.strictSame(await shownBook(page, kept.id), [String(kept.id), 'Kept', 'Someone', '2000'], 'the other book as it was')
    t.equal((await countStatus(page).textContent())?.trim(), '2 books', 'the count follows')
    t.equal((await listings()).length, 1, 'the list was read once, at sign-in')
    expectQuiet(t, watched)
  })

  t.test('the book open in the Edit dialog changed elsewhere: the dialog says so with the new values', async (t) => {
    const book = await other.create({ title: 'Kindred', author: 'Octavia Butler', year: 1979 })
    const { watched, page } = await livePage(t)
    await bookRow(page, 'Kindred').getByRole('button', { name: 'Edit', exact: true }).click()
    const dialog = page.getByRole('dialog', { name: 'Edit book' })
    await dialog.getByLabel('Title', { exact: true }).fill('Kindred (typed)')

    await other.change(book.id, { author: 'Octavia E. Butler', year: 1980 })
    const notice = dialog.getByRole('status')
    t.equal(await settle(async () => (await notice.textContent()) ?? '', (text) => text !== '', WITHIN_MS + 500),
      'Someone else changed this book just now. Stored now: Title “Kindred”, Author “Octavia E. Butler”, Year “1980”.',
      'a notice in the dialog gives the values stored now')
    t.equal(await settle(() => dialog.getByLabel('Year', { exact: true }).inputValue(), (year) => year === '1980'), '1980',
      'a field not typed in takes the new value')
    t.equal(await dialog.getByLabel('Title', { exact: true }).inputValue(), 'Kindred (typed)', 'what was typed stays')

    await other.delete(book.id)
    t.equal(await settle(async () => (await notice.textContent()) ?? '', (text) => text.includes('deleted'), WITHIN_MS + 500),
      'Someone else deleted this book just now.', 'and a delete elsewhere too')
    expectQuiet(t, watched)
  })

  t.test('a row\'s button held down while another book changes elsewhere: its release still acts', async (t) => {
    await other.create({ title: 'Pressed', author: 'Someone', year: 2001 })
    const changing = await other.create({ title: 'Changing', author: 'Someone', year: 2002 })
    const { watched, page } = await livePage(t)
    const row = bookRow(page, 'Pressed')
    /** Holds a press down until a change elsewhere is drawn, then lets it go. */
    const heldThroughAChange = async (press: () => Promise<void>, release: () => Promise<void>, year: number) => {
      await press()
      await other.change(changing.id, { year })
      const shown = await shownWithin(page, changing.id, (row) => row?.[3] === String(year))
      t.equal(shown.row?.[3], String(year), `precondition: the change to ${year} is drawn while the press is held`)
      await release()
    }

    const edit = await row.getByRole('button', { name: 'Edit', exact: true }).boundingBox()
    await page.mouse.move(edit!.x + edit!.width / 2, edit!.y + edit!.height / 2)
    await heldThroughAChange(() => page.mouse.down(), () => page.mouse.up(), 2003)
    const editDialog = page.getByRole('dialog', { name: 'Edit book' })
    if (t.ok(await editDialog.waitFor({ timeout: 2000 }).then(() => true, () => false), 'the mouse: Edit opens its dialog')) {
      await editDialog.getByRole('button', { name: 'Cancel', exact: true }).click()
    }

    await row.getByRole('button', { name: 'Delete', exact: true }).focus()
    await heldThroughAChange(() => page.keyboard.down('Space'), () => page.keyboard.up('Space'), 2004)
    if (t.ok(await deleteDialog(page).waitFor({ timeout: 2000 }).then(() => true, () => false), 'Space: Delete opens its dialog')) {
      await deleteDialog(page).getByRole('button', { name: 'Cancel', exact: true }).click()
    }
    expectQuiet(t, watched)
  })

  t.test('the connection cut, then back: Reconnecting…, then the changes made meanwhile, resumed after the last id', async (t) => {
    const changing = await other.create({ title: 'Before the cut', author: 'Someone', year: 1990 })
    const going = await other.create({ title: 'Going during the cut', author: 'Someone', year: 1991 })
    const { watched, page, proxy, listings, feeds } = await livePage(t)
    // An event received, so the reconnection has an id to resume after
    const seen = await other.create({ title: 'Seen before the cut', author: 'Someone', year: 1992 })
    await shownWithin(page, seen.id, (row) => row !== undefined)

    await proxy.cut()
    t.equal(await livenessReads(page, 'Reconnecting…'), 'Reconnecting…', 'the header says the console is not live')
    const created = await other.create({ title: 'Created during the cut', author: 'Someone', year: 1993 })
    await other.change(changing.id, { title: 'Changed during the cut' })
    await other.delete(going.id)
    await page.waitForTimeout(500)
    t.equal(await shownBook(page, created.id), undefined, 'nothing shows while the feed is cut')

    await proxy.restore()
    t.equal(await livenessReads(page, 'Live', 5000), 'Live', 'the console says it is live again')
    // Each change is an event of its own, which the page may show a moment after the one before
    t.strictSame((await shownWithin(page, created.id, (row) => row !== undefined)).row,
      [String(created.id), 'Created during the cut', 'Someone', '1993'], 'the book created meanwhile shows')
    t.equal((await shownWithin(page, changing.id, (row) => row?.[1] === 'Changed during the cut')).row?.[1], 'Changed during the cut',
      'the book changed meanwhile shows its change')
    t.equal((await shownWithin(page, going.id, (row) => row === undefined)).row, undefined, 'the book deleted meanwhile is gone')
    const sent = await feeds()
    t.ok(sent.length >= 2, 'the feed was opened again')
    t.match(sent.at(-1)?.headers['last-event-id'], /^\d{16}\./, 'with the id of the last change received')
    t.equal((await listings()).length, 1, 'the list was not read again: the feed caught up')
    expectQuiet(t, watched)
  })

  t.test('the connection silent (a tab back from sleep): taken for dead, reconnected, caught up', async (t) => {
    const { watched, page, proxy } = await livePage(t)
    const seen = await other.create({ title: 'Seen before the silence', author: 'Someone', year: 1994 })
    await shownWithin(page, seen.id, (row) => row !== undefined)

    // Every byte swallowed, nothing refused: the keep-alives stop, the connection never ends
    await proxy.blackhole()
    const created = await other.create({ title: 'Created in the silence', author: 'Someone', year: 1995 })
    t.equal(await livenessReads(page, 'Reconnecting…', SILENT_DROP_MS), 'Reconnecting…', 'the silence is seen as a dropped connection')
    await proxy.restore()
    t.equal(await livenessReads(page, 'Live', SILENT_DROP_MS), 'Live', 'live again once the network carries')
    t.strictSame((await shownWithin(page, created.id, (row) => row !== undefined)).row,
      [String(created.id), 'Created in the silence', 'Someone', '1995'], 'the book created meanwhile shows')
    expectQuiet(t, watched)
  })

  t.test('reset: the list is read again', async (t) => {
    const book = await other.create({ title: 'Before the reset', author: 'Someone', year: 1996 })
    const { watched, page, listings } = await livePage(t)
    // A change the feed cannot tell (written around the service), then a log that no longer has
    // the changes the service sent, as after a restored database: the feed says reset
    await db.query('UPDATE books SET title = $1 WHERE id = $2', ['Changed around the feed', book.id])
    await db.query('DELETE FROM book_changes')
    t.equal((await settle(() => shownBook(page, book.id), (row) => row?.[1] === 'Changed around the feed', 5000))?.[1],
      'Changed around the feed', 'the list read again shows the book as stored')
    t.equal((await listings()).length, 2, 'the list was read again, once')
    t.equal(await livenessReads(page, 'Live'), 'Live', 'the console is still live')
    const created = await other.create({ title: 'After the reset', author: 'Someone', year: 1997 })
    t.ok((await shownWithin(page, created.id, (row) => row !== undefined)).row, 'the feed goes on after the reset')
    expectQuiet(t, watched)
  })

  t.test('signed out: the feed is closed', async (t) => {
    const { watched, page, feeds } = await livePage(t)
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    t.equal(await liveness(page).count(), 0, 'the indicator is hidden')
    const opened = (await feeds()).length
    await other.create({ title: 'After sign-out', author: 'Someone', year: 1998 })
    await page.waitForTimeout(WITHIN_MS)
    t.equal((await feeds()).length, opened, 'no feed is opened again')
    expectQuiet(t, watched)
  })
})

t.test('a list in pages: a book deleted far from sight is counted out, a change there shows when scrolled to', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const BOOKS = 3000
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  await seedBooks(await pgClient(t, dbUrl), BOOKS)
  const other = otherClient(service, await service.token())
  const watched = await openPage(t, browser)
  const { page } = watched
  const region = page.getByRole('region', { name: 'Book list' })
  const status = (expected: string, ms = 10_000) =>
    settle(async () => ((await countStatus(page).textContent()) ?? '').trim(), (text) => text === expected, ms)

  await page.goto(`${service.url}/console/?paged-above=1000`)
  await signIn(page)
  t.equal(await status('More than 1,000 books'), 'More than 1,000 books', 'the list is read in pages')
  t.equal(await livenessReads(page, 'Live'), 'Live', 'and live')
  // Down to the end, where the first pages are dropped
  await settle(async () => {
    await region.evaluate((element) => { element.scrollTop = element.scrollHeight })
    return ((await countStatus(page).textContent()) ?? '').trim()
  }, (text) => text === `${BOOKS.toLocaleString('en')} books`, 20_000)
  t.equal(await status('3,000 books'), '3,000 books', 'the whole list read, counted')
  t.equal(await shownBook(page, 5), undefined, 'book 5 is far from sight')

  await other.delete(5)
  await other.change(10, { title: 'Changed far away' })
  t.equal(await status('2,999 books', WITHIN_MS + 500), '2,999 books', 'a book deleted far from sight is counted out at once')
  const created = await other.create({ title: 'Created at the end', author: 'Someone', year: 2001 })
  // At the very end, one row below what was in sight: shown once scrolled to, which the list
  // keeps at its end (the one-second bound is the unpaged test's)
  t.strictSame(await settle(async () => {
    await region.evaluate((element) => { element.scrollTop = element.scrollHeight })
    return await shownBook(page, created.id)
  }, (row) => row !== undefined, 10_000), [String(created.id), 'Created at the end', 'Someone', '2001'], 'a book created at the end shows there')
  t.equal(await status('3,000 books', WITHIN_MS + 500), '3,000 books', 'and is counted')

  await region.evaluate((element) => { element.scrollTop = 0 })
  t.strictSame(await settle(() => shownBook(page, 10), (row) => row?.[1] === 'Changed far away'),
    ['10', 'Changed far away', 'Author 10', '10'], 'the change far from sight shows once scrolled to')
  t.equal(await shownBook(page, 5), undefined, 'and the deleted book is not there')
  t.strictSame(await shownBook(page, 6), ['6', 'Title 6', 'Author 6', '6'], 'the rows after it in place')
  expectQuiet(t, watched)
})

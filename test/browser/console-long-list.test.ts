/**
 * The web console (console, at /console/) with 20,000 books: it counts them all, keeps only the
 * rows in view in the DOM (a virtual list), and scrolls to the last one. The books go straight
 * into the database, as a long-lived service would have them.
 */
import t from 'tap'
import { testEnv } from '../helper.js'
import {
  bookRow, bookRows, booksTable, expectQuiet, launchBrowser, loadedStatus, loadedStatusOf, openConsole, openPage, settle, shownBooks, signIn
} from '../helpers/browser.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService } from '../helpers/service.js'
import { needsPrograms } from '../helpers/programs.js'

// Enough to arrive in many pieces (the service streams a listing 500 books at a time)
const BOOKS = 20_000
const LAST = BOOKS - 1
/** Rows in the DOM at most: a screenful and some spare, far below all of them. */
const ROWS_IN_DOM = 200

t.test('20,000 books', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const db = await pgClient(t, dbUrl)
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'Book ' || n, 'Author ' || (n % 97), 1900 + n % 120 FROM generate_series(1, $1::int) AS n`, [BOOKS])
  const { rows: [last] } = await db.query<{ id: string }>('SELECT max(id)::text AS id FROM books')

  const watched = await openPage(t, browser)
  const { page } = watched
  // A slower network than loopback, 1 MB/s: the list (about 1.3 MB) arrives over a second or
  // so, in many pieces. On loopback it can come in one piece, and nothing would show meanwhile
  const cdp = await page.context().newCDPSession(page)
  await cdp.send('Network.enable')
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 1_000_000, uploadThroughput: -1 })
  // What the status line says on the way (`Loading… 1,234 books` while the list streams), and
  // how many book rows are drawn then
  await page.addInitScript(() => {
    const seen: string[] = (window as unknown as { statusSeen: string[] }).statusSeen = []
    new MutationObserver(() => {
      // The empty ones left out: besides the count, the page has the outcome, the feed's state and the Edit dialog's notice
      const text = [...document.querySelectorAll('[role=status]')].map((status) => status.textContent?.trim()).filter(Boolean).join(' / ')
      const seenNow = `${text} (${document.querySelectorAll('tbody tr.book').length} rows)`
      if (seenNow !== seen.at(-1)) seen.push(seenNow)
    }).observe(document, { subtree: true, childList: true, characterData: true })
  })
  await openConsole(page, service.url)
  const started = performance.now()
  await signIn(page)
  const status = await loadedStatus(page, 20_000)
  const loaded = Math.round(performance.now() - started)
  const seen = await page.evaluate(() => (window as unknown as { statusSeen: string[] }).statusSeen)
  t.comment(`signed in and loaded ${BOOKS} books in ${loaded} ms; the status line said: ${seen.join(' | ')}`)
  const partly = seen.filter((line) => {
    const [, books, rows] = /Loading… ([\d,]+) books \((\d+) rows\)/.exec(line) ?? []
    const arrived = Number(books?.replace(/,/g, ''))
    return arrived > 0 && arrived < BOOKS && Number(rows) > 0
  })
  t.ok(partly.length > 0, 'the first rows were shown while the rest of the list was still coming')
  t.equal(status, '20,000 books', 'the status line counts all 20,000')

  const table = booksTable(page)
  const rowCount = Number(await table.getAttribute('aria-rowcount'))
  t.equal(rowCount, BOOKS + 1, 'the table says how many rows it has, the heading row included (aria-rowcount)')
  const inDom = await bookRows(page).count()
  t.ok(inDom > 0 && inDom <= ROWS_IN_DOM, `only the rows in view are in the DOM: ${inDom}`)

  const indexed = async () => bookRows(page).evaluateAll((rows) => rows.map((row) =>
    [Number(row.getAttribute('aria-rowindex')), Number(row.children[0]?.textContent)]))
  t.ok((await indexed()).every(([index, id]) => index === id! + 1), 'each row says where it is (aria-rowindex, after the heading row), by id order')

  const region = page.getByRole('region', { name: 'Book list' })
  await region.evaluate((element) => { element.scrollTop = element.scrollHeight })
  const end = await settle(() => shownBooks(page), (shown) => shown.some(([id]) => id === last?.id), 10_000)
  t.ok(end.some(([id]) => id === last?.id), `scrolled to the bottom, the last book (id ${last?.id}) is shown`)
  t.equal(Number(await bookRow(page, `Book ${BOOKS}`).getAttribute('aria-rowindex')), rowCount, 'as the last row of the table')
  t.ok(await bookRows(page).count() <= ROWS_IN_DOM, `still only the rows in view are in the DOM: ${await bookRows(page).count()}`)
  t.ok((await indexed()).every(([index, id]) => index === id! + 1), 'each numbered as it should be')

  await page.getByRole('searchbox', { name: 'Filter' }).or(page.getByRole('textbox', { name: 'Filter' })).fill(`book ${LAST}`)
  t.equal(await loadedStatusOf(page, '1 of 20,000 books'), '1 of 20,000 books', 'filtered: one of 20,000')
  t.strictSame(await shownBooks(page), [[String(LAST), `Book ${LAST}`, `Author ${LAST % 97}`, String(1900 + LAST % 120)]], 'that one')
  expectQuiet(t, watched)
})

/**
 * The web console (console, at /console/) on a list read in pages: past `?paged-above=1000`,
 * 6,000 books put straight into the database. The rows come page by page through the service's
 * `Link`s as one scrolls, each in its place; pages far from sight are dropped and read again by
 * the path that first read them; the Filter box and the headings ask the service, a filter
 * only after the last key, and a newer filter cancels the request of an older one; and the
 * order is the same as that of a list held whole.
 */
import type { Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { testEnv } from '../helper.js'
import {
  booksTable, bookRows, countStatus, expectQuiet, launchBrowser, misplaced, notLive, openPage, placedRows, reading, recordListings, scrollTo, scrollToEnd, settle, signIn
} from '../helpers/browser.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService } from '../helpers/service.js'
import { needsPrograms } from '../helpers/programs.js'

const BOOKS = 6000
const PAGED_ABOVE = 1000
/** Titles that differ in case, accents and digits, and ties (`Ωmega 1`, `Ωmega 3`); `Quill` in titles and authors */
const SEED = `INSERT INTO books (title, author, year)
  SELECT CASE n % 6
      WHEN 0 THEN 'item ' || n
      WHEN 1 THEN 'Ωmega ' || (n % 4)
      WHEN 2 THEN 'Émile ' || n
      WHEN 3 THEN 'DUNE ' || n
      WHEN 4 THEN 'dune ' || n
      ELSE CASE WHEN n % 5 = 0 THEN 'Quill ' || n ELSE 'Book ' || n END
    END,
    CASE WHEN n % 11 = 0 THEN 'Anna Quill' ELSE 'Author ' || (n % 97) END,
    1900 + n % 120
  FROM generate_series(1, $1::int) AS n`

/** A `GET /books` the page sent: its query, and the path of the next page its answer named. */

/**
 * Types the rest of `text` into the Filter box (what it holds is the start of `text`) a key at a
 * time, all in one task of the page: as a fast typist's keys, never further apart than the
 * filter's delay, however busy the machine.
 */
async function typeAtOnce (page: Page, text: string): Promise<void> {
  await page.getByRole('searchbox', { name: 'Filter' }).focus()
  await page.evaluate((text) => {
    const box = document.getElementById('filter') as HTMLInputElement
    for (let end = box.value.length + 1; end <= text.length; end++) {
      box.value = text.slice(0, end)
      box.dispatchEvent(new InputEvent('input', { bubbles: true, inputType: 'insertText', data: text[end - 1] }))
    }
  }, text)
}

/** The query of a `Link` path. */
const queryOf = (path: string) => Object.fromEntries(new URL(path, 'http://x').searchParams)
const withoutLimit = ({ limit, ...rest }: Record<string, string>) => rest

/** The status line once it reads `expected` (or what it read last). */
const statusReads = (page: Page, expected: string | RegExp) =>
  settle(async () => ((await countStatus(page).textContent()) ?? '').trim(),
    (text) => typeof expected === 'string' ? text === expected : expected.test(text), 10_000)

t.test('a list read in pages', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const db = await pgClient(t, dbUrl)
  await db.query(SEED, [BOOKS])
  await db.query('ANALYZE books')
  /** The ids of the books in the service's order: code points for text, ties by id ascending */
  const ids = async (orderBy = 'id', where = 'true', values: unknown[] = []) =>
    (await db.query<{ id: number }>(`SELECT id::int AS id FROM books WHERE ${where} ORDER BY ${orderBy}`, values)).rows.map(({ id }) => id)
  const byId = await ids()

  /** A fresh page signed in, on a list read in pages past `pagedAbove` books (the console's own number when null). */
  async function signedInPage (t: Test, pagedAbove: number | null) {
    const watched = await openPage(t, browser)
    const listings = recordListings(watched.page)
    await watched.page.goto(`${service.url}/console/${pagedAbove === null ? '' : `?paged-above=${pagedAbove}`}`)
    await signIn(watched.page)
    return { watched, page: watched.page, listings }
  }

  t.test('scrolled to its end through the Links, the rows in place; far pages dropped, then read again by the same path', async (t) => {
    const { watched, page, listings } = await signedInPage(t, PAGED_ABOVE)
    t.equal(await statusReads(page, 'More than 1,000 books'), 'More than 1,000 books', 'past 1,000 books the status line says so')
    t.strictSame(await misplaced(page, byId), [], 'the first rows are the first books by id')
    t.equal(await booksTable(page).getAttribute('aria-rowcount'), '-1', 'the table says its number of rows is not known (aria-rowcount -1)')
    t.equal(listings[0]?.failed, 'net::ERR_ABORTED', 'the list read whole was cancelled')
    t.strictSame(listings[1]?.query, { limit: '100', sort: 'id' }, 'then the first page was asked for')

    const { wrong, scrolls } = await scrollToEnd(page, byId)
    t.strictSame(wrong, [], `scrolled to the end (${scrolls} scrolls to the bottom), every row drawn on the way was the book of its place`)
    t.equal(await statusReads(page, '6,000 books'), '6,000 books', 'at the end the count is known')
    t.equal(await booksTable(page).getAttribute('aria-rowcount'), String(BOOKS + 1), 'and the table says it')
    t.ok(await bookRows(page).count() <= 200, `only the rows in sight are in the DOM (${await bookRows(page).count()})`)
    const walk = listings.slice(1)
    const followed = walk.slice(1).filter((listing, index) => walk[index]!.next !== null &&
      JSON.stringify(withoutLimit(listing.query)) === JSON.stringify(withoutLimit(queryOf(walk[index]!.next!))))
    t.equal(followed.length, walk.length - 1, `each of the ${walk.length} pages after the first was asked for through the Link of the one before`)
    t.equal(walk.at(-1)?.next, null, 'the last page has no Link')

    // The paths that read the pages: the first page's, and every Link's (the limit aside, which a Link may change)
    const first = JSON.stringify(withoutLimit(walk[0]!.query))
    const paths = [first, ...walk.flatMap(({ next }) => next === null ? [] : [JSON.stringify(withoutLimit(queryOf(next)))])]
    const readAgain = async (where: 'top' | number) => {
      const before = listings.length
      await scrollTo(page, where)
      return listings.slice(before).map(({ query }) => JSON.stringify(withoutLimit(query)))
    }
    const top = await readAgain('top')
    t.ok(top[0] === first && top.every((query) => paths.includes(query)),
      `back at the top, the first pages had been dropped: they are read again by the paths that first read them (${top.length} requests)`)
    t.strictSame(await misplaced(page, byId), [], 'and their rows are in place')
    const middle = await readAgain(Math.round(BOOKS / 2) * 36)
    t.ok(middle.length > 0 && middle.every((query) => paths.includes(query) && query !== first),
      `in the middle, the pages there are read again by the paths their Links named (${middle.length} requests)`)
    t.strictSame(await misplaced(page, byId), [], 'their rows in place')
    expectQuiet(t, watched)
  })

  t.test('at the switch to pages, the rows in sight stay in sight, in place', async (t) => {
    const watched = await openPage(t, browser)
    const { page } = watched
    // A slow network: the list read whole comes slowly enough to be scrolled before the switch
    const cdp = await page.context().newCDPSession(page)
    await cdp.send('Network.enable')
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 20_000, uploadThroughput: -1 })
    // The list alone on that network: the feed of changes would share it, and the list is read
    // once the feed answers
    await notLive(page)
    await page.goto(`${service.url}/console/?paged-above=${PAGED_ABOVE}`)
    await signIn(page)
    await statusReads(page, /^Loading… (?:[5-9]\d\d|1,000) books$/)
    const row = 400
    // Until the rows that arrived are laid out, the list is not that long yet
    await settle(() => page.getByRole('region', { name: 'Book list' }).evaluate((element, top) => {
      element.scrollTop = top
      return element.scrollTop
    }, row * 36), (top) => top === row * 36)
    const loading = (await countStatus(page).textContent()) ?? ''
    t.match(loading, /^Loading…/, `scrolled while the list was still read whole (${loading})`)
    t.equal(await statusReads(page, 'More than 1,000 books'), 'More than 1,000 books', 'then the list was read in pages')
    t.equal(await settle(() => booksTable(page).getAttribute('aria-rowcount'), (count) => count === '-1', 10_000), '-1',
      'and shown once read down to the rows in sight (the table has no count)')
    await settle(() => reading(page), (busy) => !busy)
    t.equal(await page.getByRole('region', { name: 'Book list' }).evaluate((element) => element.scrollTop), row * 36, 'the view did not move')
    const placed = await placedRows(page)
    t.ok(placed.some(([place]) => place === row), `row ${row} is still drawn`)
    t.strictSame(await misplaced(page, byId), [], 'every row in its place')
    expectQuiet(t, watched)
  })

  t.test('the Filter box asks the service after the last key, for titles and authors; a newer filter cancels an older one', async (t) => {
    const { watched, page, listings } = await signedInPage(t, PAGED_ABOVE)
    await statusReads(page, 'More than 1,000 books')
    const filter = page.getByRole('searchbox', { name: 'Filter' })
    const quill = await ids('id', "title ILIKE '%quill%' OR author ILIKE '%quill%'")
    const before = listings.length
    // The keys come in one task of the page, as a fast typist's do: on a busy machine real key
    // presses can come further apart than the filter's delay, and each is then rightly asked for
    await typeAtOnce(page, 'QuIlL')
    const filteringQueries = () => listings.slice(before).map(({ query }) => query).filter((query) => 'title' in query || 'author' in query)
    // Until the whole text's pages were asked for
    await settle(async () => filteringQueries().filter((query) => (query.title ?? query.author) === 'QuIlL').length, (n) => n >= 2)
    const matches = /^(At least )?[\d,]+ of more than 1,000 books$/
    t.match(await statusReads(page, matches), matches, 'the first pages of matches: how many so far')
    const filtering = filteringQueries()
    t.strictSame(filtering.filter((query) => !('cursor' in query)).slice(-2), [
      { limit: '100', sort: 'id', title: 'QuIlL' },
      { limit: '100', sort: 'id', author: 'QuIlL' }
    ], 'a first page of titles and one of authors, for the whole text')
    t.strictSame([...new Set(filtering.map((query) => query.title ?? query.author))], ['QuIlL'],
      'none of the texts before the last key was asked for')
    const { wrong } = await scrollToEnd(page, quill, { everyRow: true })
    t.strictSame(wrong, [], `every row, scrolled through one screen at a time, is the book of its place among the ${quill.length} that match`)
    t.equal(await statusReads(page, `${quill.length} of more than 1,000 books`), `${quill.length} of more than 1,000 books`,
      'titles and authors merged, each book once: the count is that of the database')

    // A slow network: the answers to a filter are held back until the next one has been typed
    // and its rows are in place, so that they are certainly still being read meanwhile
    let releaseHeld = () => {}
    const held = new Promise<void>((resolve) => { releaseHeld = resolve })
    const asksForDune = (url: URL) => url.pathname === '/books' && (url.searchParams.get('title') === 'dune' || url.searchParams.get('author') === 'dune')
    await page.route(asksForDune, async (route) => {
      await held
      // A request the page has cancelled meanwhile can no longer be continued
      await route.continue().catch(() => {})
    })
    const sent = listings.length
    await filter.fill('dune')
    await settle(async () => listings.length, (n) => n >= sent + 2)
    await typeAtOnce(page, 'dune 1')
    const dune1 = await ids('id', "title ILIKE '%dune 1%' OR author ILIKE '%dune 1%'")
    await settle(() => placedRows(page), (rows) => rows[0]?.[1] === dune1[0])
    t.strictSame(await misplaced(page, dune1), [], 'the rows are those of the last filter')
    releaseHeld()
    const stale = listings.slice(sent).filter(({ query }) => query.title === 'dune' || query.author === 'dune')
    await settle(async () => stale.map(({ failed, next }) => failed ?? next), (outcomes) => !outcomes.includes(null), 2000)
    t.strictSame(stale.map(({ failed }) => failed), ['net::ERR_ABORTED', 'net::ERR_ABORTED'],
      'the requests of the filter typed before were cancelled')
    await page.unroute(asksForDune)
    expectQuiet(t, watched)
  })

  t.test('sorted by the service, in the same order as a list held whole: code points, ties by id both ways', async (t) => {
    const orders = [
      { click: 'Title', sort: 'title', orderBy: 'title COLLATE "C", id', where: 'true' },
      { click: 'Title', sort: '-title', orderBy: 'title COLLATE "C" DESC, id', where: 'true' },
      { click: 'Author', sort: 'author', orderBy: 'author COLLATE "C", id', where: 'true' }
    ]
    for (const pagedAbove of [PAGED_ABOVE, null]) {
      const mode = pagedAbove === null ? 'held whole' : 'in pages'
      const { watched, page, listings } = await signedInPage(t, pagedAbove)
      await statusReads(page, pagedAbove === null ? '6,000 books' : 'More than 1,000 books')
      for (const { click, sort, orderBy, where } of orders) {
        const expected = await ids(orderBy, where)
        const before = listings.length
        await booksTable(page).getByRole('columnheader', { name: new RegExp(`^${click}\\b`) }).getByRole('button').click()
        await settle(() => placedRows(page), (rows) => rows[0]?.[1] === expected[0])
        t.strictSame(await misplaced(page, expected), [], `${mode}, sort=${sort}: the first rows are in the service's order`)
        if (pagedAbove !== null) {
          t.strictSame(listings.slice(before).filter(({ query }) => !('cursor' in query)).map(({ query }) => query.sort), [sort],
            `${mode}: asked the service for the first page by sort=${sort}`)
        }
      }
      const filtered = await ids('author COLLATE "C", id', "title ILIKE '%dune%' OR author ILIKE '%dune%'")
      await page.getByRole('searchbox', { name: 'Filter' }).fill('dune')
      await settle(() => placedRows(page), (rows) => rows[0]?.[1] === filtered[0])
      t.strictSame(await misplaced(page, filtered), [], `${mode}: filtered, still sorted by author`)
      expectQuiet(t, watched)
    }
  })

  // Last: it changes the books
  t.test('a change shows at once: an edited book in its place, a deleted one gone and the rows after it moved up', async (t) => {
    const { watched, page } = await signedInPage(t, PAGED_ABOVE)
    await statusReads(page, 'More than 1,000 books')
    await settle(() => placedRows(page), (rows) => rows.length > 0)
    const [, deleted, edited] = byId as [number, number, number]
    await bookRows(page).nth(2).getByRole('button', { name: 'Edit', exact: true }).click()
    const edit = page.getByRole('dialog', { name: 'Edit book' })
    await edit.getByLabel('Title', { exact: true }).fill('Edited in pages')
    await edit.getByRole('button', { name: 'Save', exact: true }).click()
    await edit.waitFor({ state: 'hidden' })
    const third = async () => (await bookRows(page).nth(2).innerText()).split('\t').slice(0, 2)
    t.strictSame(await settle(third, ([, title]) => title === 'Edited in pages'), [String(edited), 'Edited in pages'],
      'the edited book shows its new title')
    t.strictSame(await misplaced(page, byId), [], 'in its place')

    await bookRows(page).nth(1).getByRole('button', { name: 'Delete', exact: true }).click()
    const remove = page.getByRole('alertdialog', { name: 'Delete book' })
    await remove.getByRole('button', { name: 'Delete', exact: true }).click()
    await remove.waitFor({ state: 'hidden' })
    const remaining = byId.filter((id) => id !== deleted)
    await settle(() => placedRows(page), (rows) => rows[1]?.[1] === remaining[1])
    t.strictSame(await misplaced(page, remaining), [], 'the deleted book is gone, the rows after it one place up')
    t.equal(await statusReads(page, 'More than 1,000 books'), 'More than 1,000 books', 'the status line as before')
    expectQuiet(t, watched)
  })
})

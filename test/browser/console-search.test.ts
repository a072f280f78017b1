/**
 * The console's Search box (console, at /console/) on 1,000,000 books: a search (`GET /books?q=`)
 * asked after the last key, its matches best first in place of the list, the words it matched
 * marked in title and author (as written, through a typo, without accents, the last word as a
 * prefix), read page by page through the `Link`s as one scrolls, sorted by a heading, a newer
 * search cancelling the older, and the list as it was once the box is emptied.
 *
 * The books go in with one statement before the service first starts, into the tables a
 * migration cut short at its first step that runs alone leaves (not every step but those: a later
 * step changes an index that one of them builds): the service's own migration then builds every
 * index and the search's list of known words over them, once, far sooner than a million inserts
 * through the indexes. That migration is most of the file's time.
 *
 * Then a list held whole (40 books): the search over it, the list kept up to date beneath it.
 */
import type { Locator, Page } from 'playwright-core'
import t from 'tap'
import { testEnv } from '../helper.js'
import {
  bookRows, booksTable, countStatus, expectQuiet, launchBrowser, loadedStatusOf, misplaced, openConsole, openPage, placedRows, recordListings, scrollTo, scrollToEnd,
  seriousAccessibilityViolations, settle, shownBooks, signedIn, signIn
} from '../helpers/browser.js'
import { createDatabase, createDatabaseWithBooks, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { needsPrograms } from '../helpers/programs.js'
import { spawnService, startService } from '../helpers/service.js'
import { migrations } from '../../src/db/migrations.js'

const BOOKS = 1_000_000
/**
 * How long the service may take to migrate a million books before it listens: about 40 s on
 * two idle cores, far longer beside other test files.
 */
const MIGRATION_TIMEOUT = 170_000
/** The words of the other titles, and the names of their authors: none of them a typo of a word searched for here. */
const WORDS = `amber harbor lantern meadow orchard willow ember falcon river stone garden silver winter summer
  autumn spring shadow morning evening island forest valley mountain candle mirror letter journey secret kingdom
  village castle tower bridge ocean desert thunder whisper echo crimson golden velvet marble copper iron glass
  paper clock window sparrow raven fox wolf bear hollow quiet distant northern southern eastern western hidden
  broken burning frozen silent endless last first lost little great old new dark bright wild gentle`.split(/\s+/)
const FIRST_NAMES = 'Ada Ben Clara Daniel Elena Felix Greta Hugo Iris Jonas Karin Leo Mara Nils Olga Paul Rosa Simon Tessa Victor'.split(' ')
const LAST_NAMES = 'Abbott Baker Carver Doyle Ellis Fischer Garner Hale Ingram Jensen Keller Larsen Morgan Novak Ortiz Porter Quinn Reyes Sutton Turner'.split(' ')
/** The books the searches find, at these places of the million (their ids) */
const PLANTED = [
  { id: 1_000, title: 'The Messiah', author: 'Lorna Dune', year: 1990 },
  { id: 250_000, title: 'Messiah of the Dune Sea', author: 'Anna Sandoval', year: 2004 },
  { id: 500_000, title: 'Dune Messiah', author: 'Frank Herbert', year: 1969 },
  { id: 600_000, title: 'Dune', author: 'Frank Herbert', year: 1965 },
  { id: 700_000, title: 'Children of Dune', author: 'Frank Herbert', year: 1976 },
  { id: 800_000, title: 'The Hobbit', author: 'J. R. R. Tolkien', year: 1937 },
  { id: 900_000, title: 'Wuthering Heights', author: 'Emily Brontë', year: 1847 },
  { id: 950_000, title: 'Die Straße', author: 'Søren Ålund', year: 1950 },
  { id: 975_000, title: '<b>Sandworm</b> & <i>Spice</i>', author: 'Ada Ellis', year: 2001 }
]
/**
 * The million books, in one statement: the planted ones at their ids, the others two or three
 * words of WORDS by an author of the names, years 1450 to 2024; `Quixotic` ends one title in 500
 * (2,000 books) and is the last name of one author in 1,000 (another 1,000 books).
 */
const SEED = `INSERT INTO books (title, author, year)
  SELECT coalesce(planted.title, initcap(concat_ws(' ',
           w[1 + (hashint8extended(g, 1) & 65535)::int % cardinality(w)],
           w[1 + (hashint8extended(g, 2) & 65535)::int % cardinality(w)],
           CASE WHEN g % 3 <> 0 THEN w[1 + (hashint8extended(g, 3) & 65535)::int % cardinality(w)] END,
           CASE WHEN g % 500 = 17 THEN 'quixotic' END))),
         coalesce(planted.author, f[1 + (hashint8extended(g, 4) & 65535)::int % cardinality(f)] || ' ' ||
           CASE WHEN g % 1000 = 267 THEN 'Quixotic' ELSE l[1 + (hashint8extended(g, 5) & 65535)::int % cardinality(l)] END),
         coalesce(planted.year, 1450 + (hashint8extended(g, 6) & 65535)::int % 575)
  FROM generate_series(1, $1::int) AS g
  LEFT JOIN unnest($5::int[], $6::text[], $7::text[], $8::int[]) AS planted (id, title, author, year) ON planted.id = g
  CROSS JOIN (SELECT $2::text[] AS w, $3::text[] AS f, $4::text[] AS l) AS names`

/** A `GET /books` the page sent: its query, and the path of the next page its answer named. */

const searchBox = (page: Page) => page.getByRole('searchbox', { name: 'Search' })
const filterBox = (page: Page) => page.getByRole('searchbox', { name: 'Filter' })

/**
 * Types the rest of `text` into the Search box (what it holds is the start of `text`) a key at a
 * time, all in one task of the page: as a fast typist's keys, never further apart than the
 * search's delay, however busy the machine.
 */
async function typeAtOnce (page: Page, text: string): Promise<void> {
  await searchBox(page).focus()
  await page.evaluate((text) => {
    const box = document.getElementById('search') as HTMLInputElement
    for (let end = box.value.length + 1; end <= text.length; end++) {
      box.value = text.slice(0, end)
      box.dispatchEvent(new InputEvent('input', { bubbles: true, inputType: 'insertText', data: text[end - 1] }))
    }
  }, text)
}

/** The status line that counts the books, also while it says a search is under way. */
const countLine = (page: Page) => countStatus(page).or(page.getByRole('status').filter({ hasText: /^Searching…$/ }))

/** The status line once it reads `expected` (or what it read last). */
const statusReads = (page: Page, expected: string | RegExp) =>
  settle(async () => ((await countLine(page).textContent()) ?? '').trim(),
    (text) => typeof expected === 'string' ? text === expected : expected.test(text), 15_000)

/** Title, author, and the texts marked in each, of every book row in the DOM, in order. */
function markedRows (page: Page): Promise<Array<{ title: string, author: string, marked: [string[], string[]] }>> {
  return bookRows(page).evaluateAll((rows) => rows.map((row) => {
    const [, title, author] = [...row.children]
    const marks = (cell: Element | undefined) => [...(cell?.querySelectorAll('mark') ?? [])].map((mark) => mark.textContent ?? '')
    return { title: title?.textContent ?? '', author: author?.textContent ?? '', marked: [marks(title), marks(author)] }
  }))
}

/** The titles of the book rows once they are `expected` (or what they were last). */
const titlesShown = async (page: Page, expected: string[]) =>
  (await settle(() => markedRows(page), (rows) => rows.map(({ title }) => title).join('\n') === expected.join('\n'), 15_000))
    .map(({ title }) => title)

const heading = (page: Page, name: string): Locator => booksTable(page).getByRole('columnheader', { name: new RegExp(`^${name}\\b`) })

t.test('the Search box on 1,000,000 books', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const started = performance.now()
  const seconds = (since: number) => `${((performance.now() - since) / 1000).toFixed(1)} s`
  // The tables as a migration cut short before its first step that runs alone leaves them
  const firstAlone = migrations.findIndex(({ alone }) => alone !== undefined)
  const dbUrl = await createDatabaseWithBooks(t, 0, (step) => migrations.indexOf(step) < firstAlone)
  const db = await pgClient(t, dbUrl, { queryTimeoutMs: 120_000 })
  await db.query(SEED, [BOOKS, WORDS, FIRST_NAMES, LAST_NAMES, ...(['id', 'title', 'author', 'year'] as const).map((key) => PLANTED.map((book) => book[key]))])
  const seeded = performance.now()
  t.comment(`${BOOKS.toLocaleString('en-US')} books stored in ${seconds(started)}`)
  const [service, browser] = await Promise.all([spawnService(t, testEnv(dbUrl)), launchBrowser(t)])
  await service.listening(MIGRATION_TIMEOUT)
  t.comment(`the service migrated them (every index, the known words) and listens after ${seconds(seeded)}`)
  const token = await service.token()
  /** The ids of a search's first page, as the service answers it */
  const answered = async (query: string) =>
    ((await service.request('GET', `/books?limit=1000&${query}`, { token })).body as { data: Array<{ id: number }> }).data.map(({ id }) => id)
  const ids = async (where: string, orderBy = 'id') =>
    (await db.query<{ id: number }>(`SELECT id::int AS id FROM books WHERE ${where} ORDER BY ${orderBy}`)).rows.map(({ id }) => id)
  for (const book of PLANTED) {
    const { rows: [stored] } = await db.query('SELECT id::int AS id, title, author, year FROM books WHERE id = $1', [book.id])
    t.strictSame(stored, book, `book ${book.id} is ${book.title}`)
  }

  const watched = await openPage(t, browser)
  const { page } = watched
  const listings = recordListings(page)
  await openConsole(page, service.url)
  await signIn(page)
  t.equal(await statusReads(page, 'More than 100,000 books'), 'More than 100,000 books', 'signed in: the list, read in pages past 100,000 books')

  t.test('typing shows the matching books best first, the words matched marked: as written, the last as a prefix, through a typo, without accents', async (t) => {
    const before = listings.length
    await typeAtOnce(page, 'dune messiah')
    const best = ['Dune Messiah', 'Messiah of the Dune Sea', 'The Messiah']
    t.strictSame(await titlesShown(page, best), best,
      'best first: both words next to each other in the title, then both in the title, then one in the title and one in the author')
    t.equal(await statusReads(page, '3 matching books'), '3 matching books', 'the status line counts them')
    t.strictSame(await placedRows(page), (await answered('q=dune%20messiah')).map((id, place) => [place, id]), 'in the order the service answers')
    // The list reads on meanwhile (its next page, by id), a search asks with q
    const searches = listings.slice(before).map(({ query }) => query).filter((query) => 'q' in query)
    t.strictSame(searches, [{ limit: '100', q: 'dune messiah' }], 'one request, for the whole text after the last key, without sort')
    t.strictSame((await markedRows(page)).map(({ marked }) => marked), [
      [['Dune', 'Messiah'], []],
      [['Messiah', 'Dune'], []],
      [['Messiah'], ['Dune']]
    ], 'each word found is marked where it is, in title and author')
    t.ok(await filterBox(page).isDisabled(), 'the Filter box is disabled while the search is shown')

    const cases = [
      { q: 'dune mess', titles: best, marked: [[['Dune', 'Mess'], []], [['Mess', 'Dune'], []], [['Mess'], ['Dune']]], what: 'the last word as a prefix: its letters marked' },
      { q: 'hobit tolkein', titles: ['The Hobbit'], marked: [[['Hobbit'], ['Tolkien']]], what: 'a typo in each word finds the book, and marks its words' },
      { q: 'HERBRET', titles: ['Dune Messiah', 'Dune', 'Children of Dune'], marked: [[[], ['Herbert']], [[], ['Herbert']], [[], ['Herbert']]], what: 'two letters swapped, in capitals' },
      { q: 'strasse soren', titles: ['Die Straße'], marked: [[['Straße'], ['Søren']]], what: 'ß as ss, ø as o' },
      { q: 'bronte', titles: ['Wuthering Heights'], marked: [[[], ['Brontë']]], what: 'accents ignored' },
      { q: 'dune -messiah', titles: ['Dune', 'Children of Dune'], marked: [[['Dune'], []], [['Dune'], []]], what: 'a word excluded: neither listed nor marked' },
      { q: 'sandworm spice', titles: ['<b>Sandworm</b> & <i>Spice</i>'], marked: [[['Sandworm', 'Spice'], []]], what: 'a title that looks like HTML is text, its words marked' }
    ]
    for (const { q, titles, marked, what } of cases) {
      await searchBox(page).fill('')
      await typeAtOnce(page, q)
      t.strictSame(await titlesShown(page, titles), titles, `${q}: ${what}`)
      t.strictSame((await markedRows(page)).map(({ marked }) => marked), marked, `${q}: marked`)
      t.strictSame(await placedRows(page), (await answered(`q=${encodeURIComponent(q)}`)).map((id, place) => [place, id]), `${q}: the service's books, in its order`)
    }
    t.equal(await booksTable(page).locator('tbody b, tbody i').count(), 0, 'no element made of a title')
    expectQuiet(t, watched)
  })

  t.test('a newer search cancels the requests of the older one', async (t) => {
    await searchBox(page).fill('')
    await statusReads(page, 'More than 100,000 books')
    // The answers to the older search held back until the newer one is shown
    let release = () => {}
    const held = new Promise<void>((resolve) => { release = resolve })
    const older = (url: URL) => url.pathname === '/books' && url.searchParams.get('q') === 'tolk'
    await page.route(older, async (route) => {
      await held
      // A request the page has cancelled meanwhile can no longer be continued
      await route.continue().catch(() => {})
    })
    const before = listings.length
    await typeAtOnce(page, 'tolk')
    await settle(async () => listings.length, (n) => n > before)
    t.equal(await statusReads(page, 'Searching…'), 'Searching…', 'the status line says the search is under way')
    await typeAtOnce(page, 'tolkien')
    t.strictSame(await titlesShown(page, ['The Hobbit']), ['The Hobbit'], 'the newer search is shown')
    release()
    const stale = listings.slice(before).filter(({ query }) => query.q === 'tolk')
    await settle(async () => stale.map(({ failed, next }) => failed ?? next), (outcomes) => !outcomes.includes(null), 2000)
    t.strictSame(stale.map(({ failed }) => failed), ['net::ERR_ABORTED'], 'the request of the older search was cancelled')
    await page.unroute(older)
    t.strictSame(await titlesShown(page, ['The Hobbit']), ['The Hobbit'], 'and its answer never shows')
    expectQuiet(t, watched)
  })

  t.test('the matches read page by page through the Links as one scrolls, best first; a heading sorts them', async (t) => {
    await searchBox(page).fill('')
    await statusReads(page, 'More than 100,000 books')
    const inTitles = await ids("title LIKE '%Quixotic%'")
    const inAuthors = await ids("author LIKE '%Quixotic%'")
    t.equal(inTitles.length + inAuthors.length, 3000, '2,000 titles and 1,000 authors hold Quixotic')
    const before = listings.length
    await typeAtOnce(page, 'QUIXOTIC')
    t.match(await statusReads(page, /^At least [\d,]+ matching books$/), /^At least/, 'the first page: how many so far')
    const { wrong, scrolls } = await scrollToEnd(page, [...inTitles, ...inAuthors])
    t.strictSame(wrong, [], `scrolled to the end (${scrolls} scrolls), each row drawn on the way the book of its place: the titles first, then the authors, each by id`)
    t.equal(await statusReads(page, '3,000 matching books'), '3,000 matching books', 'at the end the count is known')
    const walk = listings.slice(before)
    t.strictSame(walk[0]?.query, { limit: '100', q: 'QUIXOTIC' }, 'the first page asked for')
    const followed = walk.slice(1).filter((listing, index) => listing.query.cursor !== undefined &&
      new URL(walk[index]!.next ?? '/', 'http://x').searchParams.get('cursor') === listing.query.cursor && listing.query.q === 'QUIXOTIC' &&
      listing.query.sort === undefined)
    t.equal(followed.length, walk.length - 1, `each of the ${walk.length - 1} pages after it through the Link of the one before`)
    t.equal(walk.at(-1)?.next, null, 'the last has no Link')
    t.ok((await markedRows(page)).every(({ title, author, marked }) => [...marked[0], ...marked[1]].join() === 'Quixotic' &&
      (title.includes('Quixotic') || author.includes('Quixotic'))), 'Quixotic is marked in every row')

    const sorts = [
      { sort: 'title', aria: 'ascending', orderBy: 'title COLLATE "C", id' },
      { sort: '-title', aria: 'descending', orderBy: 'title COLLATE "C" DESC, id' },
      { sort: undefined, aria: null, orderBy: null }
    ]
    for (const { sort, aria, orderBy } of sorts) {
      const from = listings.length
      await heading(page, 'Title').getByRole('button').click()
      const expected = orderBy === null
        ? [...inTitles, ...inAuthors]
        : await ids("title LIKE '%Quixotic%' OR author LIKE '%Quixotic%'", orderBy)
      await settle(() => placedRows(page), (rows) => rows[0]?.[1] === expected[0] && rows[1]?.[1] === expected[1], 15_000)
      t.strictSame(await misplaced(page, expected), [], `sorted ${sort ?? 'best first again'}: the first rows in that order`)
      t.strictSame(listings.slice(from).filter(({ query }) => query.cursor === undefined).map(({ query }) => query),
        [{ limit: '100', q: 'QUIXOTIC', ...(sort === undefined ? {} : { sort }) }], `asked with q${sort === undefined ? ' alone' : ` and sort=${sort}`}`)
      t.equal(await heading(page, 'Title').getAttribute('aria-sort'), aria, `the Title heading says ${aria ?? 'nothing'}`)
    }
    expectQuiet(t, watched)
  })

  t.test('emptying the box shows the list again as it was, where it was scrolled to', async (t) => {
    await searchBox(page).fill('')
    await statusReads(page, 'More than 100,000 books')
    const byId = await ids('id <= 5000')
    for (let scrolls = 0; scrolls < 20 && ((await placedRows(page))[0]?.[0] ?? 0) < 2000; scrolls++) await scrollTo(page, 'bottom')
    const rows = await placedRows(page)
    t.ok((rows[0]?.[0] ?? 0) >= 2000, `the list scrolled down to row ${rows[0]?.[0]}`)
    t.strictSame(await misplaced(page, byId), [], 'each row the book of its place')
    await typeAtOnce(page, 'dune')
    const found = ['Messiah of the Dune Sea', 'Dune Messiah', 'Dune', 'Children of Dune', 'The Messiah']
    t.strictSame(await titlesShown(page, found), found, 'a search shown in its place, the titles that hold the word first')
    const from = listings.length
    await searchBox(page).fill('')
    t.strictSame(await settle(() => placedRows(page), (now) => JSON.stringify(now) === JSON.stringify(rows)), rows,
      'the same rows in the same places, in sight again')
    t.equal(await statusReads(page, 'More than 100,000 books'), 'More than 100,000 books', 'the status line as before')
    t.strictSame((await markedRows(page)).flatMap(({ marked }) => marked.flat()), [], 'nothing marked')
    t.notOk(await filterBox(page).isDisabled(), 'the Filter box usable again')
    t.strictSame(listings.slice(from).filter(({ query }) => query.cursor === undefined), [], 'the list is not read again from its top')
    expectQuiet(t, watched)
  })

  t.teardown(() => { t.comment(`the file's test took ${seconds(started)}`) })
})

t.test('the Search box over a list held whole: the list kept up to date beneath it, shown again as it was', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const db = await pgClient(t, dbUrl)
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'Volume ' || n, CASE WHEN n % 10 = 0 THEN 'Frank Herbert' ELSE 'Author ' || n END, 1900 + n FROM generate_series(1, 40) AS n`)
  const ids = async (where: string, orderBy = 'id') =>
    (await db.query<{ id: number }>(`SELECT id::int AS id FROM books WHERE ${where} ORDER BY ${orderBy}`)).rows.map(({ id }) => String(id))
  const token = await service.token()
  const api = async (method: string, path: string, body?: unknown) => {
    const response = await service.request(method, path, { token, body })
    if (response.status >= 300) throw new Error(`${method} ${path} answered ${response.status}: ${response.text}`)
    return (response.body as { data: { id: number } }).data
  }

  const watched = await openPage(t, browser)
  const { page } = watched
  await signedIn(page, service.url)
  await settle(async () => (await page.getByRole('status').filter({ hasText: /^Live$/ }).count()) > 0, (live) => live)
  await filterBox(page).fill('Volume 1')
  await heading(page, 'Title').getByRole('button').click()
  await heading(page, 'Title').getByRole('button').click()
  const listed = async () => (await shownBooks(page)).map(([id]) => id)
  const filtered = "title ILIKE '%volume 1%' OR author ILIKE '%volume 1%'"
  const byTitleDown = 'title COLLATE "C" DESC, id'
  const before = await ids(filtered, byTitleDown)
  t.strictSame(await settle(listed, (shown) => shown.join() === before.join()), before, 'the list filtered and sorted by title, the other way')

  await typeAtOnce(page, 'herbret')
  const herbert = ['Volume 10', 'Volume 20', 'Volume 30', 'Volume 40']
  t.strictSame(await titlesShown(page, herbert), herbert, 'a search through a typo, in place of the list')
  t.ok((await markedRows(page)).every(({ marked }) => marked[1].join() === 'Herbert'), 'the author marked in each row')
  t.equal(await statusReads(page, '4 matching books'), '4 matching books', 'counted')
  t.strictSame((await seriousAccessibilityViolations(page)).map(({ id, nodes }) => `${id} at ${nodes.join(', ')}`), [],
    'axe-core finds nothing serious or critical in the search shown (the marks\' contrast, the Filter box disabled)')

  // Elsewhere, while the search is shown
  const [ten, twelve, thirty] = await Promise.all(['Volume 10', 'Volume 12', 'Volume 30'].map(async (title) =>
    (await db.query<{ id: number }>('SELECT id::int AS id FROM books WHERE title = $1', [title])).rows[0]!.id))
  await api('PUT', `/book/${ten}`, { title: 'Renamed' })
  await api('DELETE', `/book/${thirty}`)
  await api('DELETE', `/book/${twelve}`)
  await api('POST', '/book', { title: 'Volume 1 again', author: 'Frank Herbert', year: 2000 })
  const changed = ['Renamed', 'Volume 20', 'Volume 40']
  t.strictSame(await titlesShown(page, changed), changed, 'a book changed elsewhere shows its new values in its place, one deleted goes, one created is not added')
  t.equal(await statusReads(page, '3 matching books'), '3 matching books', 'the count follows')
  t.strictSame((await markedRows(page)).map(({ marked }) => marked), [[[], ['Herbert']], [[], ['Herbert']], [[], ['Herbert']]], 'still marked')

  await searchBox(page).fill('')
  const now = await ids(filtered, byTitleDown)
  t.strictSame(await settle(listed, (shown) => shown.join() === now.join()), now,
    'emptied: the list again, filtered and sorted as it was, with the changes made meanwhile')
  const all = Number((await db.query<{ n: number }>('SELECT count(*)::int AS n FROM books')).rows[0]!.n)
  t.equal(await loadedStatusOf(page, `${now.length} of ${all} books`), `${now.length} of ${all} books`, 'and counted')
  t.equal(await heading(page, 'Title').getAttribute('aria-sort'), 'descending', 'the Title heading says how it is sorted')
  t.equal(await filterBox(page).inputValue(), 'Volume 1', 'the filter as typed')
  expectQuiet(t, watched)
})

/**
 * The console's Import books and Export CSV in Chromium, against the real service: files made
 * here (100,000 books of CSV, NDJSON, a file with bad lines) picked in the dialog as a person
 * picks them, what the page sends and shows, and what the database then holds; the exported
 * file as saved, byte for byte against the service's own CSV answer.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Page, Request } from 'playwright-core'
import type { Test } from 'tap'
import t from 'tap'
import { testEnv } from '../helper.js'
import {
  bookRow, countStatus, expectQuiet, launchBrowser, openConsole, openPage, seriousAccessibilityViolations, settle, signIn, signedIn, TOKEN_KEY
} from '../helpers/browser.js'
import { createDatabase, pgClient, STORE_INDEPENDENT } from '../helpers/database.js'
import { startService } from '../helpers/service.js'
import { mint, nowSeconds } from '../helpers/tokens.js'
import { needsPrograms } from '../helpers/programs.js'
import { BOOKS_CSV_HEADER, bookCsvLine, csvField } from '../../src/csv-text.js'
import type { BookCreate } from '../../src/schemas/book.js'

/** The books of the big CSV file: some with text that needs quotes in CSV. */
const MANY = 100_000
function manyBook (n: number): BookCreate {
  if (n % 10_000 === 1) return { title: `Tome ${n}, "quoted", with a comma`, author: 'Ann\nOn two lines', year: -n }
  return { title: `Tome ${n}`, author: `Author ${n % 97}`, year: 1900 + n % 120 }
}

/** A directory for the test's files, removed when it ends. */
function fileDirectory (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'bookkeeping-console-bulk-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** CSV of `books`, header `title,author,year`, lines in CRLF, as a spreadsheet saves it. */
function csvOf (books: BookCreate[]): string {
  return 'title,author,year\r\n' + books.map(({ title, author, year }) => `${csvField(title)},${csvField(author)},${year}\r\n`).join('')
}

/** The Import books dialog. */
function importDialog (page: Page) {
  return page.getByRole('dialog', { name: 'Import books' })
}

/**
 * The dialog's status line once it reads something `done` accepts; what it read last otherwise,
 * with the dialog's alert (the failure shown) if any.
 */
async function importOutcome (page: Page, done: (text: string) => boolean, ms = 5000): Promise<string> {
  const dialog = importDialog(page)
  const read = async () => ((await dialog.locator('[role=status]').textContent()) ?? '').trim()
  const text = await settle(read, done, ms)
  if (done(text)) return text
  return `${text} (alert: ${((await dialog.locator('[role=alert]').textContent()) ?? '').trim()})`
}

/** Opens the dialog, picks `file`, and starts the import. */
async function importFile (page: Page, file: string): Promise<void> {
  await page.getByRole('button', { name: 'Import books', exact: true }).click()
  await importDialog(page).getByLabel('File', { exact: true }).setInputFiles(file)
  await importDialog(page).getByRole('button', { name: 'Import', exact: true }).click()
}

/** The requests the page sends to `POST /books` (with their query), as sent. */
function importRequests (page: Page): Request[] {
  const sent: Request[] = []
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === '/books') sent.push(request)
  })
  return sent
}

t.test('Import books and Export CSV', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const db = await pgClient(t, dbUrl)
  const token = await service.token()
  const dir = fileDirectory(t)
  const stored = async () => (await db.query<BookCreate>('SELECT title, author, year FROM books ORDER BY id')).rows
  /** `GET /books` with `Accept: text/csv`: the bytes of the service's answer. */
  const csvExport = async (query: Record<string, string>) => {
    const response = await fetch(`${service.url}/books?${new URLSearchParams(query).toString()}`, {
      headers: { Authorization: token, Accept: 'text/csv' }
    })
    t.equal(response.status, 200, `GET /books?${new URLSearchParams(query).toString()} as CSV`)
    return Buffer.from(await response.arrayBuffer())
  }

  t.test('a CSV file of 100,000 books: a progress bar while it goes up, then the count; the books listed', async (t) => {
    const books = Array.from({ length: MANY }, (_, index) => manyBook(index + 1))
    const file = join(dir, 'catalogue.csv')
    writeFileSync(file, csvOf(books))
    const watched = await openPage(t, browser)
    const { page } = watched
    await signedIn(page, service.url)
    // What the progress bar showed, each time it changed
    await page.evaluate(() => {
      const bar = document.querySelector('progress')!
      const seen: string[] = (window as unknown as { progressSeen: string[] }).progressSeen = []
      new MutationObserver(() => seen.push(`${bar.hidden ? 'hidden' : 'shown'} ${bar.value}/${bar.max}`))
        .observe(bar, { attributes: true })
    })
    // An upload of a few seconds (1 MB/s), as over a slow link: on loopback it is over at once
    const cdp = await page.context().newCDPSession(page)
    await cdp.send('Network.enable')
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: 1_000_000 })
    const sent = importRequests(page)

    await importFile(page, file)
    const outcome = await importOutcome(page, (text) => text.startsWith('Books imported'), 60_000)
    t.equal(outcome, 'Books imported: 100,000 books.', "the dialog says how many were stored, in the API's words")
    const progress = await page.evaluate(() => (window as unknown as { progressSeen: string[] }).progressSeen)
    const size = readFileSync(file).length
    const partly = progress.filter((state) => {
      const [shown, value, max] = /^(\w+) (\d+(?:\.\d+)?)\/(\d+)$/.exec(state)?.slice(1) ?? []
      return shown === 'shown' && Number(value) > 0 && Number(value) < Number(max) && Number(max) === size
    })
    t.ok(partly.length > 0, `the progress bar showed the file part-way up (${partly.length} states of ${progress.length}, e.g. ${partly[0]})`)
    t.equal(sent.length, 1, 'one request')
    const headers = await sent[0]!.allHeaders()
    t.equal(headers['content-type'], 'text/csv', 'sent as text/csv, from the file name')
    t.equal(headers.prefer, 'return=minimal', 'asking for the count only')
    t.equal(new URL(sent[0]!.url()).search, '', 'a real import, no dry run')
    t.strictSame(await stored(), books, 'the database holds the 100,000 books, in the order of the file, the quoted text as written')

    const counted = await settle(async () => ((await countStatus(page).textContent()) ?? '').trim(), (text) => text === '100,000 books', 90_000)
    t.equal(counted, '100,000 books', 'the list counts them (they came through the feed)')
    await importDialog(page).getByRole('button', { name: 'Close', exact: true }).click()
    await page.getByRole('searchbox', { name: 'Filter' }).fill('Tome 99999')
    t.equal(await settle(() => bookRow(page, 'Tome 99999').count(), (n) => n === 1), 1, 'and lists them: the last one found by the filter')
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 })
    expectQuiet(t, watched)
  })

  t.test('NDJSON files (.ndjson, .jsonl): sent as application/x-ndjson, counted, listed', async (t) => {
    const before = (await stored()).length
    const books: BookCreate[] = [
      { title: 'Ndjson one ✓', author: 'Zoë', year: 2001 },
      { title: 'Ndjson two "quoted"', author: 'مؤلف', year: -44 },
      { title: 'Ndjson three', author: 'Lines', year: 1999 }
    ]
    writeFileSync(join(dir, 'few.ndjson'), books.slice(0, 2).map((book) => JSON.stringify(book) + '\n').join(''))
    writeFileSync(join(dir, 'one.jsonl'), JSON.stringify(books[2]) + '\n')
    const watched = await openPage(t, browser)
    const { page } = watched
    await signedIn(page, service.url)
    const sent = importRequests(page)

    await importFile(page, join(dir, 'few.ndjson'))
    t.equal(await importOutcome(page, (text) => text.startsWith('Books imported')), 'Books imported: 2 books.', 'two books')
    await importDialog(page).getByLabel('File', { exact: true }).setInputFiles(join(dir, 'one.jsonl'))
    await importDialog(page).getByRole('button', { name: 'Import', exact: true }).click()
    t.equal(await importOutcome(page, (text) => text === 'Books imported: 1 book.'), 'Books imported: 1 book.', 'then one')
    t.strictSame(await Promise.all(sent.map(async (request) => (await request.allHeaders())['content-type'])),
      ['application/x-ndjson', 'application/x-ndjson'], 'both sent as application/x-ndjson')
    t.strictSame((await stored()).slice(before), books, 'the database holds the three, as written')
    await importDialog(page).getByRole('button', { name: 'Close', exact: true }).click()
    // At the end of a list of 100,000: the filter brings them into sight
    await page.getByRole('searchbox', { name: 'Filter' }).fill('Ndjson')
    for (const { title } of books) {
      t.ok(await settle(() => bookRow(page, title).count(), (n) => n === 1), `${title} is listed`)
    }
    expectQuiet(t, watched)
  })

  t.test('a file with bad lines: refused, the lines refused and why, nothing stored', async (t) => {
    const before = await stored()
    const changesBefore = await db.query('SELECT count(*)::int AS n FROM book_changes')
    // 1,000 books, 150 of them bad: more than the 100 problems the dry run lists
    const lines = Array.from({ length: 1000 }, (_, index) => {
      const n = index + 1
      if (n % 6 === 4 && n <= 900) return `Bad ${n},Someone,not a year\r\n`
      return `Fine ${n},Someone,${n}\r\n`
    })
    const bad = lines.filter((line) => line.startsWith('Bad')).length
    t.equal(bad, 150, 'the file has 150 bad lines')
    const file = join(dir, 'bad.csv')
    writeFileSync(file, 'title,author,year\r\n' + lines.join(''))
    const watched = await openPage(t, browser)
    const { page } = watched
    await signedIn(page, service.url)
    const sent = importRequests(page)

    await importFile(page, file)
    const outcome = await importOutcome(page, (text) => text.startsWith('Nothing was stored'), 20_000)
    t.equal(outcome, 'Nothing was stored: bad.csv has 150 problems (1,000 books read). The first 100 are listed.',
      'the dialog says nothing was stored, how many problems, and that the first 100 are listed')
    t.strictSame(sent.map((request) => new URL(request.url()).search), ['', '?dry_run=true'],
      'the import refused, the same file then sent to the dry run')
    t.equal((await sent[1]!.allHeaders())['content-type'], 'text/csv', 'as text/csv again')
    const table = importDialog(page).getByRole('table', { name: 'Lines refused' })
    const rows = await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((cell) => cell.textContent)))
    // The dry run's own report of the same file, asked here
    const report = await fetch(`${service.url}/books?dry_run=true`, {
      method: 'POST', headers: { Authorization: token, 'Content-Type': 'text/csv' }, body: readFileSync(file)
    }).then((response) => response.json()) as { data: { problems: Array<{ line: number, error: string }>, problem_count: number } }
    t.equal(report.data.problem_count, 150, 'the dry run finds the 150')
    t.equal(rows.length, 100, 'the dialog lists 100 lines')
    t.strictSame(rows, report.data.problems.map(({ line, error }) => [line.toLocaleString('en-US'), error]),
      "each the line and the error of the dry run's report")
    t.equal(rows[0]?.[0], '5', 'the first bad line: line 5 of the file (the header is line 1)')
    t.match(await importDialog(page).textContent(), '150 problems in all', 'how many in all')
    t.strictSame(await seriousAccessibilityViolations(page, '#import-dialog'), [], 'axe-core finds nothing serious or critical in the dialog')
    t.strictSame(await stored(), before, 'nothing stored')
    t.strictSame(await db.query('SELECT count(*)::int AS n FROM book_changes').then(({ rows }) => rows), changesBefore.rows,
      'nothing in the feed')
    expectQuiet(t, watched)
  })

  t.test('the session expired: signed in again, the file sent again, stored once', async (t) => {
    const before = (await stored()).length
    const file = join(dir, 'after-expiry.csv')
    writeFileSync(file, csvOf([{ title: 'After expiry', author: 'Someone', year: 2020 }]))
    const watched = await openPage(t, browser)
    const { page } = watched
    await signedIn(page, service.url)
    const expired = mint({ payload: { exp: nowSeconds() - 60 } })
    await page.evaluate(([key, value]) => sessionStorage.setItem(key!, value!), [TOKEN_KEY, expired])
    const sent = importRequests(page)

    await importFile(page, file)
    const again = page.getByRole('dialog', { name: 'Sign in again' })
    await again.waitFor()
    await signIn(again)
    t.equal(await importOutcome(page, (text) => text.startsWith('Books imported')), 'Books imported: 1 book.', 'imported once signed in')
    t.equal(sent.length, 2, 'sent twice: refused, then with the new token')
    t.equal((await sent[0]!.allHeaders()).authorization, expired, 'first with the expired token')
    t.equal((await stored()).length, before + 1, 'stored once')
    expectQuiet(t, watched)
  })

  t.test('Export CSV: the list with its filter and order, saved as the service writes it', async (t) => {
    for (const book of [
      { title: 'Zebra tales', author: 'Ann', year: 1 },
      { title: 'Other', author: 'Zed Zebra', year: 2 },
      { title: 'Zebra, "both"', author: 'Zebra', year: 3 }
    ]) await service.createBook(token, book)
    await db.query('INSERT INTO books (title, author, year) SELECT \'Atlas \' || n, \'Cartographer\', n FROM generate_series(1, 30) AS n')
    const watched = await openPage(t, browser)
    const { page } = watched
    await openConsole(page, service.url)
    await signIn(page)
    await page.getByRole('button', { name: 'Sign out', exact: true }).waitFor()
    const exports: Request[] = []
    page.on('request', (request) => {
      if (request.method() === 'GET' && new URL(request.url()).pathname === '/books' && request.headers().accept === 'text/csv') {
        exports.push(request)
      }
    })
    const download = async () => {
      const [saved] = await Promise.all([
        page.waitForEvent('download', { timeout: 30_000 }),
        page.getByRole('button', { name: 'Export CSV', exact: true }).click()
      ])
      t.equal(saved.suggestedFilename(), 'books.csv', 'saved as books.csv')
      return readFileSync(await saved.path())
    }

    const whole = await download()
    t.equal(whole.subarray(0, BOOKS_CSV_HEADER.length).toString(), BOOKS_CSV_HEADER, 'a CSV file')
    t.ok(whole.equals(await csvExport({ sort: 'id' })), `no filter: the file is GET /books?sort=id as CSV, byte for byte (${whole.length} bytes)`)

    // Sorted by title, then the other way
    await page.getByRole('button', { name: 'Title', exact: true }).click()
    await page.getByRole('button', { name: 'Title', exact: true }).click()
    await settle(() => page.getByRole('columnheader', { name: 'Title' }).getAttribute('aria-sort'), (sort) => sort === 'descending')
    await page.getByRole('searchbox', { name: 'Filter' }).fill('Atlas 1')
    exports.length = 0
    const titles = await download()
    t.ok(titles.equals(await csvExport({ sort: '-title', title: 'Atlas 1' })),
      'a filter no author matches: the file is GET /books?sort=-title&title=Atlas%201 as CSV, byte for byte')
    t.equal(titles.toString().split('\r\n').slice(1, -1).map((line) => line.split(',')[1]).join(' / '),
      ['Atlas 19', 'Atlas 18', 'Atlas 17', 'Atlas 16', 'Atlas 15', 'Atlas 14', 'Atlas 13', 'Atlas 12', 'Atlas 11', 'Atlas 10', 'Atlas 1'].join(' / '),
      'Atlas 1 and Atlas 10 to 19, by title descending')
    const asked = exports.map((request) => Object.fromEntries(new URL(request.url()).searchParams))
    t.strictSame(asked, [{ sort: '-title', title: 'Atlas 1' }, { sort: '-title', author: 'Atlas 1' }],
      'asked with the order and the filter, by title and by author (the Filter box matches either), no limit, no cursor')
    t.ok(exports.every((request) => request.headers().authorization !== undefined), 'with the token in Authorization')

    // A filter that matches titles and authors: both exports, merged in the list's order, each book once
    await page.getByRole('searchbox', { name: 'Filter' }).fill('zebra')
    const merged = await download()
    const { rows } = await db.query<{ id: string, title: string, author: string, year: number }>(
      `SELECT id, title, author, year FROM books WHERE title ILIKE '%zebra%' OR author ILIKE '%zebra%'
       ORDER BY title COLLATE "C" DESC, id`)
    t.equal(rows.length, 3, 'three books match')
    t.equal(merged.toString(), BOOKS_CSV_HEADER + rows.map(bookCsvLine).join(''),
      'title or author: the file holds each match once, in the order shown, each line as the service writes it')
    t.ok(merged.includes((await csvExport({ sort: '-title', title: 'zebra' })).subarray(BOOKS_CSV_HEADER.length)),
      'the lines found by title, as the service wrote them')
    expectQuiet(t, watched)
  })
})

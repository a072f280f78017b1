/**
 * The web console (console, at /console/) end to end, as its user sees it: the service as a
 * real process, Debian's Chromium, and each flow through the page — signing in and out, adding,
 * filtering, sorting, editing and deleting books, a session that expires in the middle of an
 * edit — and the errors the API answers, each shown with its request id. The page's requests are
 * read (to see what it sent), never answered by the test: every answer is the service's.
 */
import type { Page } from 'playwright-core'
import t from 'tap'
import { PASSWORD, USERNAME, testEnv } from '../helper.js'
import {
  bookRow, deleteDialog, booksTable, expectQuiet, launchBrowser, loadedStatus, loadedStatusOf, notLive, openConsole, openPage, recordRequests, settle,
  shownBook, shownBooks, signIn, signedIn, storedToken, TOKEN_KEY, tokenResponse
} from '../helpers/browser.js'
import { createDatabase, refuseConnections, STORE_INDEPENDENT } from '../helpers/database.js'
import type { Book, BookCreate } from '../../src/schemas/book.js'
import { startService } from '../helpers/service.js'
import { mint, nowSeconds } from '../helpers/tokens.js'
import { needsPrograms } from '../helpers/programs.js'

/** The answer to the next request of `method` to a path matching `path`. */
function nextResponse (page: Page, method: string, path: RegExp) {
  return page.waitForResponse((response) =>
    response.request().method() === method && path.test(new URL(response.url()).pathname))
}

/** The visible alert that contains `text`, once there: its text as shown. */
function alertWith (scope: Page, text: string): Promise<string> {
  return settle(async () => (await scope.getByRole('alert').filter({ hasText: text }).innerText()).trim(), () => true)
}

/** Whether a status line of the page reads exactly `message` (the API's, for an outcome), once it does. */
async function statusReads (page: Page, message: string): Promise<boolean> {
  const texts = await settle(() => page.getByRole('status').allTextContents(), (all) => all.map((text) => text.trim()).includes(message))
  return texts.map((text) => text.trim()).includes(message)
}

/** `5,000`, as the status line writes a count. */
const count = (n: number) => n.toLocaleString('en-US')
/** `1 book`, `5,000 books`. */
const bookCount = (n: number) => `${count(n)} ${n === 1 ? 'book' : 'books'}`

t.test('the console', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const token = await service.token()
  const api = {
    create: (book: BookCreate) => service.createBook(token, book),
    read: (id: number) => service.request('GET', `/book/${id}`, { token }),
    async list (): Promise<Book[]> {
      return ((await service.request('GET', '/books', { token })).body as { data: Book[] }).data
    }
  }

  t.test('signing in: a wrong password is refused in an alert, the right one shows the list; signing out forgets the token', async (t) => {
    const watched = await openPage(t, browser)
    const { page } = watched
    await openConsole(page, service.url)
    t.equal(await page.title(), 'Bookkeeping console', 'the page title')
    t.ok(await page.getByRole('heading', { name: 'Sign in' }).isVisible(), 'signed out, the page shows the sign-in form')

    const refused = await signIn(page, { password: 'not the password' })
    t.equal(refused.status(), 401, 'the API refused the wrong password')
    const alert = await alertWith(page, 'Invalid credentials')
    t.match(alert, 'Invalid credentials', "the alert shows the API's message")
    t.match(alert, `Request id: ${refused.headers()['x-request-id']}`, "and the answer's X-Request-Id")
    t.equal(await storedToken(page), null, 'no token is kept')

    const accepted = await signIn(page)
    t.equal(accepted.status(), 200, 'the right password is accepted')
    await page.getByRole('button', { name: 'Sign out', exact: true }).waitFor()
    t.match(await loadedStatus(page), /^[\d,]+ books?$/, 'the status line counts the books')
    t.ok(await booksTable(page).isVisible(), 'the list of books is shown')
    t.ok(await page.getByRole('button', { name: 'Add book', exact: true }).isVisible(), 'with the Add book button')
    t.equal(await page.getByRole('alert').filter({ hasText: 'Invalid credentials' }).count(), 0, 'the old alert is gone')
    const given = ((await accepted.json()) as { data: { token: string } }).data.token
    t.equal(await storedToken(page), given, `the token the API gave is kept in sessionStorage['${TOKEN_KEY}']`)
    t.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage')
    t.strictSame(await page.context().cookies(), [], 'no cookie')
    t.notOk(page.url().includes(given), 'nor in the URL')

    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    t.equal(await storedToken(page), null, 'signing out forgets the token')
    t.equal(await booksTable(page).count(), 0, 'and the list is gone')
    await page.reload()
    await page.getByRole('heading', { name: 'Sign in' }).waitFor()
    t.equal(await booksTable(page).count(), 0, 'still signed out after a reload')
    expectQuiet(t, watched)
  })

  t.test('adding a book through the form: it appears in the list without a reload, and the API has it', async (t) => {
    const watched = await openPage(t, browser)
    const { page } = watched
    await signedIn(page, service.url)
    const before = (await api.list()).length
    await page.evaluate(() => { (window as unknown as { notReloaded: boolean }).notReloaded = true })

    await page.getByRole('button', { name: 'Add book', exact: true }).click()
    const dialog = page.getByRole('dialog', { name: 'Add book' })
    await dialog.waitFor()
    await dialog.getByLabel('Title', { exact: true }).fill('Kindred')
    await dialog.getByLabel('Author', { exact: true }).fill('Octavia E. Butler')
    const year = dialog.getByLabel('Year', { exact: true })
    t.equal(await year.getAttribute('inputmode'), 'numeric', 'the year field asks for a numeric keyboard')
    await year.pressSequentially('19x')
    t.equal(await settle(() => year.getAttribute('aria-invalid'), (value) => value === 'true'), 'true',
      'a year that is not a number is marked invalid as one types')
    const message = await year.evaluate((input) => ['aria-describedby', 'aria-errormessage']
      .flatMap((name) => (input.getAttribute(name) ?? '').split(/\s+/))
      .map((id) => (id === '' ? '' : document.getElementById(id)?.textContent ?? '').trim())
      .join(' ').trim())
    t.not(message, '', `with a message tied to the field (aria-describedby or aria-errormessage): "${message}"`)
    await year.fill('1979')
    t.not(await settle(() => year.getAttribute('aria-invalid'), (value) => value !== 'true'), 'true', 'valid again once it is a year')

    const [created] = await Promise.all([
      nextResponse(page, 'POST', /^\/book$/),
      dialog.getByRole('button', { name: 'Save', exact: true }).click()
    ])
    t.equal(created.status(), 201, 'the API created it')
    const { message: createdMessage, data: { id } } = (await created.json()) as { message: string, data: Book }
    t.ok(await statusReads(page, createdMessage), `the API's message is shown as it is: ${createdMessage}`)
    await dialog.waitFor({ state: 'hidden' })
    await bookRow(page, 'Kindred').waitFor()
    t.strictSame((await shownBooks(page)).filter((book) => book[1] === 'Kindred'), [[String(id), 'Kindred', 'Octavia E. Butler', '1979']],
      'the list shows the new book')
    t.equal(await loadedStatusOf(page, bookCount(before + 1)), bookCount(before + 1), 'and counts it')
    t.ok(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded), 'without reloading the page')
    t.strictSame((await api.list()).filter((book) => book.title === 'Kindred'),
      [{ id, title: 'Kindred', author: 'Octavia E. Butler', year: 1979 }], 'the API has it, once')
    expectQuiet(t, watched)
  })

  t.test('filtering as one types, by title and by author, whatever the case; sorting by a click on a heading', async (t) => {
    const books = [
      { title: 'Austerlitz', author: 'W. G. Sebald', year: 2001 },
      { title: 'Emma', author: 'Jane Austen', year: 1815 },
      { title: 'Persuasion', author: 'Jane Austen', year: 1817 },
      { title: 'Faust', author: 'Johann Wolfgang von Goethe', year: 1808 },
      // A year of three digits: sorted as text it would come last
      { title: 'The Saga of Gaustad', author: 'Anonymous', year: 950 },
      { title: 'Dune', author: 'Frank Herbert', year: 1965 }
    ]
    for (const book of books) await api.create(book)
    const all = await api.list()
    const matching = (text: string) => all.filter(({ title, author }) => `${title}\n${author}`.toLowerCase().includes(text.toLowerCase()))
    const rows = (list: Book[]) => list.map(({ id, title, author, year }) => [String(id), title, author, String(year)])

    const watched = await openPage(t, browser)
    const { page } = watched
    await signedIn(page, service.url)
    const filter = page.getByRole('searchbox', { name: 'Filter' }).or(page.getByRole('textbox', { name: 'Filter' }))
    for (const text of ['HERBERT', 'faust', 'AuSt']) {
      await filter.fill('')
      await filter.pressSequentially(text, { delay: 20 })
      const expected = matching(text)
      t.ok(expected.length > 0, `some books match "${text}"`)
      t.strictSame(await settle(() => shownBooks(page), (shown) => shown.length === expected.length), rows(expected),
        `typing "${text}" (no Enter) leaves the books whose title or author contains it`)
      const status = `${count(expected.length)} of ${bookCount(all.length)}`
      t.equal(await loadedStatusOf(page, status), status, 'the status line says how many of all')
    }

    const filtered = matching('aust')
    const heading = (name: string) => booksTable(page).getByRole('columnheader', { name: new RegExp(`^${name}\\b`) })
    const sortBy = async (name: string) => {
      await heading(name).getByRole('button').click()
      // An arrow drawn with CSS `content` would become part of the name (`Title ▲`), and be read out
      t.equal(await heading(name).getByRole('button', { name, exact: true }).count(), 1, `the ${name} button is still named "${name}"`)
    }
    const shownTitles = async () => (await shownBooks(page)).map((book) => book[1])
    // By code point, as the service sorts (these titles are ASCII: UTF-16 order is the same)
    const byTitle = filtered.map(({ title }) => title).sort()

    await sortBy('Title')
    t.strictSame(await settle(shownTitles, (titles) => titles.join() === byTitle.join()), byTitle, 'Title: ascending')
    t.equal(await heading('Title').getAttribute('aria-sort'), 'ascending', 'the Title heading says so')
    await sortBy('Title')
    t.strictSame(await settle(shownTitles, (titles) => titles.join() === [...byTitle].reverse().join()), [...byTitle].reverse(),
      'Title again: descending')
    t.equal(await heading('Title').getAttribute('aria-sort'), 'descending', 'the Title heading says so')

    const byYear = [...filtered].sort((a, b) => a.year - b.year).map(({ year }) => String(year))
    await sortBy('Year')
    t.strictSame(await settle(async () => (await shownBooks(page)).map((book) => book[3]), (years) => years.join() === byYear.join()), byYear,
      'Year: ascending as numbers (950 first)')
    t.equal(await heading('Year').getAttribute('aria-sort'), 'ascending', 'the Year heading says so')
    t.not(await heading('Title').getAttribute('aria-sort'), 'descending', 'the Title heading no longer claims an order')

    await sortBy('Id')
    t.strictSame(await settle(() => shownBooks(page), (shown) => shown.map((book) => book[0]).join() === rows(filtered).map((book) => book[0]).join()),
      rows(filtered), 'Id: back in the order of their ids')
    t.equal(await heading('Id').getAttribute('aria-sort'), 'ascending', 'the Id heading says so')

    await filter.fill('')
    t.equal(await loadedStatusOf(page, bookCount(all.length)), bookCount(all.length), 'an empty filter shows all again')
    expectQuiet(t, watched)
  })

  t.test('editing only the year sends only the year; the rest of the book stays; Save with no change sends nothing', async (t) => {
    const book = await api.create({ title: 'The Dispossessed', author: 'Ursula K. Le Guin', year: 1974 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const puts = await recordRequests(page, 'PUT', /^\/book\//)
    await signedIn(page, service.url)
    const dialog = page.getByRole('dialog', { name: 'Edit book' })

    await bookRow(page, book.title).getByRole('button', { name: 'Edit', exact: true }).click()
    await dialog.waitFor()
    t.strictSame([
      await dialog.getByLabel('Title', { exact: true }).inputValue(),
      await dialog.getByLabel('Author', { exact: true }).inputValue(),
      await dialog.getByLabel('Year', { exact: true }).inputValue()
    ], [book.title, book.author, String(book.year)], 'the dialog holds the book as stored')
    await dialog.getByRole('button', { name: 'Save', exact: true }).click()
    await dialog.waitFor({ state: 'hidden' })
    t.strictSame(await puts(), [], 'Save with nothing changed closes the dialog and sends nothing')

    const [read] = await Promise.all([
      nextResponse(page, 'GET', /^\/book\//),
      bookRow(page, book.title).getByRole('button', { name: 'Edit', exact: true }).click()
    ])
    t.equal(read.status(), 200, 'opening Edit reads the book and its ETag')
    await dialog.waitFor()
    await dialog.getByLabel('Year', { exact: true }).fill('1975')
    const [updated] = await Promise.all([
      nextResponse(page, 'PUT', /^\/book\//),
      dialog.getByRole('button', { name: 'Save', exact: true }).click()
    ])
    t.equal(updated.status(), 200, 'the API took the change')
    const { message: updatedMessage } = (await updated.json()) as { message: string }
    t.ok(await statusReads(page, updatedMessage), `the API's message is shown as it is: ${updatedMessage}`)
    await dialog.waitFor({ state: 'hidden' })
    t.strictSame((await puts()).map(({ path, body, headers }) => ({ path, body, ifMatch: headers['if-match'] })),
      [{ path: `/book/${book.id}`, body: { year: 1975 }, ifMatch: read.headers().etag }],
      'one PUT, whose body is exactly the changed year, naming the version read (If-Match: its ETag)')
    t.strictSame(await settle(() => shownBook(page, book.id), (row) => row?.[3] === '1975'),
      [String(book.id), book.title, book.author, '1975'], 'the list shows the new year, the rest as it was')
    t.strictSame((await api.read(book.id)).body, { status: 200, message: 'Book retrieved successfully', data: { ...book, year: 1975 } },
      'the API has the new year, title and author unchanged')
    expectQuiet(t, watched)
  })

  t.test('deleting asks first: Cancel keeps the book, Delete removes it from the list and the API', async (t) => {
    const book = await api.create({ title: 'Ficciones', author: 'Jorge Luis Borges', year: 1944 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const deletes = await recordRequests(page, 'DELETE', /^\/book\//)
    await signedIn(page, service.url)
    const total = (await api.list()).length
    const dialog = deleteDialog(page)

    await bookRow(page, book.title).getByRole('button', { name: 'Delete', exact: true }).click()
    await dialog.waitFor()
    await dialog.getByRole('button', { name: 'Cancel', exact: true }).click()
    await dialog.waitFor({ state: 'hidden' })
    t.strictSame(await deletes(), [], 'Cancel sends nothing')
    t.equal(await bookRow(page, book.title).count(), 1, 'the book stays in the list')
    t.equal((await api.read(book.id)).status, 200, 'and in the API')

    const [read] = await Promise.all([
      nextResponse(page, 'GET', /^\/book\//),
      bookRow(page, book.title).getByRole('button', { name: 'Delete', exact: true }).click()
    ])
    await dialog.waitFor()
    const [deleted] = await Promise.all([
      nextResponse(page, 'DELETE', /^\/book\//),
      dialog.getByRole('button', { name: 'Delete', exact: true }).click()
    ])
    t.equal(deleted.status(), 200, 'the API deleted it')
    const { message: deletedMessage } = (await deleted.json()) as { message: string }
    t.ok(await statusReads(page, deletedMessage), `the API's message is shown as it is: ${deletedMessage}`)
    await dialog.waitFor({ state: 'hidden' })
    t.strictSame((await deletes()).map(({ path, headers }) => [path, headers['if-match']]), [[`/book/${book.id}`, read.headers().etag]],
      'one DELETE, of that book, naming the version read when the dialog opened (If-Match: its ETag)')
    t.equal(await settle(() => bookRow(page, book.title).count(), (n) => n === 0), 0, 'the book is gone from the list')
    t.equal(await loadedStatusOf(page, bookCount(total - 1)), bookCount(total - 1), 'and from the count')
    t.equal((await api.read(book.id)).status, 404, 'the API answers 404 for it')
    expectQuiet(t, watched)
  })

  t.test('a session that expires during an edit: Sign in again, and the edit is saved as typed', async (t) => {
    const book = await api.create({ title: 'Solaris', author: 'Stanisław Lem', year: 1961 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const puts = await recordRequests(page, 'PUT', /^\/book\//)
    await signedIn(page, service.url)

    await bookRow(page, book.title).getByRole('button', { name: 'Edit', exact: true }).click()
    const edit = page.getByRole('dialog', { name: 'Edit book' })
    await edit.waitFor()
    const typed = 'Solaris, a new translation'
    await edit.getByLabel('Title', { exact: true }).fill(typed)
    // The token ran out meanwhile: one signed with the service's secret, expired a minute ago
    const expired = mint({ payload: { exp: nowSeconds() - 60 } })
    await page.evaluate(([key, value]) => sessionStorage.setItem(key!, value!), [TOKEN_KEY, expired])

    const [refused] = await Promise.all([
      nextResponse(page, 'PUT', /^\/book\//),
      edit.getByRole('button', { name: 'Save', exact: true }).click()
    ])
    t.equal(refused.status(), 401, 'the API refused the expired token')
    const again = page.getByRole('dialog', { name: 'Sign in again' })
    await again.waitFor()
    t.pass('a dialog asks to sign in again')

    const [accepted, saved] = await Promise.all([
      tokenResponse(page),
      nextResponse(page, 'PUT', /^\/book\//),
      signIn(again)
    ])
    t.equal(accepted.status(), 200, 'signed in again')
    t.equal(saved.status(), 200, 'and the save was carried out')
    await again.waitFor({ state: 'hidden' })
    await edit.waitFor({ state: 'hidden' })
    const sent = await puts()
    t.strictSame(sent.map(({ body }) => body), [{ title: typed }, { title: typed }], 'the same change, sent again')
    t.strictSame(sent.map(({ headers }) => headers.authorization), [expired, ((await accepted.json()) as { data: { token: string } }).data.token],
      'first with the expired token, then with the new one, each bare')
    t.strictSame((await api.read(book.id)).body, { status: 200, message: 'Book retrieved successfully', data: { ...book, title: typed } },
      'the API has the title as typed before the session expired')
    await bookRow(page, typed).waitFor()
    t.pass('the list shows it')
    const stored = await storedToken(page)
    t.not(stored, expired, 'the expired token was replaced')
    t.equal(stored, ((await accepted.json()) as { data: { token: string } }).data.token, 'by the new one')
    expectQuiet(t, watched)
  })

  t.test('every error shows its request id: a book deleted meanwhile (404), the database gone (503, then Retry)', async (t) => {
    const book = await api.create({ title: 'Pedro Páramo', author: 'Juan Rulfo', year: 1955 })
    const edited = await api.create({ title: 'Los de abajo', author: 'Mariano Azuela', year: 1915 })
    const watched = await openPage(t, browser)
    const { page } = watched
    // Not live: a book deleted elsewhere stays shown, as it does for the moment before the feed
    // brings the change
    await notLive(page)
    await signedIn(page, service.url)
    const before = await loadedStatus(page)
    t.equal((await service.request('DELETE', `/book/${edited.id}`, { token })).status, 200, 'someone else deletes a book')
    const [gone] = await Promise.all([
      nextResponse(page, 'GET', /^\/book\//),
      bookRow(page, edited.title).getByRole('button', { name: 'Edit', exact: true }).click()
    ])
    t.equal(gone.status(), 404, 'opening Edit reads the book: the API answers 404')
    const edit = page.getByRole('dialog', { name: 'Edit book' })
    t.match(await alertWith(page, 'Book not found'), `Request id: ${gone.headers()['x-request-id']}`, 'an alert in the form says so, with the request id')
    t.equal(await settle(() => bookRow(page, edited.title).count(), (n) => n === 0), 0, 'and the list no longer shows it')
    const fewer = bookCount(Number(before.replace(/\D/g, '')) - 1)
    t.equal(await loadedStatusOf(page, fewer), fewer, 'nor counts it')
    await edit.getByRole('button', { name: 'Cancel', exact: true }).click()

    t.equal((await service.request('DELETE', `/book/${book.id}`, { token })).status, 200, 'someone else deletes the book')

    const [missing] = await Promise.all([
      nextResponse(page, 'GET', /^\/book\//),
      bookRow(page, book.title).getByRole('button', { name: 'Delete', exact: true }).click()
    ])
    t.equal(missing.status(), 404, 'opening Delete reads the book: the API answers 404')
    const notFound = await alertWith(page, 'Book not found')
    t.match(notFound, 'Book not found', "an alert shows the API's message")
    t.match(notFound, `Request id: ${missing.headers()['x-request-id']}`, 'and the request id of that answer')

    // A fresh page signing in while the database refuses connections: the list cannot load
    const second = await openPage(t, browser)
    const allow = await refuseConnections(t, dbUrl)
    await openConsole(second.page, service.url)
    const [unavailable] = await Promise.all([
      nextResponse(second.page, 'GET', /^\/books$/),
      signIn(second.page)
    ])
    t.equal(unavailable.status(), 503, 'the API answers 503')
    const alert = await alertWith(second.page, 'The service is unavailable.')
    t.match(alert, 'Service unavailable', "the alert shows the API's message")
    t.match(alert, 'The service is unavailable.', 'says what it means')
    t.match(alert, `Request id: ${unavailable.headers()['x-request-id']}`, 'and the request id')
    await allow()
    await second.page.getByRole('button', { name: 'Retry', exact: true }).click()
    t.match(await loadedStatus(second.page), /^[\d,]+ books?$/, 'Retry, once the database is back, loads the list')
    expectQuiet(t, watched)
    expectQuiet(t, second)
  })

  t.test('a create that met a 503 is sent again with the same Idempotency-Key, also from a form opened again: stored once', async (t) => {
    const watched = await openPage(t, browser)
    const { page } = watched
    const posts = await recordRequests(page, 'POST', /^\/book$/)
    await signedIn(page, service.url)
    const title = 'The Master and Margarita'
    const addBook = async () => {
      await page.getByRole('button', { name: 'Add book', exact: true }).click()
      const dialog = page.getByRole('dialog', { name: 'Add book' })
      await dialog.getByLabel('Title', { exact: true }).fill(title)
      await dialog.getByLabel('Author', { exact: true }).fill('Mikhail Bulgakov')
      await dialog.getByLabel('Year', { exact: true }).fill('1967')
      return dialog
    }

    const allow = await refuseConnections(t, dbUrl)
    let dialog = await addBook()
    const [first] = await Promise.all([nextResponse(page, 'POST', /^\/book$/), dialog.getByRole('button', { name: 'Save', exact: true }).click()])
    t.equal(first.status(), 503, 'the database is gone: 503')
    const [second] = await Promise.all([
      nextResponse(page, 'POST', /^\/book$/),
      dialog.getByRole('button', { name: 'Retry', exact: true }).click()
    ])
    t.equal(second.status(), 503, 'Retry: 503 again')
    await dialog.getByRole('button', { name: 'Cancel', exact: true }).click()

    await allow()
    dialog = await addBook()
    const [third] = await Promise.all([nextResponse(page, 'POST', /^\/book$/), dialog.getByRole('button', { name: 'Save', exact: true }).click()])
    t.equal(third.status(), 201, 'the same book added again once the database is back: 201')
    const keys = (await posts()).map(({ headers }) => headers['idempotency-key'])
    t.equal(keys.length, 3, 'three creates were sent')
    t.match(keys[0], /^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/, 'the first with a quoted random UUID as its key')
    t.strictSame(keys, [keys[0], keys[0], keys[0]], 'each with the same key')
    t.equal((await api.list()).filter((book) => book.title === title).length, 1, 'the API has the book once')

    dialog = await addBook()
    const [fourth] = await Promise.all([nextResponse(page, 'POST', /^\/book$/), dialog.getByRole('button', { name: 'Save', exact: true }).click()])
    t.equal(fourth.status(), 201, 'added once more after that success')
    t.not((await posts())[3]?.headers['idempotency-key'], keys[0], 'a new create after a success gets a new key')
    t.equal((await api.list()).filter((book) => book.title === title).length, 2, 'and is a second book')
    expectQuiet(t, watched)
  })

  t.test('a title that is HTML is shown as text: no element made of it, no script run', async (t) => {
    const title = '<img src=x onerror=alert(1)>'
    const book = await api.create({ title, author: '<b>Mallory</b>', year: 2024 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const fetched: string[] = []
    page.on('request', (request) => { fetched.push(new URL(request.url()).pathname) })
    await signedIn(page, service.url)

    t.equal(await booksTable(page).getByRole('cell', { name: title, exact: true }).count(), 1, 'a cell shows the title as that exact text')
    t.strictSame(await shownBook(page, book.id), [String(book.id), title, '<b>Mallory</b>', '2024'],
      'its row, every field as text')
    await bookRow(page, 'Mallory').getByRole('button', { name: 'Edit', exact: true }).click()
    const edit = page.getByRole('dialog', { name: 'Edit book' })
    t.equal(await edit.getByLabel('Title', { exact: true }).inputValue(), title, 'the Edit dialog holds it as it is')
    await edit.getByRole('button', { name: 'Cancel', exact: true }).click()
    await bookRow(page, 'Mallory').getByRole('button', { name: 'Delete', exact: true }).click()
    const remove = deleteDialog(page)
    await remove.waitFor()
    t.equal(await page.locator('table img, table b, dialog img, dialog b').count(), 0, 'no img or b element in the table or the dialogs')
    await remove.getByRole('button', { name: 'Cancel', exact: true }).click()
    t.notOk(fetched.some((path) => path.endsWith('/x')), 'nothing fetched the image "x"')
    expectQuiet(t, watched)
  })

  t.test('too many sign-ins: the 429 alert says when to try again, with the request id', async (t) => {
    const limited = await startService(t, { ...testEnv(await createDatabase(t)), TOKEN_RATE_LIMIT: '2' })
    const watched = await openPage(t, browser)
    const { page } = watched
    await openConsole(page, limited.url)
    for (const attempt of [1, 2]) {
      const refused = await signIn(page, { password: `wrong ${attempt}` })
      t.equal(refused.status(), 401, `attempt ${attempt}: 401`)
      t.match(await alertWith(page, `Request id: ${refused.headers()['x-request-id']}`), 'Invalid credentials',
        `attempt ${attempt}: its message and its own request id`)
    }
    const limitedAnswer = await signIn(page, { username: USERNAME, password: `${PASSWORD} (no)` })
    t.equal(limitedAnswer.status(), 429, 'the third attempt in a minute is answered 429')
    const retryAfter = Number(limitedAnswer.headers()['retry-after'])
    t.ok(retryAfter > 0, `with Retry-After: ${retryAfter}`)
    const alert = await alertWith(page, 'Too many requests')
    t.match(alert, 'Too many requests', "the alert shows the API's message")
    const shown = Number(/Try again in (\d+) s\./.exec(alert)?.[1])
    // A console may count down; it must not show more than the answer said, nor much less
    t.ok(shown <= retryAfter && shown >= retryAfter - 2, `"Try again in N s." with N from Retry-After (${retryAfter}): ${alert}`)
    t.match(alert, `Request id: ${limitedAnswer.headers()['x-request-id']}`, 'and the request id')
    expectQuiet(t, watched)
  })
})

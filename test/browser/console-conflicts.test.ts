/**
 * The web console (console, at /console/) when someone else changes a book while it is open:
 * Edit and Delete name the version they read (`If-Match` with its `ETag`), the service answers
 * 412, and the console says the book changed meanwhile, shows what was typed beside what is
 * stored now, and lets the person apply their change to the book as it is now or drop it,
 * without losing what they typed. The other person is the test, through the API. The console is
 * kept from following the feed of changes here, which would bring the change before the save
 * (console-live.test.ts): the 412 is what guards until it does.
 */
import type { Locator, Page } from 'playwright-core'
import t from 'tap'
import { testEnv } from '../helper.js'
import {
  bookRow, deleteDialog, expectQuiet, launchBrowser, notLive, openPage, recordRequests, seriousAccessibilityViolations, settle, shownBook, signedIn
} from '../helpers/browser.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import type { Book, BookCreate, BookPatch } from '../../src/schemas/book.js'
import { startService } from '../helpers/service.js'
import { needsPrograms } from '../helpers/programs.js'

/** The answer to the next request of `method` to a path matching `path`. */
function nextResponse (page: Page, method: string, path: RegExp) {
  return page.waitForResponse((response) =>
    response.request().method() === method && path.test(new URL(response.url()).pathname))
}

/** The rows of the "Changed meanwhile" table: field, yours, now stored. */
function conflictRows (dialog: Locator): Promise<string[][]> {
  return dialog.getByRole('table', { name: 'Changed meanwhile' }).getByRole('row').evaluateAll((rows) =>
    rows.slice(1).map((row) => [...row.children].map((cell) => cell.textContent?.trim() ?? '')))
}

t.test('a book changed by someone else while it is open', { skip: STORE_INDEPENDENT || needsPrograms('chromium') }, async (t) => {
  const dbUrl = await createDatabase(t)
  const [service, browser] = await Promise.all([startService(t, testEnv(dbUrl)), launchBrowser(t)])
  const token = await service.token()
  const api = {
    create: (book: BookCreate) => service.createBook(token, book),
    /** Someone else's change, without a precondition */
    async change (id: number, changes: BookPatch): Promise<string> {
      const response = await service.request('PUT', `/book/${id}`, { token, body: changes })
      if (response.status !== 200) throw new Error(`PUT /book/${id} answered ${response.status}: ${response.text}`)
      return String(response.headers.get('etag'))
    },
    read: async (id: number) => ((await service.request('GET', `/book/${id}`, { token })).body as { data: Book | null }).data
  }

  /** Opens the Edit dialog of `book`, once the console has read it (and its ETag). */
  async function openEdit (page: Page, book: Book): Promise<{ dialog: Locator, etag: string }> {
    const [read] = await Promise.all([
      nextResponse(page, 'GET', /^\/book\/\d+$/),
      bookRow(page, book.title).getByRole('button', { name: 'Edit', exact: true }).click()
    ])
    const dialog = page.getByRole('dialog', { name: 'Edit book' })
    await dialog.waitFor()
    return { dialog, etag: String(read.headers().etag) }
  }

  t.test('Edit: the save is refused (412), both values are shown, "Apply my changes" puts the typed change on the current book', async (t) => {
    const book = await api.create({ title: 'Kindred', author: 'Octavia Butler', year: 1979 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const puts = await recordRequests(page, 'PUT', /^\/book\//)
    await notLive(page)
    await signedIn(page, service.url)
    const { dialog, etag } = await openEdit(page, book)
    const typed = 'Kindred (first edition)'
    await dialog.getByLabel('Title', { exact: true }).fill(typed)
    const changedEtag = await api.change(book.id, { author: 'Octavia E. Butler', year: 1980 })

    const [refused] = await Promise.all([
      nextResponse(page, 'PUT', /^\/book\//),
      dialog.getByRole('button', { name: 'Save', exact: true }).click()
    ])
    t.equal(refused.status(), 412, 'the save named the version read when the dialog opened: 412')
    t.strictSame(await settle(() => conflictRows(dialog), (rows) => rows.length === 3), [
      ['Title', typed, 'Kindred'],
      ['Author', 'Not changed', 'Octavia E. Butler'],
      ['Year', 'Not changed', '1980']
    ], 'the dialog shows, field by field, what was typed beside what is stored now')
    t.match(await dialog.getByRole('alert').filter({ hasText: 'changed this book' }).innerText(), /Someone else changed this book/,
      'and says the book was changed meanwhile, in an alert')
    t.equal(await dialog.getByLabel('Title', { exact: true }).inputValue(), typed, 'what was typed is still in the form')
    t.equal(await dialog.getByLabel('Year', { exact: true }).inputValue(), '1980', 'a field not typed in shows the value stored now')
    t.strictSame(await api.read(book.id), { ...book, author: 'Octavia E. Butler', year: 1980 }, 'nothing was overwritten')
    t.strictSame((await seriousAccessibilityViolations(page)).map(({ id }) => id), [], 'axe-core finds nothing serious or critical in it')

    const [applied] = await Promise.all([
      nextResponse(page, 'PUT', /^\/book\//),
      dialog.getByRole('button', { name: 'Apply my changes', exact: true }).click()
    ])
    t.equal(applied.status(), 200, '"Apply my changes": saved')
    await dialog.waitFor({ state: 'hidden' })
    t.strictSame((await puts()).map(({ body, headers }) => [body, headers['if-match']]), [
      [{ title: typed }, etag],
      [{ title: typed }, changedEtag]
    ], 'two PUTs of the typed title only: with the ETag read at opening, then with the ETag of the book as changed')
    const expected = { id: book.id, title: typed, author: 'Octavia E. Butler', year: 1980 }
    t.strictSame(await api.read(book.id), expected, 'the API has the typed title on top of the other change')
    t.strictSame(await settle(() => shownBook(page, book.id), (row) => row?.[1] === typed),
      [String(book.id), typed, 'Octavia E. Butler', '1980'], 'and so does the list')
    expectQuiet(t, watched)
  })

  t.test('Edit: the same field changed by both; "Discard my changes" keeps the book as stored now and sends nothing', async (t) => {
    const book = await api.create({ title: 'Solaris', author: 'Stanisław Lem', year: 1961 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const puts = await recordRequests(page, 'PUT', /^\/book\//)
    await notLive(page)
    await signedIn(page, service.url)
    const { dialog } = await openEdit(page, book)
    await dialog.getByLabel('Year', { exact: true }).fill('1970')
    await api.change(book.id, { year: 1962 })

    const [refused] = await Promise.all([
      nextResponse(page, 'PUT', /^\/book\//),
      dialog.getByRole('button', { name: 'Save', exact: true }).click()
    ])
    t.equal(refused.status(), 412, '412')
    t.strictSame(await settle(() => conflictRows(dialog), (rows) => rows.length === 3), [
      ['Title', 'Not changed', 'Solaris'],
      ['Author', 'Not changed', 'Stanisław Lem'],
      ['Year', '1970', '1962']
    ], 'the year as typed beside the year stored now')
    t.equal(await dialog.getByLabel('Year', { exact: true }).inputValue(), '1970', 'the year typed stays in the form')

    await dialog.getByRole('button', { name: 'Discard my changes', exact: true }).click()
    await dialog.waitFor({ state: 'hidden' })
    t.equal((await puts()).length, 1, 'no PUT after the refused one')
    t.strictSame(await api.read(book.id), { ...book, year: 1962 }, 'the API keeps the other change')
    t.strictSame(await settle(() => shownBook(page, book.id), (row) => row?.[3] === '1962'),
      [String(book.id), 'Solaris', 'Stanisław Lem', '1962'], 'the list shows the book as stored now')
    t.match(await page.getByRole('status').filter({ hasText: 'discarded' }).innerText(), 'Your changes were discarded', 'and says so')
    expectQuiet(t, watched)
  })

  t.test('Delete: refused (412) when the book changed after the dialog opened; it then asks about the book as it is now', async (t) => {
    const book = await api.create({ title: 'Ficciones', author: 'Jorge Luis Borges', year: 1944 })
    const watched = await openPage(t, browser)
    const { page } = watched
    const deletes = await recordRequests(page, 'DELETE', /^\/book\//)
    await notLive(page)
    await signedIn(page, service.url)
    const [read] = await Promise.all([
      nextResponse(page, 'GET', /^\/book\/\d+$/),
      bookRow(page, book.title).getByRole('button', { name: 'Delete', exact: true }).click()
    ])
    const dialog = deleteDialog(page)
    await dialog.waitFor()
    const changedEtag = await api.change(book.id, { title: 'Ficciones (1956)' })

    const [refused] = await Promise.all([
      nextResponse(page, 'DELETE', /^\/book\//),
      dialog.getByRole('button', { name: 'Delete', exact: true }).click()
    ])
    t.equal(refused.status(), 412, 'the delete named the version read when the dialog opened: 412')
    t.match(await settle(() => dialog.innerText(), (text) => text.includes('Ficciones (1956)')), 'Delete “Ficciones (1956)” by Jorge Luis Borges (1944)?',
      'the dialog asks about the book as it is now')
    t.match(await dialog.getByRole('alert').innerText(), 'This book was changed after you asked to delete it', 'and says why')
    t.not(await api.read(book.id), null, 'the book is still there')

    const [deleted] = await Promise.all([
      nextResponse(page, 'DELETE', /^\/book\//),
      dialog.getByRole('button', { name: 'Delete', exact: true }).click()
    ])
    t.equal(deleted.status(), 200, 'Delete again: deleted')
    t.strictSame((await deletes()).map(({ headers }) => headers['if-match']), [read.headers().etag, changedEtag],
      'the first DELETE with the ETag read at opening, the second with the ETag of the book as changed')
    t.equal(await api.read(book.id), null, 'the API has it no more')
    t.equal(await settle(() => bookRow(page, 'Ficciones').count(), (n) => n === 0), 0, 'nor the list')
    expectQuiet(t, watched)
  })
})

/**
 * The console page: sign in, the list, the book form, deleting, and signing in again when the
 * token expires. Everything goes through the public API (api.ts); the list streams in
 * (listing-parser.ts), is held and narrowed in book-list.ts and drawn by book-table.ts.
 *
 * Timings are left as `performance` measures (`first-rows`, `list-loaded`, `filter`, `sort`),
 * which the browser benchmark reads (tools/bench/console.cjs).
 */
import './style.css'
import {
  ApiFailure, SignedOut, createBook, deleteBook, listBooks, newIdempotencyKey, onReauthenticate, session,
  signIn, signOut, updateBook
} from './api.js'
import { BookList, type Book, type SortKey } from './book-list.js'
import { parseYear, textProblem, yearProblem } from './book-rules.js'
import { BookTable, type RowAction } from './book-table.js'
import { ListingParser } from './listing-parser.js'
import type { Column } from './column-order.js'

function element<T extends HTMLElement> (id: string): T {
  return document.getElementById(id) as T
}

const signedOutView = element('signed-out')
const signedInView = element('signed-in')
const signOutButton = element<HTMLButtonElement>('sign-out')
const signInForm = element<HTMLFormElement>('sign-in')
const notice = element('notice')
const outcome = element('outcome')
const count = element('count')
const filterInput = element<HTMLInputElement>('filter')
const bookDialog = element<HTMLDialogElement>('book-dialog')
const bookForm = element<HTMLFormElement>('book-form')
const deleteDialog = element<HTMLDialogElement>('delete-dialog')
const deleteForm = element<HTMLFormElement>('delete-form')
const againDialog = element<HTMLDialogElement>('sign-in-again-dialog')
const signInTitle = element('sign-in-title')
const headers = [...document.querySelectorAll<HTMLTableCellElement>('th[data-key]')]

const books = new BookList()
const table = new BookTable(element('book-list'), element<HTMLTableElement>('books'), onRowAction)
const numbers = new Intl.NumberFormat()
/** Up to this many books a sorted view is sorted again while the list streams in (tenths of a second). */
const RESORT_WHILE_LOADING = 100_000
let loading: AbortController | null = null
let loaded = false

// ---- What went wrong, in words a person can act on

/**
 * Shows a failure in `container` (a role="alert" element): the API's message as it is, when to
 * try again after a 429, that the service is unavailable after a 503, and the request id that
 * matches the answer with the service's log. `retry` adds a Retry button where trying again can
 * help (a 503, no answer).
 */
function showProblem (container: HTMLElement, error: unknown, retry?: () => void): void {
  const failure = error instanceof ApiFailure ? error : new ApiFailure(0, 'Something went wrong in the page', null, null)
  if (!(error instanceof ApiFailure)) console.error(error)
  const lines = [failure.message.endsWith('.') ? failure.message : `${failure.message}.`]
  if (failure.status === 429) lines.push(`Try again in ${failure.retryAfter ?? 60} s.`)
  if (failure.status === 503) {
    lines.push(`The service is unavailable${failure.retryAfter === null ? '' : `; try again in ${failure.retryAfter} s`}.`)
  }
  if (failure.requestId !== null) lines.push(`Request id: ${failure.requestId}`)
  const parts: Node[] = [document.createTextNode(lines.join(' '))]
  if (retry !== undefined && (failure.status === 503 || failure.status === 0)) {
    const button = document.createElement('button')
    button.type = 'button'
    button.textContent = 'Retry'
    button.addEventListener('click', () => { clearProblem(container); retry() })
    parts.push(document.createTextNode(' '), button)
  }
  container.replaceChildren(...parts)
}

function clearProblem (container: HTMLElement): void {
  container.replaceChildren()
}

function problemOf (form: HTMLFormElement): HTMLElement {
  return form.querySelector<HTMLElement>('.problem')!
}

/** Runs `work` with the form's buttons disabled, so a double click sends nothing twice. */
async function busy<T> (form: HTMLFormElement, work: () => Promise<T>): Promise<T> {
  const buttons = [...form.querySelectorAll('button')]
  for (const button of buttons) button.disabled = true
  form.setAttribute('aria-busy', 'true')
  try {
    return await work()
  } finally {
    for (const button of buttons) button.disabled = false
    form.removeAttribute('aria-busy')
  }
}

// ---- Signing in and out

function fieldsOf (form: HTMLFormElement): { username: string, password: string } {
  const data = new FormData(form)
  return { username: String(data.get('username') ?? ''), password: String(data.get('password') ?? '') }
}

/**
 * Set while the token is being renewed: the sign-in form is then in the "Sign in again" dialog,
 * over whatever was open, and signing in carries on with the call that was refused.
 */
let renewing: { resolve: () => void, reject: (error: Error) => void } | null = null

signInForm.addEventListener('submit', (event) => {
  event.preventDefault()
  const { username, password } = fieldsOf(signInForm)
  clearProblem(problemOf(signInForm))
  busy(signInForm, () => signIn(username, password)).then(() => {
    signInForm.reset()
    if (renewing === null) {
      showSignedIn()
      return
    }
    const { resolve } = renewing
    endRenewal()
    resolve()
  }, (error) => showProblem(problemOf(signInForm), error, () => signInForm.requestSubmit()))
})

signOutButton.addEventListener('click', () => leave())

/** Forgets the token and everything shown; back to the sign-in form. */
function leave (): void {
  signOut()
  if (renewing !== null) {
    const { reject } = renewing
    endRenewal()
    reject(new SignedOut())
  }
  loading?.abort()
  loading = null
  loaded = false
  books.clear()
  table.show(books.view)
  for (const dialog of [bookDialog, deleteDialog]) dialog.close()
  clearProblem(notice)
  outcome.textContent = ''
  filterInput.value = ''
  signedInView.hidden = true
  signOutButton.hidden = true
  signedOutView.hidden = false
  element<HTMLInputElement>('sign-in-username').focus()
}

function showSignedIn (): void {
  signedOutView.hidden = true
  signedInView.hidden = false
  signOutButton.hidden = false
  filterInput.focus()
  load().catch(console.error)
}

/** The token was refused (it expired): ask to sign in again, on top of whatever is open. */
onReauthenticate(() => new Promise<void>((resolve, reject) => {
  renewing = { resolve, reject }
  signInForm.reset()
  clearProblem(problemOf(signInForm))
  againDialog.insertBefore(signInForm, element('give-up').parentElement)
  againDialog.showModal()
  element<HTMLInputElement>('sign-in-username').focus()
}))

/** The sign-in form back in its place, the dialog closed. */
function endRenewal (): void {
  renewing = null
  signInTitle.after(signInForm)
  againDialog.close()
}

element('give-up').addEventListener('click', () => leave())
// Escape would close the prompt and leave the interrupted call waiting: it stays open instead
againDialog.addEventListener('cancel', (event) => event.preventDefault())

// ---- The list

/** Reads every book, showing them as they arrive. */
async function load (): Promise<void> {
  loading?.abort()
  const controller = new AbortController()
  loading = controller
  loaded = false
  // In id order, as the service lists them: a sort by another column waits for the whole list
  books.clear()
  showOrder()
  table.show(books.view)
  clearProblem(notice)
  showCount()
  performance.clearMarks('list-start')
  performance.mark('list-start')
  let firstRows = true
  let lastSort = 0
  try {
    const parser = new ListingParser<Book>()
    const decoder = new TextDecoder()
    const reader = (await listBooks(controller.signal)).getReader()
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      const arrived = parser.push(decoder.decode(value, { stream: true }))
      if (arrived.length === 0) continue
      books.append(arrived)
      // Sorted meanwhile by something else than id, the view is put in order again at most once
      // a second while that is quick; a longer list is sorted once, when it is whole
      if (books.unsorted && books.all.length <= RESORT_WHILE_LOADING && performance.now() - lastSort > 1000) {
        books.refresh()
        lastSort = performance.now()
      }
      table.show(books.view)
      showCount()
      if (firstRows) {
        firstRows = false
        table.draw()
        performance.measure('first-rows', 'list-start')
      }
    }
    parser.end()
    loaded = true
    if (books.unsorted) await inOrderOf(books.order.key)
    books.refresh()
    table.show(books.view)
    showCount()
    performance.measure('list-loaded', 'list-start')
  } catch (error) {
    if (controller.signal.aborted || error instanceof SignedOut) return
    showCount()
    showProblem(notice, error instanceof ApiFailure ? error : new ApiFailure(0, 'The list could not be read to its end', null, null), load)
  } finally {
    if (loading === controller) loading = null
  }
}

function showCount (): void {
  const all = numbers.format(books.all.length)
  const unit = books.all.length === 1 ? 'book' : 'books'
  if (!loaded) count.textContent = `Loading… ${all} ${unit}`
  else if (books.filter === '') count.textContent = `${all} ${unit}`
  else count.textContent = `${numbers.format(books.view.length)} of ${all} ${unit}`
}

filterInput.addEventListener('input', () => {
  performance.mark('filter-start')
  books.setFilter(filterInput.value)
  table.scroller.scrollTop = 0
  table.show(books.view)
  table.draw()
  showCount()
  performance.measure('filter', 'filter-start')
})

/** The heading of the column the list is sorted by says so, and which way. */
function showOrder (): void {
  for (const header of headers) {
    if (header.dataset.key === books.order.key) header.setAttribute('aria-sort', books.order.descending ? 'descending' : 'ascending')
    else header.removeAttribute('aria-sort')
  }
}

/** A long list is sorted in a worker, from this many books on; a short one at once. */
const SORT_IN_WORKER = 20_000

/**
 * Has the books put in order of `key` in a worker (sort-worker.ts), so the page stays usable
 * meanwhile, unless they are few or in that order already. Books that change meanwhile make it
 * sort again; without workers the list sorts itself (book-list.ts).
 */
async function inOrderOf (key: SortKey): Promise<void> {
  while (!books.hasOrder(key) && books.all.length >= SORT_IN_WORKER && typeof Worker === 'function') {
    const version = books.version
    const column: Column = key === 'title' || key === 'author'
      ? books.all.map((book) => book[key])
      : Float64Array.from(books.all, (book) => book[key])
    const worker = new Worker(new URL('./sort-worker.ts', import.meta.url), { type: 'module' })
    try {
      const indices = await new Promise<Uint32Array>((resolve, reject) => {
        worker.onmessage = ({ data }: MessageEvent<Uint32Array>) => resolve(data)
        worker.onerror = (event) => reject(new Error(event.message))
        worker.postMessage(column, column instanceof Float64Array ? [column.buffer] : [])
      })
      books.setOrder(key, version, indices)
    } catch (error) {
      console.error(error)
      return
    } finally {
      worker.terminate()
    }
  }
}

let sorting: Promise<void> = Promise.resolve()

for (const header of headers) {
  header.querySelector('button')!.addEventListener('click', () => {
    // One sort after the other, in the order of the clicks
    sorting = sorting.then(() => sortBy(header))
  })
}

async function sortBy (header: HTMLTableCellElement): Promise<void> {
  const key = header.dataset.key as SortKey
  performance.mark('sort-start')
  if (!books.hasOrder(key)) {
    // The first sort by a column of a long list takes a while: say so
    count.textContent = 'Sorting…'
    await inOrderOf(key)
  }
  books.sortBy(key)
  showOrder()
  table.scroller.scrollTop = 0
  table.show(books.view)
  table.draw()
  showCount()
  performance.measure('sort', 'sort-start')
}

/** After a change: the list without reloading, the API's message, the book in sight. */
function changed (message: string, book: Book | null): void {
  table.show(books.view)
  table.draw()
  showCount()
  outcome.textContent = message
  if (book !== null) {
    const index = books.view.indexOf(book)
    if (index !== -1) table.reveal(index)
  }
}

/** A book someone else deleted meanwhile (the API answered 404): the list drops it too. */
function goneIf404 (error: unknown, book: Book): void {
  if (!(error instanceof ApiFailure) || error.status !== 404) return
  books.remove(book.id)
  table.show(books.view)
  showCount()
}

// ---- Adding and editing

const fields = {
  title: element<HTMLInputElement>('book-title'),
  author: element<HTMLInputElement>('book-author'),
  year: element<HTMLInputElement>('book-year')
}
type Field = keyof typeof fields
const checks: Record<Field, (value: string) => string | null> = { title: textProblem, author: textProblem, year: yearProblem }

/** The book being edited; null while adding. */
let editing: Book | null = null
/**
 * The key of a create that got no success, kept for the same book until one comes: a Retry,
 * or the same book added again after the form was closed, is then stored once even if the
 * first try was stored and only its answer was lost.
 */
let pendingCreate: { body: string, key: string } | null = null

function check (field: Field): boolean {
  const problem = checks[field](fields[field].value)
  fields[field].setAttribute('aria-invalid', String(problem !== null))
  element(`book-${field}-problem`).textContent = problem ?? ''
  return problem === null
}

for (const field of Object.keys(fields) as Field[]) {
  fields[field].addEventListener('input', () => check(field))
}

function openBookForm (book: Book | null): void {
  editing = book
  element('book-dialog-title').textContent = book === null ? 'Add book' : 'Edit book'
  fields.title.value = book?.title ?? ''
  fields.author.value = book?.author ?? ''
  fields.year.value = book === null ? '' : String(book.year)
  for (const field of Object.keys(fields) as Field[]) {
    fields[field].removeAttribute('aria-invalid')
    element(`book-${field}-problem`).textContent = ''
  }
  clearProblem(problemOf(bookForm))
  bookDialog.showModal()
  fields.title.focus()
}

element('add').addEventListener('click', () => openBookForm(null))
bookDialog.addEventListener('close', () => {
  if (editing !== null) table.focusRow(editing.id, 'edit')
})

bookForm.addEventListener('submit', (event) => {
  event.preventDefault()
  const invalid = (Object.keys(fields) as Field[]).filter((field) => !check(field))
  if (invalid.length > 0) {
    fields[invalid[0]!].focus()
    return
  }
  const values = { title: fields.title.value, author: fields.author.value, year: parseYear(fields.year.value) }
  clearProblem(problemOf(bookForm))
  const book = editing
  busy(bookForm, async () => {
    if (book === null) {
      const body = JSON.stringify(values)
      if (pendingCreate?.body !== body) pendingCreate = { body, key: newIdempotencyKey() }
      const { message, data: created } = await createBook(values, pendingCreate.key)
      pendingCreate = null
      books.upsert(created)
      return { message, book: created }
    }
    // Only what changed: a field someone else changed meanwhile keeps their value
    const changes = Object.fromEntries(Object.entries(values).filter(([name, value]) => book[name as Field] !== value))
    if (Object.keys(changes).length === 0) return null
    const { message, data: updated } = await updateBook(book.id, changes)
    books.upsert(updated)
    return { message, book: updated }
  }).then((done) => {
    bookDialog.close()
    if (done !== null) changed(done.message, done.book)
  }, (error) => {
    if (error instanceof SignedOut) return
    if (book !== null) goneIf404(error, book)
    showProblem(problemOf(bookForm), error, () => bookForm.requestSubmit())
  })
})

// ---- Deleting

let deleting: Book | null = null

function openDeleteDialog (book: Book): void {
  deleting = book
  element('delete-dialog-question').textContent = `Delete “${book.title}” by ${book.author} (${book.year})?`
  clearProblem(problemOf(deleteForm))
  deleteDialog.showModal()
  // The safe choice first
  deleteForm.querySelector<HTMLButtonElement>('[data-close]')!.focus()
}

deleteForm.addEventListener('submit', (event) => {
  event.preventDefault()
  const book = deleting
  if (book === null) return
  clearProblem(problemOf(deleteForm))
  busy(deleteForm, () => deleteBook(book.id)).then(({ message }) => {
    deleting = null
    deleteDialog.close()
    books.remove(book.id)
    changed(message, null)
  }, (error) => {
    if (error instanceof SignedOut) return
    goneIf404(error, book)
    showProblem(problemOf(deleteForm), error, () => deleteForm.requestSubmit())
  })
})
deleteDialog.addEventListener('close', () => {
  if (deleting !== null) table.focusRow(deleting.id, 'delete')
  deleting = null
})

function onRowAction (action: RowAction, book: Book): void {
  if (action === 'edit') openBookForm(book)
  else openDeleteDialog(book)
}

for (const close of document.querySelectorAll<HTMLButtonElement>('[data-close]')) {
  close.addEventListener('click', () => close.closest('dialog')!.close())
}

// A reload keeps the tab's session: its token is still in sessionStorage
if (session.token !== null) showSignedIn()

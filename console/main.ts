/**
 * The console page: signing in and out, signing in again when the token expires, and the parts
 * wired together: the list (list-view.ts), the book form (book-form.ts), the delete
 * confirmation (delete-dialog.ts), Import books (import-dialog.ts), Export CSV (list-export.ts)
 * and the feed of changes (change-feed.ts), followed while signed in, with its state in the
 * header. Everything goes through the public API (api.ts, bulk-api.ts).
 */
import './style.css'
import { SignedOut, onReauthenticate, session, signIn, signOut } from './api.js'
import type { Book } from './book-list.js'
import { bookForm } from './book-form.js'
import { ChangeFeed, type FeedState } from './change-feed.js'
import { deleteDialog } from './delete-dialog.js'
import { element } from './dom.js'
import { busy, clearProblem, problemOf, showProblem } from './feedback.js'
import { importDialog } from './import-dialog.js'
import { exportList, save } from './list-export.js'
import { ListView } from './list-view.js'

const signedOutView = element('signed-out')
const signedInView = element('signed-in')
const signOutButton = element<HTMLButtonElement>('sign-out')
const signInForm = element<HTMLFormElement>('sign-in')
const notice = element('notice')
const outcome = element('outcome')
const filterInput = element<HTMLInputElement>('filter')
const searchInput = element<HTMLInputElement>('search')
const againDialog = element<HTMLDialogElement>('sign-in-again-dialog')
const signInTitle = element('sign-in-title')
const liveness = element('liveness')

const list = new ListView({
  scroller: element('book-list'),
  table: element<HTMLTableElement>('books'),
  count: element('count'),
  filter: filterInput,
  search: searchInput,
  notice
}, (action, book) => {
  if (action === 'edit') openBookForm(book)
  else openDeleteDialog(book)
})

/** After a change: the message (the API's, as it wrote it), the book in sight. */
function changed (message: string, book: Book | null): void {
  outcome.textContent = message
  if (book !== null) list.reveal(book)
}

const { open: openBookForm, changed: bookChanged } = bookForm({
  upsert: (book) => list.upsert(book),
  remove: (id) => list.remove(id),
  focusEdit: (id) => list.focusRow(id, 'edit'),
  done: changed
})

const openDeleteDialog = deleteDialog({
  upsert: (book) => list.upsert(book),
  remove: (id) => list.remove(id),
  focusDelete: (id) => list.focusRow(id, 'delete'),
  done: (message) => changed(message, null)
})

const LIVENESS: Record<FeedState, string> = { connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…' }

const feed = new ChangeFeed({
  change: (change) => {
    list.apply(change)
    bookChanged(change)
  },
  reload: () => { list.reload().catch(console.error) },
  state: (state) => {
    liveness.textContent = LIVENESS[state]
    liveness.dataset.state = state
  }
})

element('add').addEventListener('click', () => openBookForm(null))

// The books imported come through the feed, as every change does
const openImportDialog = importDialog({ imported: (message, count) => changed(`${message}: ${count.toLocaleString()} ${count === 1 ? 'book' : 'books'}.`, null) })
element('import').addEventListener('click', () => openImportDialog())

const exportButton = element<HTMLButtonElement>('export')
exportButton.addEventListener('click', () => {
  const { order, filter, search } = list.shown
  clearProblem(notice)
  outcome.textContent = 'Exporting…'
  exportButton.disabled = true
  exportList(order, filter, search).then((file) => {
    save(file)
    outcome.textContent = 'Exported: books.csv.'
  }, (error) => {
    outcome.textContent = ''
    if (!(error instanceof SignedOut)) showProblem(notice, error, () => exportButton.click())
  }).finally(() => { exportButton.disabled = false })
})

for (const close of document.querySelectorAll<HTMLButtonElement>('[data-close]')) {
  close.addEventListener('click', () => close.closest('dialog')!.close())
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
  feed.stop()
  list.clear()
  for (const dialog of document.querySelectorAll('dialog')) dialog.close()
  clearProblem(notice)
  outcome.textContent = ''
  filterInput.value = ''
  searchInput.value = ''
  signedInView.hidden = true
  signOutButton.hidden = true
  liveness.hidden = true
  signedOutView.hidden = false
  element<HTMLInputElement>('sign-in-username').focus()
}

function showSignedIn (): void {
  signedOutView.hidden = true
  signedInView.hidden = false
  signOutButton.hidden = false
  liveness.hidden = false
  searchInput.focus()
  // The list is read once the feed has answered (change-feed.ts)
  feed.start()
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

// A reload keeps the tab's session: its token is still in sessionStorage
if (session.token !== null) showSignedIn()

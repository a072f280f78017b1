/**
 * The Add book and Edit book dialog: the API's rules checked as one types (book-rules.ts), a
 * create stored once whatever happens to its answer, and an edit that never overwrites unseen a
 * change someone else saved meanwhile.
 *
 * Opening Edit reads the book (`GET /book/<id>`): the fields not typed in yet take its current
 * values, and its `ETag` goes with the save (`If-Match`). Only the fields the person changed
 * are sent. When the book changed after it was read (412), the dialog reads it again and shows,
 * field by field, what the person typed beside what is stored now; what they typed stays in the
 * form. "Apply my changes" (the Save button, renamed) sends the fields they changed onto the
 * book as it is now, with its new `ETag`; "Discard my changes" keeps the book as it is now.
 *
 * A change made elsewhere while the dialog is open comes through the feed of changes
 * (change-feed.ts): the dialog says so with the values stored now, and reads the book again as
 * it does at opening.
 */
import { SignedOut, createBook, newIdempotencyKey, readBook, updateBook, type Answer, type Versioned } from './api.js'
import type { Book } from './book-list.js'
import type { Change } from './change-feed.js'
import { parseYear, textProblem, yearProblem } from './book-rules.js'
import { element } from './dom.js'
import { busy, changedMeanwhile, clearProblem, gone, problemOf, showProblem } from './feedback.js'

/** What the dialog does to the list, and what it says when done. */
export interface BookFormHost {
  upsert: (book: Book) => void
  remove: (id: number) => void
  focusEdit: (id: number) => void
  /** A change was saved (the API's message) or dropped; the book as it is now */
  done: (message: string, book: Book) => void
}

type Field = 'title' | 'author' | 'year'
type Values = Omit<Book, 'id'>
const FIELDS: Field[] = ['title', 'author', 'year']
const LABELS: Record<Field, string> = { title: 'Title', author: 'Author', year: 'Year' }
const CHECKS: Record<Field, (value: string) => string | null> = { title: textProblem, author: textProblem, year: yearProblem }

const dialog = element<HTMLDialogElement>('book-dialog')
const form = element<HTMLFormElement>('book-form')
const saveButton = element<HTMLButtonElement>('book-save')
const discardButton = element<HTMLButtonElement>('conflict-discard')
const conflict = element('conflict')
const conflictWhy = element('conflict-why')
const conflictRows = element<HTMLTableElement>('conflict-values').tBodies[0]!
const changedElsewhereNotice = element('changed-elsewhere')
const inputs: Record<Field, HTMLInputElement> = {
  title: element('book-title'),
  author: element('book-author'),
  year: element('book-year')
}

/** An edit under way: what it started from, and the book as last read. */
class Edit {
  /** What each field's typing started from: the row's values, then the book's as read where not typed in yet */
  from: Values
  /** The book as last read, with the ETag the next save names */
  read: Promise<Versioned>
  /** Whether the dialog shows that the book changed meanwhile */
  conflicted = false
  /** The book as the last read found it, once one has */
  stored: Book | null = null

  constructor (readonly id: number, shown: Book, read: (edit: Edit) => Promise<Versioned>) {
    this.from = { title: shown.title, author: shown.author, year: shown.year }
    this.read = read(this)
  }
}

/** The book being edited; null while adding. */
let edit: Edit | null = null
/**
 * The key of a create that got no success, kept for the same book until one comes: a Retry,
 * or the same book added again after the form was closed, is then stored once even if the
 * first try was stored and only its answer was lost.
 */
let pendingCreate: { body: string, key: string } | null = null

export interface BookForm {
  /** Opens the dialog, for a new book (null) or to edit one */
  open: (book: Book | null) => void
  /** A change from the feed, made here or elsewhere */
  changed: (change: Change) => void
}

export function bookForm (host: BookFormHost): BookForm {
  for (const field of FIELDS) {
    inputs[field].addEventListener('input', () => {
      check(field)
      const session = edit
      // What the person types while the conflict is shown is what "Yours" shows
      if (session?.conflicted === true) session.read.then(({ book }) => showConflict(session, book), () => {})
    })
  }

  /**
   * Reads the book being edited: the fields not typed in take its values, and when someone
   * else changed a field the person changed too, the dialog says so.
   */
  async function readCurrent (session: Edit): Promise<Versioned> {
    const version = await readBook(session.id)
    if (edit === session) {
      session.stored = version.book
      host.upsert(version.book)
      if (rebase(session, version.book)) showConflict(session, version.book)
    }
    return version
  }

  function open (book: Book | null): void {
    element('book-dialog-title').textContent = book === null ? 'Add book' : 'Edit book'
    inputs.title.value = book?.title ?? ''
    inputs.author.value = book?.author ?? ''
    inputs.year.value = book === null ? '' : String(book.year)
    for (const field of FIELDS) {
      inputs[field].removeAttribute('aria-invalid')
      element(`book-${field}-problem`).textContent = ''
    }
    hideConflict()
    clearProblem(problemOf(form))
    changedElsewhereNotice.textContent = ''
    edit = book === null ? null : new Edit(book.id, book, readCurrent)
    const session = edit
    session?.read.catch((error) => {
      if (edit !== session || error instanceof SignedOut) return
      if (gone(error)) host.remove(session.id)
      // No Retry here: Save reads the book again first
      showProblem(problemOf(form), error)
    })
    dialog.showModal()
    inputs.title.focus()
  }

  /** Saves the changes typed onto the book as last read; 'conflict' when it changed meanwhile. */
  async function save (session: Edit, values: Values): Promise<Answer<Book> | 'conflict' | null> {
    const applying = session.conflicted
    // A read that failed when the dialog opened is tried again
    session.read = session.read.catch(() => readCurrent(session))
    const version = await session.read
    // The read just now found a change of someone else's where the person typed: they choose first
    if (session.conflicted && !applying) return 'conflict'
    const changes = Object.fromEntries(FIELDS.filter((field) => values[field] !== session.from[field]).map((field) => [field, values[field]]))
    if (Object.keys(changes).length === 0) return null
    try {
      const saved = await updateBook(session.id, changes, version.etag)
      host.upsert(saved.data)
      return saved
    } catch (error) {
      if (!changedMeanwhile(error)) throw error
      session.read = readCurrent(session)
      showConflict(session, (await session.read).book)
      return 'conflict'
    }
  }

  async function create (values: Values): Promise<Answer<Book>> {
    const body = JSON.stringify(values)
    if (pendingCreate?.body !== body) pendingCreate = { body, key: newIdempotencyKey() }
    const created = await createBook(values, pendingCreate.key)
    pendingCreate = null
    host.upsert(created.data)
    return created
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault()
    const invalid = FIELDS.filter((field) => !check(field))
    if (invalid.length > 0) {
      inputs[invalid[0]!].focus()
      return
    }
    const values = { title: inputs.title.value, author: inputs.author.value, year: parseYear(inputs.year.value) }
    clearProblem(problemOf(form))
    const session = edit
    busy(form, () => session === null ? create(values) : save(session, values)).then((saved) => {
      if (saved === 'conflict') return
      dialog.close()
      if (saved !== null) host.done(saved.message, saved.data)
      else if (session?.conflicted === true) session.read.then(({ book }) => host.done(NOTHING_TO_APPLY, book), () => {})
    }, (error) => {
      if (error instanceof SignedOut) return
      if (session !== null && gone(error)) host.remove(session.id)
      showProblem(problemOf(form), error, () => form.requestSubmit())
    })
  })

  discardButton.addEventListener('click', () => {
    const session = edit
    if (session === null) return
    session.read.then(({ book }) => {
      dialog.close()
      host.done(DISCARDED, book)
    }, () => {})
  })

  dialog.addEventListener('close', () => {
    if (edit !== null) host.focusEdit(edit.id)
  })

  /**
   * The book being edited was changed or deleted: the dialog says so, with the values stored
   * now, and the fields not typed in take them (read again with their `ETag`, as at opening).
   * Not while a save is under way, whose own change this may be, nor for a version already read.
   */
  function changed (change: Change): void {
    const session = edit
    const id = change.kind === 'deleted' ? change.id : change.book.id
    if (session === null || session.id !== id || !dialog.open || form.getAttribute('aria-busy') === 'true') return
    if (change.kind === 'deleted') {
      changedElsewhereNotice.textContent = 'Someone else deleted this book just now.'
      return
    }
    const { book } = change
    if (session.stored !== null && FIELDS.every((field) => session.stored![field] === book[field])) return
    changedElsewhereNotice.textContent = 'Someone else changed this book just now. Stored now: ' +
      FIELDS.map((field) => `${LABELS[field]} “${book[field]}”`).join(', ') + '.'
    // A failed read is tried again by Save
    session.read = readCurrent(session)
    session.read.catch(() => {})
  }

  return { open, changed }
}

const DISCARDED = 'Your changes were discarded: the book is as stored now.'
const NOTHING_TO_APPLY = 'Nothing to apply: the book is as stored now.'

function check (field: Field): boolean {
  const problem = CHECKS[field](inputs[field].value)
  inputs[field].setAttribute('aria-invalid', String(problem !== null))
  element(`book-${field}-problem`).textContent = problem ?? ''
  return problem === null
}

/**
 * The fields not typed in take the values of `book`; true when someone else changed a field the
 * person changed too (what they typed stays).
 */
function rebase (session: Edit, book: Book): boolean {
  let clash = false
  for (const field of FIELDS) {
    if (inputs[field].value === String(session.from[field])) {
      inputs[field].value = String(book[field])
      session.from = { ...session.from, [field]: book[field] }
      check(field)
    } else if (session.from[field] !== book[field]) {
      clash = true
    }
  }
  return clash
}

/**
 * Says that the book changed meanwhile: each field as typed (if changed) beside its value stored
 * now; the Save button becomes "Apply my changes", and "Discard my changes" appears.
 */
function showConflict (session: Edit, current: Book): void {
  session.conflicted = true
  const { from } = session
  conflictRows.replaceChildren(...FIELDS.map((field) => {
    const row = document.createElement('tr')
    const typed = inputs[field].value
    const changed = typed !== String(from[field])
    row.appendChild(document.createElement('th')).textContent = LABELS[field]
    row.lastElementChild!.setAttribute('scope', 'row')
    row.insertCell().textContent = changed ? typed : 'Not changed'
    row.insertCell().textContent = String(current[field])
    if (changed && typed !== String(current[field])) row.className = 'differs'
    return row
  }))
  if (conflict.hidden) {
    conflictWhy.textContent = 'Someone else changed this book while you were editing it. What you typed is kept: ' +
      'apply your changes to the book as it is now, or discard them.'
  }
  conflict.hidden = false
  discardButton.hidden = false
  saveButton.textContent = 'Apply my changes'
}

function hideConflict (): void {
  conflict.hidden = true
  conflictWhy.textContent = ''
  discardButton.hidden = true
  saveButton.textContent = 'Save'
}

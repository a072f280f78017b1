/**
 * The Delete book confirmation: Cancel focused first, and a delete that names the version of the
 * book the person was asked about (`If-Match` with the `ETag` read when the dialog opened). When
 * the book changed meanwhile (412), the dialog reads it again, asks about it as it is now, and a
 * second Delete deletes that version.
 */
import { SignedOut, deleteBook, readBook, type Versioned } from './api.js'
import type { Book } from './book-list.js'
import { element } from './dom.js'
import { busy, changedMeanwhile, clearProblem, gone, problemOf, showProblem } from './feedback.js'

/** What the dialog does to the list, and what it says when done. */
export interface DeleteDialogHost {
  upsert: (book: Book) => void
  remove: (id: number) => void
  focusDelete: (id: number) => void
  /** The book was deleted: the API's message */
  done: (message: string) => void
}

const dialog = element<HTMLDialogElement>('delete-dialog')
const form = element<HTMLFormElement>('delete-form')
const question = element('delete-dialog-question')

/** The book asked about, and the version of it the delete names once read. */
let deleting: { id: number, read: Promise<Versioned> } | null = null

/** Sets the dialog up; returns how to open it for a book. */
export function deleteDialog (host: DeleteDialogHost): (book: Book) => void {
  /** Reads the book: the question is about it as it is now. */
  async function readCurrent (id: number): Promise<Versioned> {
    const version = await readBook(id)
    if (deleting?.id === id) {
      host.upsert(version.book)
      ask(version.book)
    }
    return version
  }

  function open (book: Book): void {
    const session = { id: book.id, read: readCurrent(book.id) }
    deleting = session
    session.read.catch((error) => {
      if (deleting !== session || error instanceof SignedOut) return
      if (gone(error)) host.remove(session.id)
      showProblem(problemOf(form), error)
    })
    ask(book)
    clearProblem(problemOf(form))
    dialog.showModal()
    // The safe choice first
    form.querySelector<HTMLButtonElement>('[data-close]')!.focus()
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault()
    const session = deleting
    if (session === null) return
    clearProblem(problemOf(form))
    busy(form, async () => {
      // A read that failed when the dialog opened is tried again
      session.read = session.read.catch(() => readCurrent(session.id))
      const { etag } = await session.read
      try {
        return await deleteBook(session.id, etag)
      } catch (error) {
        if (!changedMeanwhile(error)) throw error
        session.read = readCurrent(session.id)
        await session.read
        return null
      }
    }).then((deleted) => {
      if (deleted === null) {
        problemOf(form).textContent = 'This book was changed after you asked to delete it. It is shown above as it is now: ' +
          'delete it as it is, or cancel.'
        return
      }
      deleting = null
      dialog.close()
      host.remove(session.id)
      host.done(deleted.message)
    }, (error) => {
      if (error instanceof SignedOut) return
      if (gone(error)) host.remove(session.id)
      showProblem(problemOf(form), error, () => form.requestSubmit())
    })
  })

  dialog.addEventListener('close', () => {
    if (deleting !== null) host.focusDelete(deleting.id)
    deleting = null
  })

  return open
}

function ask (book: Book): void {
  question.textContent = `Delete “${book.title}” by ${book.author} (${book.year})?`
}

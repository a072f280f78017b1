/**
 * The Import books dialog: a CSV or NDJSON file picked and sent to the service, which stores all
 * of its books or none. A progress bar while it goes up, then the count stored. When the service
 * refuses the file (400), the same file goes to the dry run, which stores nothing and says which
 * lines are wrong and why: the dialog shows them (the first 100, and how many in all).
 *
 * Closing the dialog while the file goes up stops the upload, and with it the import. Other
 * refusals (too large, a type the service does not take, too many imports at once, no answer)
 * are shown as every failure is (feedback.ts), with Retry where trying again can help.
 */
import { ApiFailure, SignedOut } from './api.js'
import { checkImport, importBooks, importType, type ImportReport, type UploadProgress } from './bulk-api.js'
import { element } from './dom.js'
import { clearProblem, problemOf, showProblem } from './feedback.js'

export interface ImportDialogHost {
  /** Books were stored: the API's message, and how many */
  imported: (message: string, count: number) => void
}

const dialog = element<HTMLDialogElement>('import-dialog')
const form = element<HTMLFormElement>('import-form')
const fileInput = element<HTMLInputElement>('import-file')
const startButton = element<HTMLButtonElement>('import-start')
const progressBar = element<HTMLProgressElement>('import-progress')
const outcome = element('import-outcome')
const refused = element('import-refused')
const refusedWhy = element('import-refused-why')
const problemRows = element<HTMLTableElement>('import-problems').tBodies[0]!

const numbers = new Intl.NumberFormat()
const count = (n: number, one: string, many: string) => `${numbers.format(n)} ${n === 1 ? one : many}`

/** The upload under way, which closing the dialog stops. */
let uploading: AbortController | null = null

/** Sets the dialog up; returns how to open it. */
export function importDialog (host: ImportDialogHost): () => void {
  async function send (file: File, type: string, signal: AbortSignal): Promise<void> {
    outcome.textContent = `Uploading ${file.name}…`
    try {
      const { message, data } = await importBooks(file, { type, signal, progress: progressTo('Uploaded; storing the books…') })
      outcome.textContent = `${message}: ${count(data.count, 'book', 'books')}.`
      // Stored: the same file is not sent twice by a second click
      fileInput.value = ''
      host.imported(message, data.count)
    } catch (error) {
      if (!(error instanceof ApiFailure && error.status === 400)) throw error
      outcome.textContent = `${file.name} was refused. Finding the lines refused…`
      const { data: report } = await checkImport(file, { type, signal, progress: progressTo('Checking the lines…') })
      // Refused for a reason the check does not find: the service's own words then
      if (report.valid) throw error
      showRefused(file, report)
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault()
    if (uploading !== null) return
    const file = fileInput.files?.[0]
    reset()
    if (file === undefined) {
      problemOf(form).textContent = 'Choose a file to import.'
      return
    }
    const type = importType(file)
    if (type === null) {
      problemOf(form).textContent = 'Choose a CSV file (.csv) or an NDJSON file (.ndjson, .jsonl).'
      return
    }
    const controller = new AbortController()
    uploading = controller
    setBusy(true)
    send(file, type, controller.signal).catch((error) => {
      if (controller.signal.aborted || error instanceof SignedOut) return
      outcome.textContent = ''
      showProblem(problemOf(form), error, () => form.requestSubmit())
    }).finally(() => {
      if (uploading !== controller) return
      uploading = null
      setBusy(false)
      progressBar.hidden = true
    })
  })

  fileInput.addEventListener('change', () => reset())

  dialog.addEventListener('close', () => {
    uploading?.abort()
    uploading = null
    setBusy(false)
  })

  return () => {
    form.reset()
    reset()
    dialog.showModal()
    fileInput.focus()
  }
}

/** Shows the bytes sent on the progress bar; `done` once all are, while the service works on them. */
function progressTo (done: string): UploadProgress {
  return (sent, total) => {
    progressBar.hidden = false
    if (total === null) {
      progressBar.removeAttribute('value')
      return
    }
    progressBar.max = Math.max(total, 1)
    progressBar.value = sent
    if (sent === total && total > 0) outcome.textContent = done
  }
}

/** The dry run's report: nothing stored, and each line refused with why. */
function showRefused (file: File, report: ImportReport): void {
  const shown = report.problems.length
  const more = report.problem_count > shown ? ` The first ${numbers.format(shown)} are listed.` : ''
  outcome.textContent = `Nothing was stored: ${file.name} has ${count(report.problem_count, 'problem', 'problems')} ` +
    `(${count(report.books, 'book', 'books')} read).${more}`
  problemRows.replaceChildren(...report.problems.map(({ line, error }) => {
    const row = document.createElement('tr')
    for (const text of [numbers.format(line), error]) row.insertCell().textContent = text
    return row
  }))
  refusedWhy.textContent = more === '' ? '' : `${count(report.problem_count, 'problem', 'problems')} in all.`
  refused.hidden = false
}

function reset (): void {
  clearProblem(problemOf(form))
  outcome.textContent = ''
  refused.hidden = true
  refusedWhy.textContent = ''
  problemRows.replaceChildren()
  progressBar.hidden = true
  progressBar.value = 0
}

function setBusy (busy: boolean): void {
  startButton.disabled = busy
  fileInput.disabled = busy
  if (busy) form.setAttribute('aria-busy', 'true')
  else form.removeAttribute('aria-busy')
}

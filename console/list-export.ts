/**
 * Export CSV: the list as shown, its filter and its order, or the search shown in its place (its
 * `q` and order, best first without one), saved as a CSV file by the browser.
 *
 * The file is the service's own export, `GET /books` with `Accept: text/csv` and the list's
 * parameters (no `limit`, no `cursor`: the whole listing). The token goes in `Authorization`,
 * which a link cannot send, so the answer is fetched, kept as a Blob and saved through an object
 * URL. The Filter box matches a title or an author, and the service's `title` and `author`
 * filters apply together: a filtered list is then two exports, merged in the list's order, each
 * book once, as the list in pages merges its two walks (paged-list.ts). Each line of the file is
 * as the service wrote it.
 */
import { comparator, type Order } from './book-list.js'
import { exportCsv, type ExportQuery } from './bulk-api.js'
import { readBooksCsv, type CsvRecord } from './csv-records.js'
import { matchesNothing, searchFindsNothing } from './paged-list.js'

/** The name the browser saves the file as. */
const FILE_NAME = 'books.csv'
/** How long the file's object URL lives: the browser has read the Blob long before. */
const URL_LIFETIME_MS = 60_000

/** A search shown instead of the list: its text (`q`) and its order, null for best first. */
export interface ShownSearch { text: string, order: Order | null }

const sortOf = (order: Order) => `${order.descending ? '-' : ''}${order.key}`

/**
 * The exports the list needs: one, or one by title and one by author; none for a filter nothing
 * can match. A search: one, or none when it has no word to find.
 */
function exportQueries (order: Order, filter: string, search: ShownSearch | null): ExportQuery[] {
  if (search !== null) {
    if (searchFindsNothing(search.text)) return []
    return [{ q: search.text, ...(search.order === null ? {} : { sort: sortOf(search.order) }) }]
  }
  const sort = sortOf(order)
  if (filter === '') return [{ sort }]
  if (matchesNothing(filter)) return []
  return [{ sort, title: filter }, { sort, author: filter }]
}

/** The file of the list with this order and filter (or of the search): the service's export, or two merged. */
export async function exportList (order: Order, filter: string, search: ShownSearch | null): Promise<Blob> {
  const queries = exportQueries(order, filter, search)
  const answers = await Promise.all(queries.map((query) => exportCsv(query)))
  if (answers.length === 1) return answers[0]!
  const files = await Promise.all(answers.map(async (answer) => readBooksCsv(await answer.text())))
  const records = mergeOnce(files.map((file) => file.records), order)
  return new Blob([files[0]?.header ?? 'id,title,author,year\r\n', ...records.map((record) => record.text)], { type: 'text/csv' })
}

/** Two lists of records, each in `order`, as one in that order, a book in both once. */
function mergeOnce ([first = [], second = []]: CsvRecord[][], order: Order): CsvRecord[] {
  const compare = comparator(order)
  const merged: CsvRecord[] = []
  let i = 0
  let j = 0
  while (i < first.length || j < second.length) {
    const a = first[i]
    const b = second[j]
    const difference = a === undefined ? 1 : b === undefined ? -1 : compare(a.book, b.book)
    if (difference <= 0) merged.push(a!)
    else merged.push(b!)
    // The same book, found by both: once (the order ties by id, so only the same book compares equal)
    if (difference <= 0) i++
    if (difference >= 0) j++
  }
  return merged
}

/** Has the browser save `file` as books.csv. */
export function save (file: Blob): void {
  const url = URL.createObjectURL(file)
  const link = document.createElement('a')
  link.href = url
  link.download = FILE_NAME
  link.hidden = true
  document.body.append(link)
  link.click()
  link.remove()
  setTimeout(() => URL.revokeObjectURL(url), URL_LIFETIME_MS)
}

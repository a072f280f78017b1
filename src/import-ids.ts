/**
 * What an import's books are known by: before they are stored, their fingerprint under an
 * idempotency key; once stored, the runs of ids they were given, in input order, which the
 * answer zips with the spooled books.
 */
import { createHash } from 'node:crypto'
import { spooledBook, type ImportSpool } from './import-spool.js'

/** Consecutive ids: `count` of them from `first`. The ids of an import, in input order, are a few such runs. */
export interface IdRun {
  first: number
  count: number
}

/**
 * What identifies an import's books under an idempotency key: SHA-256 over a marker, then each
 * book's stored fields as the JSON `[title, author, year]` and a LF, in order. The marker keeps an
 * import and a single create (plugins/app/books-repository.ts) from ever having the same
 * fingerprint. Fed book by book as the body is read.
 */
export function importFingerprint () {
  const digest = createHash('sha256').update('bookkeeping import\n')
  return {
    add ({ title, author, year }: { title: string, author: string, year: number }) {
      digest.update(`${JSON.stringify([title, author, year])}\n`)
    },
    digest: (): Buffer => digest.digest()
  }
}

/**
 * The imported books, in input order, each with its id, `rows` at a time: the spool's lines
 * zipped with the runs of ids.
 */
export async function * importedBooks (spool: ImportSpool, ids: IdRun[], rows: number) {
  let run = 0
  let next = ids[0]?.first ?? 0
  let left = ids[0]?.count ?? 0
  for await (const lines of spool.batches(rows)) {
    yield lines.map((line) => {
      if (left === 0) {
        run++
        next = ids[run]!.first
        left = ids[run]!.count
      }
      left--
      const { title, author, year } = spooledBook(line)
      return { id: next++, title, author, year }
    })
  }
}

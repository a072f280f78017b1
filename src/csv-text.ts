/**
 * CSV as RFC 4180 writes it, with each field as PostgreSQL's `COPY ... CSV` writes it: the text
 * exactly as stored, quoted (with its quotes doubled) when it holds a comma, a quote, a CR or an
 * LF, or is empty; nothing added, so that any program reading the file gets the stored text back.
 * Lines end in CRLF (COPY's own end in LF).
 */

/** The header line of a CSV of books: the envelope's fields, in their order. */
export const BOOKS_CSV_HEADER = 'id,title,author,year\r\n'

const NEEDS_QUOTES = /[",\r\n]/

export function csvField (text: string): string {
  return text === '' || NEEDS_QUOTES.test(text) ? `"${text.replaceAll('"', '""')}"` : text
}

/** One line of a CSV of books, its line end included. */
export function bookCsvLine (book: { id: number | string, title: string, author: string, year: number }): string {
  return `${book.id},${csvField(book.title)},${csvField(book.author)},${book.year}\r\n`
}

/**
 * What reading an import body gives, in input order: a book, checked, or a problem at its line.
 * Apart from the reader (import-parse.ts) so that each format's module can name them.
 */
import type { BookCreate } from './schemas/book.js'

/**
 * What is wrong at one place of the body: `line` the 1-based physical line where the record
 * starts (or of the byte in question), `book` the 1-based index of the book among the input's,
 * or null for what is not one book (the header, the syntax, a blank line).
 */
export interface ImportProblem { line: number, book: number | null, error: string }

export type ImportItem =
  /** `index`: the book's 1-based position among the books (the refused ones count too). */
  | { kind: 'book', line: number, index: number, book: BookCreate }
  /** `fatal`: the rest of the body cannot be read; the reading ends after it. */
  | { kind: 'problem', problem: ImportProblem, fatal: boolean }

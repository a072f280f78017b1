/**
 * The form's checks, as one types: the API's own rules (src/schemas/book-limits.ts, from which
 * its schemas are built), in words a person can act on. What passes here passes the API's
 * validation; the API still has the last word, and its answer is shown as it is.
 */
import { BOOK_TEXT_PATTERN, TEXT_MAX_LENGTH, YEAR_MAX, YEAR_MIN } from '../src/schemas/book-limits.js'

// The flag Ajv compiles schema patterns with
const BOOK_TEXT = new RegExp(BOOK_TEXT_PATTERN, 'u')
const WHOLE_NUMBER = /^-?\d+$/

/** What is wrong with a title or author, or null. */
export function textProblem (value: string): string | null {
  if (value === '') return 'Required'
  // JSON Schema counts characters as code points, not UTF-16 units
  const length = [...value].length
  if (length > TEXT_MAX_LENGTH) return `At most ${TEXT_MAX_LENGTH} characters (now ${length})`
  if (!BOOK_TEXT.test(value)) return value.includes('\u0000') ? 'No NUL characters' : 'Must not be blank'
  return null
}

/** What is wrong with a year as typed, or null. */
export function yearProblem (value: string): string | null {
  const year = value.trim()
  if (year === '') return 'Required'
  if (!WHOLE_NUMBER.test(year)) return 'A whole number, such as 1965 (or -500 for 500 BC)'
  const number = Number(year)
  if (number < YEAR_MIN || number > YEAR_MAX) return `From ${YEAR_MIN} to ${YEAR_MAX}`
  return null
}

/** The year as the API takes it; only for a value `yearProblem` accepts. */
export function parseYear (value: string): number {
  return Number(value.trim())
}

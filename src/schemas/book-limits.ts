/**
 * The limits of a book's fields, with no dependency: the API's schemas (book.ts) are built from
 * them, and the console (console) checks its form with them as one types, so both hold the
 * same rules.
 */

/** The longest title or author, in characters (code points, as JSON Schema counts them). */
export const TEXT_MAX_LENGTH = 1000
/** PostgreSQL `integer`; years before the common era are negative. */
export const YEAR_MIN = -2147483648
export const YEAR_MAX = 2147483647
/**
 * A title or author: not blank, no NUL (PostgreSQL text cannot hold it). Anchored, and its
 * lookahead scans once, so it stays linear on long input.
 */
export const BOOK_TEXT_PATTERN = '^(?=\\s*\\S)[^\\u0000]*$'

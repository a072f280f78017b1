import { Type, type Static } from '@sinclair/typebox'
import { BOOK_TEXT_PATTERN, TEXT_MAX_LENGTH, YEAR_MAX, YEAR_MIN } from './book-limits.js'

/** A title or author (the limits are in book-limits.ts, shared with the console). */
const BookText = Type.String({
  minLength: 1,
  maxLength: TEXT_MAX_LENGTH,
  pattern: BOOK_TEXT_PATTERN
})

const BookYear = Type.Integer({ minimum: YEAR_MIN, maximum: YEAR_MAX })

export const BookSchema = Type.Object({
  id: Type.Integer({ minimum: 1 }),
  title: Type.String(),
  author: Type.String(),
  year: Type.Integer()
}, { additionalProperties: false })

/**
 * Unknown fields, `id` among them, are not declared: they stay in the body, but the repository
 * reads only these three, so they are never stored or echoed.
 */
export const BookCreateSchema = Type.Object({
  title: BookText,
  author: BookText,
  year: BookYear
})

export const BookPatchSchema = Type.Partial(BookCreateSchema)

/**
 * Matches digit strings that may be a book id; `isBookId` applies the bigint bound, which a
 * pattern cannot express readably.
 */
export const BookParamsSchema = Type.Object({
  id: Type.String({
    pattern: '^[1-9][0-9]{0,18}$',
    description: 'The id of a book; an id no book can have (not a number, 0, over 2^63-1) is 404'
  })
})

export type Book = Static<typeof BookSchema>
export type BookCreate = Static<typeof BookCreateSchema>
export type BookPatch = Static<typeof BookPatchSchema>

const BIGINT_MAX = 9223372036854775807n
const ID_SHAPE = new RegExp(BookParamsSchema.properties.id.pattern!)

/**
 * Whether some book could have this id: a positive decimal `bigint` without sign, leading zero,
 * exponent or fraction. PostgreSQL then gets the string as it is.
 */
export function isBookId (raw: string): boolean {
  return ID_SHAPE.test(raw) && BigInt(raw) <= BIGINT_MAX
}

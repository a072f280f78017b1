import { Type, type Static } from '@sinclair/typebox'
import { TEXT_MAX_LENGTH } from './book-limits.js'
import { SEARCH_MAX_LENGTH } from './search-syntax.js'

/** The most books one page holds (`limit`). */
const PAGE_LIMIT_MAX = 1000

const SORTS = ['id', '-id', 'title', '-title', 'author', '-author', 'year', '-year'] as const

/** The text of a `title` or `author` filter: any characters but NUL (PostgreSQL text cannot hold it). */
const FilterText = (field: string) => Type.String({
  minLength: 1,
  maxLength: TEXT_MAX_LENGTH,
  pattern: '^[^\\u0000]*$',
  description: `Books whose ${field} contains this text, ignoring case; %, _ and \\ are ordinary characters`
})

/** A year bound, in the decimal form of a book's `year`; its range is checked by `walkOf` (src/listing.ts). */
const YearBound = (description: string) => Type.String({ pattern: '^(0|-?[1-9][0-9]{0,9})$', description })

/**
 * The query parameters of `GET /books`, all optional. Each is a string: the patterns say exactly
 * which texts are accepted, where a number type would also take `+5`, `05` or `5.0`. A parameter
 * given twice arrives as an array and fails its schema. Parameters not named here are ignored.
 */
export const ListingQuerySchema = Type.Object({
  limit: Type.Optional(Type.String({
    pattern: `^(${PAGE_LIMIT_MAX}|[1-9][0-9]{0,2})$`,
    description: `At most this many books, 1 to ${PAGE_LIMIT_MAX}; when more may follow, a Link header names the next page`
  })),
  sort: Type.Optional(Type.Union(SORTS.map((sort) => Type.Literal(sort)), {
    description: 'The order: id, title, author or year, descending with a leading -; ties by id ascending; ' +
      'titles and authors by Unicode code point'
  })),
  q: Type.Optional(Type.String({
    minLength: 1,
    maxLength: SEARCH_MAX_LENGTH,
    pattern: '^[^\\u0000]*$',
    description: 'Search: the books whose title or author holds every word, ignoring case and accents, best first ' +
      '(without `sort`); `"a phrase"`, `-word` excluded, the last word also as a prefix, typos forgiven in words of 5 letters or more'
  })),
  title: Type.Optional(FilterText('title')),
  author: Type.Optional(FilterText('author')),
  year_from: Type.Optional(YearBound('Books with a year at least this')),
  year_to: Type.Optional(YearBound('Books with a year at most this')),
  cursor: Type.Optional(Type.String({
    pattern: '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$',
    description: 'Where a walk over the pages goes on: only from the Link header of the page before'
  }))
})

export type ListingQuery = Static<typeof ListingQuerySchema>

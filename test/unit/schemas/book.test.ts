/**
 * The book schemas' rules as Fastify validates a body (Ajv with the service's options: no type
 * coercion, unknown fields removed), and `isBookId`, the id bound a pattern cannot express.
 */
import { Ajv } from 'ajv'
import t from 'tap'
import { BookCreateSchema, BookPatchSchema, isBookId } from '../../../src/schemas/book.js'

// Fastify's body validation options, with the coercion src/app.ts turns off
const ajv = new Ajv({ coerceTypes: false, useDefaults: true, removeAdditional: true, allErrors: false })
const validateCreate = ajv.compile(BookCreateSchema)
const validatePatch = ajv.compile(BookPatchSchema)

const BOOK = { title: 'The Left Hand of Darkness', author: 'Ursula K. Le Guin', year: 1969 }

const ACCEPTED_TEXTS: Array<[string, string]> = [
  ['one character', 'x'],
  ['surrounding spaces', ' padded '],
  ['1000 characters', 'T'.repeat(1000)],
  ['1000 characters outside the BMP (counted as characters, not UTF-16 units)', '📚'.repeat(1000)],
  ['letters outside ASCII', 'Œuvres 📚'],
  ['a line break between words', 'two\nlines']
]

const REJECTED_TEXTS: Array<[string, unknown]> = [
  ['empty', ''],
  ['only ASCII blanks', ' \t\n\r '],
  ['only Unicode spaces', '\u00a0\u2003\u3000'],
  ['1001 characters', 'T'.repeat(1001)],
  ['a NUL inside', 'a\u0000b'],
  ['only a NUL', '\u0000'],
  ['a NUL after text', 'abc\u0000'],
  ['a number (no coercion)', 1969],
  ['a boolean', true],
  ['null', null],
  ['an array of a string', ['a']],
  ['an object', {}]
]

const ACCEPTED_YEARS: Array<[string, number]> = [
  ['zero', 0],
  ['a year before the common era', -750],
  ['the smallest PostgreSQL integer', -2147483648],
  ['the largest PostgreSQL integer', 2147483647],
  ['a whole number written with a fraction part', 1969.0]
]

const REJECTED_YEARS: Array<[string, unknown]> = [
  ['one above the largest PostgreSQL integer', 2147483648],
  ['one below the smallest PostgreSQL integer', -2147483649],
  ['a fraction', 1969.5],
  ['a numeric string (no coercion)', '1969'],
  ['an empty string', ''],
  ['a boolean', true],
  ['null', null],
  ['an array of a number', [1969]]
]

t.test('BookCreate accepts a title or author at the edges of every text rule', async (t) => {
  for (const field of ['title', 'author'] as const) {
    for (const [name, text] of ACCEPTED_TEXTS) {
      t.ok(validateCreate({ ...BOOK, [field]: text }), `${field}: ${name}`)
    }
  }
})

t.test('BookCreate rejects a blank, too long, NUL-holding or non-string title or author', async (t) => {
  for (const field of ['title', 'author'] as const) {
    for (const [name, text] of REJECTED_TEXTS) {
      t.notOk(validateCreate({ ...BOOK, [field]: text }), `${field}: ${name}`)
    }
  }
})

t.test('BookCreate accepts any integer year PostgreSQL integer holds, negative ones included', async (t) => {
  for (const [name, year] of ACCEPTED_YEARS) t.ok(validateCreate({ ...BOOK, year }), name)
})

t.test('BookCreate rejects a year out of PostgreSQL integer, fractional or not a number', async (t) => {
  for (const [name, year] of REJECTED_YEARS) t.notOk(validateCreate({ ...BOOK, year }), name)
})

t.test('BookCreate requires title, author and year', async (t) => {
  for (const field of ['title', 'author', 'year'] as const) {
    const { [field]: _, ...missing } = BOOK
    t.notOk(validateCreate(missing), `without ${field}`)
  }
  t.notOk(validateCreate(null), 'null')
  t.notOk(validateCreate([BOOK]), 'an array of a book')
})

// Not removed: the schema does not say additionalProperties: false, so Ajv's removeAdditional
// leaves them; the repository reads only the declared fields
t.test('BookCreate accepts a body with unknown fields, a client id among them, and changes none of its fields', async (t) => {
  const body = { ...BOOK, id: 999, isbn: '123', extra: { a: 1 } }
  t.ok(validateCreate(body))
  t.match(body, BOOK)
})

t.test('BookPatch accepts an empty body and each field alone, with the edges of its rule', async (t) => {
  t.ok(validatePatch({}), 'an empty body')
  for (const field of ['title', 'author'] as const) {
    for (const [name, text] of ACCEPTED_TEXTS) t.ok(validatePatch({ [field]: text }), `${field}: ${name}`)
  }
  for (const [name, year] of ACCEPTED_YEARS) t.ok(validatePatch({ year }), `year: ${name}`)
})

t.test('BookPatch rejects the texts and years BookCreate rejects, even beside valid fields', async (t) => {
  for (const field of ['title', 'author'] as const) {
    for (const [name, text] of REJECTED_TEXTS) {
      t.notOk(validatePatch({ [field]: text }), `${field}: ${name}`)
      t.notOk(validatePatch({ ...BOOK, [field]: text }), `${field} beside valid fields: ${name}`)
    }
  }
  for (const [name, year] of REJECTED_YEARS) t.notOk(validatePatch({ year }), `year: ${name}`)
})

t.test('BookPatch accepts a body with unknown fields, a client id among them', async (t) => {
  t.ok(validatePatch({ title: 'New', id: 5, extra: true }))
  t.ok(validatePatch({ id: 5 }), 'also with no known field at all')
})

t.test('isBookId accepts positive decimal integers up to 2^63-1', async (t) => {
  for (const id of ['1', '7', '42', '1000000000000000000', '9223372036854775806', '9223372036854775807']) {
    t.ok(isBookId(id), id)
  }
})

t.test('isBookId rejects zero, signs, leading zeros, fractions, exponents, blanks, non-digits and anything over 2^63-1', async (t) => {
  for (const id of [
    '', '0', '00', '01', '007', '-1', '+1', '1.0', '1.', '1e3', '0x10', ' 1', '1 ', '1\n', 'abc', '1a',
    '\u0661', '９',
    '9223372036854775808', '9999999999999999999', '10000000000000000000', '99999999999999999999'
  ]) {
    t.notOk(isBookId(id), JSON.stringify(id))
  }
})

/**
 * The console form's checks (console/book-rules.ts) agree with the API's validation of a
 * body: whatever text or year one types, the form accepts it exactly when the API's schema does
 * (Ajv with the service's options), so the form never sends what the API refuses nor refuses
 * what it takes.
 */
import { Ajv } from 'ajv'
import fc from 'fast-check'
import t from 'tap'
import { parseYear, textProblem, yearProblem } from '../../../console/book-rules.js'
import { BookCreateSchema } from '../../../src/schemas/book.js'

const ajv = new Ajv({ coerceTypes: false, useDefaults: true, removeAdditional: true, allErrors: false })
const validate = ajv.compile(BookCreateSchema)
const BOOK = { title: 'Dune', author: 'Frank Herbert', year: 1965 }

const apiAcceptsTitle = (title: string) => validate({ ...BOOK, title })
const apiAcceptsYear = (typed: string) => yearProblem(typed) === null && validate({ ...BOOK, year: parseYear(typed) })

t.test('a title or author: the form and the API agree', async (t) => {
  const cases = ['', ' ', '\t\n', '\u00a0\u3000', 'x', ' padded ', 'a\u0000b', 'T'.repeat(1000), 'T'.repeat(1001),
    '📚'.repeat(1000), '📚'.repeat(1001), '<img src=x onerror=alert(1)>']
  for (const text of cases) {
    t.equal(textProblem(text) === null, apiAcceptsTitle(text), JSON.stringify(text.slice(0, 20)) + ` (${text.length} units)`)
  }
  fc.assert(fc.property(
    fc.oneof(fc.string({ unit: 'grapheme', maxLength: 1010 }), fc.string({ unit: fc.constantFrom(' ', '\t', '\u0000', 'a', '\u2003'), maxLength: 8 })),
    (text) => (textProblem(text) === null) === apiAcceptsTitle(text)
  ), { numRuns: 2000 })
})

t.test('the words for each problem', async (t) => {
  t.equal(textProblem(''), 'Required')
  t.equal(textProblem('   '), 'Must not be blank')
  t.equal(textProblem('a\u0000'), 'No NUL characters')
  t.equal(textProblem('x'.repeat(1001)), 'At most 1000 characters (now 1001)')
  t.equal(yearProblem(''), 'Required')
  t.equal(yearProblem('19x'), 'A whole number, such as 1965 (or -500 for 500 BC)')
  t.equal(yearProblem('2147483648'), 'From -2147483648 to 2147483647')
})

t.test('a year as typed: the form accepts it exactly when the API takes the number it sends', async (t) => {
  for (const typed of ['1965', ' 1965 ', '-500', '0', '-2147483648', '2147483647', '2147483648', '-2147483649', '1965.5', '1e3', '+5', '', 'x']) {
    const formAccepts = yearProblem(typed) === null
    t.equal(formAccepts, apiAcceptsYear(typed), JSON.stringify(typed))
  }
  fc.assert(fc.property(fc.bigInt({ min: -(2n ** 40n), max: 2n ** 40n }), (year) => {
    const typed = String(year)
    const inRange = year >= -2147483648n && year <= 2147483647n
    return (yearProblem(typed) === null) === inRange && (!inRange || validate({ ...BOOK, year: parseYear(typed) }))
  }), { numRuns: 2000 })
})

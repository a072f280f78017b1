/**
 * The COPY statements of CSV pages (src/db/listings-sql.ts): COPY takes no parameters, so the
 * numbers are written into its text, and only numbers are. What the statements copy, on a real
 * database: test/app/books-repository.test.ts and test/app/export.test.ts.
 */
import t from 'tap'
import { copyPageAfter, copyPageBeyond } from '../../../src/db/listings-sql.js'

t.test('ids and sizes are written as the digits they are', async (t) => {
  t.match(copyPageAfter('9007199254740993', 500), /WHERE id > 9007199254740993 ORDER BY id LIMIT 500\)/)
  t.match(copyPageBeyond('41', 8000, 16000), /WHERE id > 41 ORDER BY id OFFSET 7999 LIMIT 1\).* LIMIT 16001\)/s)
})

t.test('anything but digits is refused, never written into the statement', async (t) => {
  for (const id of ['1; DROP TABLE books', '1 OR true', '-1', '1e3', '', ' 1']) {
    t.throws(() => copyPageAfter(id, 10), TypeError, JSON.stringify(id))
    t.throws(() => copyPageBeyond(id, 1, 10), TypeError, JSON.stringify(id))
  }
  t.throws(() => copyPageAfter('1', 1.5), TypeError, 'a fraction')
  t.throws(() => copyPageBeyond('1', 0, 10), TypeError, 'no book to start after')
})

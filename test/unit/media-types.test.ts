/**
 * The answer format `Accept` chooses (src/media-types.ts): RFC 9110 negotiation with q-values,
 * where only a media range that names CSV or NDJSON itself selects it, and everything else (no
 * Accept, a wildcard, a type the service does not answer, a format refused with q=0) is the
 * envelope. What GET /books answers for each: test/app/export.test.ts.
 */
import t from 'tap'
import { CSV_MEDIA_TYPE, NDJSON_ANSWER_TYPE, NDJSON_MEDIA_TYPE, answerFormat } from '../../src/media-types.js'

t.test('the media types of the answers', async (t) => {
  t.equal(CSV_MEDIA_TYPE, 'text/csv; charset=utf-8; header=present')
  t.equal(NDJSON_MEDIA_TYPE, 'application/x-ndjson')
  t.equal(NDJSON_ANSWER_TYPE, 'application/x-ndjson; charset=utf-8')
})

t.test('a range that names CSV or NDJSON and is preferred selects it', async (t) => {
  const cases: Array<[string, 'csv' | 'ndjson']> = [
    ['text/csv', 'csv'],
    ['Text/CSV', 'csv'],
    ['text/csv;charset=utf-8', 'csv'],
    ['text/csv; charset="utf-8"; header=present', 'csv'],
    ['text/csv;q=0.001', 'csv'],
    ['application/x-ndjson', 'ndjson'],
    ['application/x-ndjson; charset=utf-8', 'ndjson'],
    ['application/json;q=0.9, text/csv', 'csv'],
    ['text/csv;q=0.5, application/x-ndjson;q=0.8, application/json;q=0.1', 'ndjson'],
    ['text/html, application/xhtml+xml, text/csv;q=0.2', 'csv'],
    ['  text/csv  ,  application/json;q=0.5', 'csv'],
    ['*/*;q=0.1, text/csv', 'csv'],
    // Of two equal q-values, the one the client lists first
    ['text/csv, application/json', 'csv'],
    ['application/x-ndjson, text/csv', 'ndjson']
  ]
  for (const [accept, format] of cases) t.equal(answerFormat(accept), format, accept)
})

t.test('anything else is the envelope', async (t) => {
  const cases: Array<string | undefined> = [
    undefined, '', 'application/json', '*/*', 'text/*', 'application/*', '*/*;q=0.9', 'text/html', 'image/png',
    'text/csv;q=0', 'text/csv; q=0', 'application/x-ndjson;q=0', 'text/csv;q=0, */*', 'text/csv;q=0, text/*',
    // Of two equal q-values, the one the client lists first
    'application/json, text/csv',
    'text/csv;q=0.5, application/json', 'text/csv;q=0.5, */*',
    'application/x-ndjson;q=0.5, application/*',
    // Parameters the answers do not have
    'text/csv; charset=latin1', 'text/csv; header=absent', 'application/x-ndjson; charset=utf-16',
    // Near misses
    'text/csvx', 'text/cs', 'application/ndjson', 'text/x-ndjson', 'csv', 'text', 'garbage;;;'
  ]
  for (const accept of cases) t.equal(answerFormat(accept), 'envelope', String(accept))
})

/**
 * The listing's cursors (src/listing.ts): what a walk carries between pages comes back whole,
 * including how its pages read the books; a cursor made before that was kept is still read; a
 * cursor for another walk, or changed, is refused.
 */
import t from 'tap'
import { listingCursors, type Walk } from '../../src/listing.js'

const WALK: Walk = { field: 'year', descending: true, author: 'tolkien' }
const cursors = listingCursors('a secret of the tests, long enough for any key')

t.test('a position comes back as it went, the choice of reading the matches first with it', async (t) => {
  for (const matchesFirst of [true, false]) {
    const position = { key: 1954, id: '42', snapshot: '100:105:101,103', matchesFirst }
    t.strictSame(cursors.decode(WALK, cursors.encode(WALK, position)), position, `matchesFirst ${matchesFirst}`)
  }
})

t.test('a cursor that does not carry the choice is read, and its page decides again', async (t) => {
  const position = { key: 1954, id: '42', snapshot: '100:105:' }
  const decoded = cursors.decode(WALK, cursors.encode(WALK, position))
  t.strictSame(decoded, position)
  t.notOk(decoded !== null && 'matchesFirst' in decoded, 'no choice made up')
})

t.test('a cursor for another walk, changed, or signed with another secret is refused', async (t) => {
  const cursor = cursors.encode(WALK, { key: 1954, id: '42', snapshot: '100:105:', matchesFirst: true })
  t.equal(cursors.decode({ ...WALK, descending: false }, cursor), null, 'another order')
  t.equal(cursors.decode({ ...WALK, author: 'lem' }, cursor), null, 'another filter')
  const [payload, tag] = cursor.split('.') as [string, string]
  const changed = Buffer.from(JSON.stringify([1, 1954, '42', '100:105:', false])).toString('base64url')
  t.not(changed, payload, 'precondition: the payload differs')
  t.equal(cursors.decode(WALK, `${changed}.${tag}`), null, 'the choice changed')
  t.equal(listingCursors('another secret, as long as the first one is').decode(WALK, cursor), null, 'another secret')
})

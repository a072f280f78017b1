/**
 * The listing's cursors (src/listing.ts): what a walk carries between pages comes back whole,
 * including how its pages read the books; a cursor made before that was kept is still read; a
 * cursor for another walk, or changed, is refused; one made with an accepted secret is read.
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

t.test('during a rotation: made with the first secret, read with it or an accepted one', async (t) => {
  const [old, fresh] = ['the old secret of the tests, long enough', 'the new secret of the tests, long enough']
  const position = { key: 1954, id: '42', snapshot: '100:105:', matchesFirst: true }
  const made = listingCursors(old).encode(WALK, position)
  t.strictSame(listingCursors(fresh, [old]).decode(WALK, made), position, 'a cursor of an accepted secret is read')
  t.equal(listingCursors(fresh, [old]).encode(WALK, position), listingCursors(fresh).encode(WALK, position), 'made with the first secret alone')
  t.equal(listingCursors(fresh).decode(WALK, made), null, 'not once it is no longer accepted')
  const [payload, tag] = made.split('.') as [string, string]
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
  // The last character with its lowest bit flipped: 22 characters carry 132 bits for 128
  const twin = `${payload}.${tag.slice(0, 21)}${alphabet[alphabet.indexOf(tag[21]!) ^ 1]}`
  t.strictSame(Buffer.from(twin.split('.')[1]!, 'base64url'), Buffer.from(tag, 'base64url'), 'precondition: the same bytes')
  t.equal(listingCursors(fresh, [old]).decode(WALK, twin), null, 'an accepted secret\'s cursor spelled otherwise is refused')
})

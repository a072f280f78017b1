/**
 * The feed's change ids and events (src/changes.ts): an id names its position, increases with it
 * as a string too, and is refused when this service did not issue it, in any spelling (one made
 * with an accepted secret is read); an event is the event stream format's fields, its data on
 * one line.
 */
import t from 'tap'
import { changeIds, event, feedStart, reset } from '../../src/changes.js'

const ids = changeIds('a secret of the tests, long enough for any key')

t.test('an id names its position', async (t) => {
  for (const position of [0, 1, 42, 2 ** 53 - 1]) t.equal(ids.decode(ids.encode(position)), position, `position ${position}`)
})

t.test('ids increase with their positions, as strings too', async (t) => {
  const positions = [0, 9, 10, 99, 100, 123456789, 2 ** 53 - 1]
  const encoded = positions.map((position) => ids.encode(position))
  t.strictSame([...encoded].sort(), encoded)
})

t.test('an id not issued by this service is refused', async (t) => {
  const id = ids.encode(42)
  const [digits, tag] = id.split('.') as [string, string]
  // 22 characters carry 132 bits for 128: the last one's lowest 4 encode nothing
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
  const twin = alphabet[alphabet.indexOf(tag[21]!) ^ 1]!
  t.strictSame(Buffer.from(tag.slice(0, 21) + twin, 'base64url'), Buffer.from(tag, 'base64url'), 'the twin is the same bytes')
  const refused = {
    'another position': `${'43'.padStart(16, '0')}.${tag}`,
    'the tag spelled otherwise (the same bytes)': `${digits}.${tag.slice(0, 21)}${twin}`,
    'another secret': changeIds('another secret of the tests, just as long').encode(42),
    'without its tag': digits,
    'a shorter position': `42.${tag}`,
    'spaces around it': ` ${id} `,
    empty: ''
  }
  for (const [what, other] of Object.entries(refused)) t.equal(ids.decode(other), null, what)
})

t.test('an event: id, name and one line of data, then a blank line', async (t) => {
  t.equal(event('created', '{"id":1}', 'x'), 'id: x\nevent: created\ndata: {"id":1}\n\n')
  t.equal(event('token-expired', '{}'), 'event: token-expired\ndata: {}\n\n', 'no id: the client keeps its last')
  t.equal(reset('y'), 'id: y\nevent: reset\ndata: {}\n\n')
  t.equal(feedStart('z'), 'retry: 2000\nid: z\n\n', 'the start: the retry and the id, no data (no event)')
})

t.test('during a rotation: made with the first secret, read with it or an accepted one', async (t) => {
  const [old, fresh] = ['the old secret of the tests, long enough', 'the new secret of the tests, long enough']
  const made = changeIds(old).encode(42)
  t.equal(changeIds(fresh, [old]).decode(made), 42, 'an id of an accepted secret names its position')
  t.equal(changeIds(fresh, [old]).encode(42), changeIds(fresh).encode(42), 'made with the first secret alone')
  t.equal(changeIds(fresh).decode(made), null, 'not once it is no longer accepted')
})

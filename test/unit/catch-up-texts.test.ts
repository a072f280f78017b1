/**
 * The events kept for feeds that catch up (src/catch-up-texts.ts): each change formatted once
 * while it is kept, another change at the same position (a restored database) formatted anew,
 * and no more kept than the bound, the oldest going first.
 */
import t from 'tap'
import { CatchUpTexts } from '../../src/catch-up-texts.js'
import type { Change } from '../../src/changes.js'

const change = (position: number, book = `{"id":${position}}`): Change => ({ position, kind: 'created', book })

t.test('a change is formatted once while kept; another change at its position anew; the oldest go first', async (t) => {
  const formatted: number[] = []
  const texts = new CatchUpTexts((one) => { formatted.push(one.position); return `event ${one.position} ${one.book}` }, 3)
  t.equal(texts.text(change(1)), 'event 1 {"id":1}')
  t.equal(texts.text(change(1)), 'event 1 {"id":1}', 'the same text again')
  t.strictSame(formatted, [1], 'formatted once')
  t.equal(texts.text(change(1, '{"id":7}')), 'event 1 {"id":7}', 'another change at the same position: its own text')
  t.equal(texts.text({ ...change(1, '{"id":7}'), kind: 'deleted' }), 'event 1 {"id":7}', 'another kind: formatted anew')
  t.strictSame(formatted, [1, 1, 1])
  for (const position of [2, 3, 4]) texts.text(change(position))
  texts.text(change(4))
  texts.text(change(2))
  t.strictSame(formatted, [1, 1, 1, 2, 3, 4], 'the last three kept')
  texts.text(change(1))
  t.strictSame(formatted, [1, 1, 1, 2, 3, 4, 1], 'the oldest one went when the fourth came')
})

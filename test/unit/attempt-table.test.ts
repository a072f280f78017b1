/**
 * The per-process attempt table: an entry leaves only when its window has ended; a full table
 * of live entries counts new keys together in one overflow count.
 */
import t from 'tap'
import { AttemptTable } from '../../src/attempt-table.js'

const WINDOW = 60_000

function count (table: AttemptTable, key: string): number {
  let current = -1
  table.incr(key, (err, result) => { if (err === null && result !== undefined) current = result.current }, WINDOW)
  return current
}

function read (table: AttemptTable, key: string): number {
  let current = -1
  table.read(key, (err, result) => { if (err === null && result !== undefined) current = result.current })
  return current
}

t.test('a full table keeps its live entries and counts new keys in one overflow count', async (t) => {
  // The table reads the time from Date.now(): the test's own clock for this test, restored after it
  let now = 1_000_000
  t.capture(Date, 'now', () => now)
  const table = new AttemptTable(3)
  t.strictSame(['a', 'a', 'a', 'a'].map((key) => count(table, key)), [1, 2, 3, 4], 'a is over the limit of 3')
  count(table, 'b')
  count(table, 'c')
  t.strictSame(['d', 'e', 'f'].map((key) => count(table, key)), [1, 2, 3], 'd, e and f share the overflow count')
  t.equal(read(table, 'd'), 0, 'a key in the overflow reads 0 (nothing of its own)')
  t.equal(count(table, 'a'), 5, 'a keeps its count')

  now = 1_000_000 + WINDOW - 1
  t.equal(count(table, 'g'), 4, 'one millisecond before the windows end, still the overflow')
  now = 1_000_000 + WINDOW
  t.equal(read(table, 'a'), 0, 'a\'s window has ended')
  t.strictSame(['g', 'a', 'd'].map((key) => count(table, key)), [1, 1, 1], 'ended windows leave room: new entries')
  t.equal(count(table, 'h'), 1, 'full again: a fresh overflow window')
})

/**
 * The slots of the long reads (src/listing-slots.ts): one client holds at most its share, the
 * others find the rest free; the clients that wait are served in turn, each in its own order; a
 * call without a client counts as a client of its own; a call that fails gives its slot back.
 */
import t from 'tap'
import { ListingSlots, clientOf, shareOf } from '../../src/listing-slots.js'

/** A call that runs until `finish` is called, and says when it started. */
function held (log: string[], name: string) {
  let finish!: () => void
  const done = new Promise<void>((resolve) => { finish = resolve })
  return {
    fn: () => {
      log.push(name)
      return done
    },
    finish: () => finish()
  }
}

/** Lets every pending promise callback run. */
const settle = () => new Promise((resolve) => setImmediate(resolve))

t.test('the share is half of the slots, at least one', async (t) => {
  t.strictSame([1, 2, 3, 5, 10].map(shareOf), [1, 1, 1, 2, 5])
})

t.test('one client holds at most its share; another client starts at once beside it', async (t) => {
  const slots = new ListingSlots(5)
  const started: string[] = []
  const attacker = Array.from({ length: 20 }, (_, i) => held(started, `a${i}`))
  const runs = attacker.map(({ fn }) => slots.run(fn, '192.0.2.1'))
  await settle()
  t.strictSame(started, ['a0', 'a1'], 'two of twenty started: the share of five slots')
  t.equal(slots.held('192.0.2.1'), 2)
  t.equal(slots.pendingCount, 18, 'the rest wait')
  t.ok(slots.startsNow('192.0.2.2'), 'another client would start at once')
  t.notOk(slots.startsNow('192.0.2.1'), 'the first would not')

  const other = held(started, 'b0')
  const otherRun = slots.run(other.fn, '192.0.2.2')
  await settle()
  t.strictSame(started.slice(2), ['b0'], 'another client\'s call starts without waiting behind the twenty')
  other.finish()
  await otherRun

  // The attacker's calls go on two at a time, in their order
  attacker[0]!.finish()
  await settle()
  t.strictSame(started.slice(3), ['a2'], 'a freed slot goes to the next call of that client')
  t.equal(slots.activeCount, 2)
  for (const call of attacker) call.finish()
  await Promise.all(runs)
  t.strictSame(started.filter((name) => name.startsWith('a')), attacker.map((_, i) => `a${i}`), 'every call ran, in order')
  t.equal(slots.activeCount, 0)
  t.equal(slots.pendingCount, 0)
})

t.test('the clients that wait are served in turn, not in the order their calls came', async (t) => {
  const slots = new ListingSlots(2)
  const started: string[] = []
  // Two clients fill the two slots (a share of one each)
  const first = [held(started, 'x'), held(started, 'y')]
  const firstRuns = [slots.run(first[0]!.fn, 'x'), slots.run(first[1]!.fn, 'y')]
  // Then a client queues five calls, and two others one each after it
  const calls = [
    ...Array.from({ length: 5 }, (_, i) => ({ client: 'a', call: held(started, `a${i}`) })),
    { client: 'b', call: held(started, 'b0') },
    { client: 'c', call: held(started, 'c0') }
  ]
  const runs = calls.map(({ client, call }) => slots.run(call.fn, client))
  await settle()
  t.strictSame(started, ['x', 'y'])
  first[0]!.finish()
  await settle()
  first[1]!.finish()
  await settle()
  t.strictSame(started.slice(2), ['a0', 'b0'], 'the two freed slots go to two clients')
  calls[0]!.call.finish()
  await settle()
  t.strictSame(started.slice(4), ['c0'], 'then to the third client, ahead of the first one\'s second call')
  for (const { call } of calls) call.finish()
  await Promise.all([...firstRuns, ...runs])
  t.strictSame(started.slice(5), ['a1', 'a2', 'a3', 'a4'], 'and the first client\'s calls after, in order')
})

t.test('with one slot, two clients alternate', async (t) => {
  const slots = new ListingSlots(1)
  const order: string[] = []
  const runs = [
    ...Array.from({ length: 3 }, (_, i) => slots.run(async () => { order.push(`a${i}`) }, 'a')),
    ...Array.from({ length: 3 }, (_, i) => slots.run(async () => { order.push(`b${i}`) }, 'b'))
  ]
  await Promise.all(runs)
  t.strictSame(order, ['a0', 'b0', 'a1', 'b1', 'a2', 'b2'])
})

t.test('calls without a client each count as a client of their own: they may use every slot, in their order', async (t) => {
  const slots = new ListingSlots(4)
  const started: string[] = []
  const calls = Array.from({ length: 6 }, (_, i) => held(started, `n${i}`))
  const runs = calls.map(({ fn }) => slots.run(fn))
  await settle()
  t.strictSame(started, ['n0', 'n1', 'n2', 'n3'], 'four calls hold the four slots')
  for (const call of calls) call.finish()
  await Promise.all(runs)
  t.strictSame(started, ['n0', 'n1', 'n2', 'n3', 'n4', 'n5'])
})

t.test('a call that throws or rejects gives its slot back, and its caller gets the error', async (t) => {
  const slots = new ListingSlots(1)
  await t.rejects(slots.run(() => { throw new Error('at once') }, 'a'), { message: 'at once' })
  await t.rejects(slots.run(async () => { throw new Error('later') }, 'a'), { message: 'later' })
  t.equal(await slots.run(() => 42, 'a'), 42, 'the slot is free again')
  t.equal(slots.activeCount, 0)
  t.equal(slots.held('a'), 0)
})

t.test('a client is its address, IPv6 by /64', async (t) => {
  t.equal(clientOf({ ip: '192.0.2.7' }), '192.0.2.7')
  t.equal(clientOf({ ip: '2001:db8:1:2:aaaa::1' }), clientOf({ ip: '2001:db8:1:2:bbbb::2' }), 'one /64, one client')
  t.not(clientOf({ ip: '2001:db8:1:2::1' }), clientOf({ ip: '2001:db8:1:3::1' }), 'another /64, another client')
})

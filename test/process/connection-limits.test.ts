/**
 * Bounds on connections, against the real process over real sockets: the total bound holds
 * across addresses (503); idle keep-alive connections are shed sooner above the high-water mark,
 * never one with a request in flight. A flood from one address:
 * test/process/alone/connection-flood.test.ts.
 */
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { answered, body, closeAll, hold, type Held } from '../helpers/held-connections.js'
import { startService } from '../helpers/service.js'
import { sleep, withTimeout } from '../helpers/wait.js'

t.test('the total bound holds across addresses: 503, then room again when connections close', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, { ...testEnv(await createDatabase(t)), MAX_CONNECTIONS: '60', MAX_CONNECTIONS_PER_ADDRESS: '25' })
  const held: Held[] = []
  closeAll(t, held)
  for (const address of ['127.0.0.3', '127.0.0.4']) {
    held.push(...await Promise.all(Array.from({ length: 25 }, () => hold(service, address))))
  }
  held.push(...await Promise.all(Array.from({ length: 10 }, () => hold(service, '127.0.0.5'))))
  await answered(held)
  t.ok(held.every((one) => one.status() === 200), '60 connections from three addresses served')

  const over = await Promise.all(['127.0.0.5', '127.0.0.6', '127.0.0.3'].map((address) => hold(service, address)))
  closeAll(t, over)
  await answered(over)
  for (const one of over) {
    t.equal(one.status(), 503, 'a 61st connection, from any address, is answered 503')
    t.strictSame(body(one.received()), { status: 503, message: 'Too many connections', data: null }, 'in the envelope')
    t.match(one.received(), /\r\nretry-after: 5\r\n/i, 'with Retry-After')
  }
  await withTimeout(Promise.all(over.map((one) => one.ended)), 5000, 'the refused connections closed by the service')

  // Ten of the first address go away: there is room again
  for (const one of held.splice(0, 10)) one.socket.destroy()
  await sleep(200)
  const again = await hold(service, '127.0.0.6')
  closeAll(t, [again])
  await answered([again])
  t.equal(again.status(), 200, 'a new connection is served once others closed')
  const lines = service.stdout.split('\n').filter((line) => line.includes('over MAX_CONNECTIONS:'))
  t.equal(lines.length, 3, 'the log says so once for each of the three addresses')
})

t.test('above the high-water mark idle keep-alive connections are closed after 5 s, not one with a request in flight', { skip: STORE_INDEPENDENT }, async (t) => {
  // High-water mark 20 (half of 40), low-water mark 16
  const service = await startService(t, { ...testEnv(await createDatabase(t)), MAX_CONNECTIONS: '40', MAX_CONNECTIONS_PER_ADDRESS: '40' })
  const below = await Promise.all(Array.from({ length: 10 }, () => hold(service, '127.0.0.7')))
  closeAll(t, below)
  await answered(below)
  t.match(below[0]!.received(), /\r\nkeep-alive: timeout=72\r\n/i, 'below the mark the keep-alive timeout is 72 s')
  await sleep(7000)
  t.notOk(below.some((one) => one.socket.readableEnded), 'below the mark, 10 connections idle for 7 s are kept')

  // A request in flight: its body trickles in, a byte a second, for 8 s (the request timeout is 10 s)
  const trickled = await hold(service, '127.0.0.8',
    'POST /token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n')
  closeAll(t, [trickled])
  const trickle = (async () => {
    for (const byte of '{"a":1}}') {
      await sleep(1000)
      if (!trickled.socket.destroyed) trickled.socket.write(byte)
    }
  })()

  const crossed = performance.now()
  const above = await Promise.all(Array.from({ length: 15 }, () => hold(service, '127.0.0.7')))
  closeAll(t, above)
  await answered(above)
  await service.waitFor(() => service.stdout.includes('many connections open: idle keep-alive connections are closed sooner'), 2000, 'the shedding to begin')
  t.match(above.at(-1)!.received(), /\r\nkeep-alive: timeout=5\r\n/i, 'above the mark the keep-alive timeout is 5 s, and says so')

  const lifetimes = await withTimeout(Promise.all([...below, ...above].map(async (one) => {
    await one.ended
    return performance.now() - crossed
  })), 15_000, 'the idle connections shed')
  t.comment(`idle connections closed ${Math.min(...lifetimes).toFixed(0)}-${Math.max(...lifetimes).toFixed(0)} ms after the mark was crossed`)
  t.ok(Math.min(...lifetimes) >= 4500 && Math.max(...lifetimes) < 9000, 'all 25 closed after about 5 s idle, not 72 s')

  await trickle
  await withTimeout(trickled.ended, 5000, 'the trickled request answered')
  t.match(trickled.received(), /^HTTP\/1\.1 400 /, 'the request in flight was answered (400: not a login), not cut off')
  await service.waitFor(() => service.stdout.includes('connections back to normal'), 2000, 'the shedding to end')
  t.equal(service.exit, null, 'the service is still running')
})

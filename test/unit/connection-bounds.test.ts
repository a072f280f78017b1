/**
 * The bounds on one server's connections (src/connection-bounds.ts), without a network: which
 * client an address counts as, the counts against the bounds, the shedding of idle connections.
 */
import { EventEmitter } from 'node:events'
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import t from 'tap'
import { BoundedConnections, RefusalLog, addressKey } from '../../src/connection-bounds.js'

t.test('addressKey: an IPv4 address as it is, also mapped into IPv6; an IPv6 address by its /64', async (t) => {
  const cases: Array<[string | undefined, string]> = [
    ['127.0.0.2', '127.0.0.2'],
    ['::ffff:127.0.0.2', '127.0.0.2'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::'],
    ['2001:db8:1:2::7', '2001:db8:1:2::'],
    ['2001:DB8:0001:0002:ffff::1', '2001:db8:1:2::'],
    ['2001:db8::1', '2001:db8::'],
    ['::1', '::'],
    ['fe80::1%eth0', 'fe80::'],
    ['64:ff9b::1.2.3.4', '64:ff9b::'],
    [undefined, '']
  ]
  for (const [address, key] of cases) t.equal(addressKey(address), key, String(address))
})

t.test('from half of max open on, idle keep-alive connections are shed sooner; below 40% again, kept as usual', async (t) => {
  const lines: string[] = []
  const log = { info (_: object, msg: string) { lines.push(msg) }, warn (_: object, msg: string) { lines.push(msg) } }
  const refusals = new RefusalLog(log)
  t.teardown(() => refusals.close())
  const server = Object.assign(new EventEmitter(), { keepAliveTimeout: 72_000, maxConnections: 0 }) as unknown as Server
  const shortened: number[] = []
  const idle = { setTimeout (ms: number) { shortened.push(ms) } } as unknown as Socket
  const bounded = new BoundedConnections(server, { max: 10, maxPerAddress: 10, hardCap: 12, names: { max: 'MAX', maxPerAddress: 'PER' } }, true, log, refusals, () => [idle])
  t.equal(server.maxConnections, 12, 'Node drops past the hard cap')
  for (let i = 0; i < 5; i++) t.equal(bounded.admit('10.0.0.1'), undefined)
  t.equal(server.keepAliveTimeout, 72_000, 'half open: kept as usual')
  bounded.admit('10.0.0.1')
  t.equal(server.keepAliveTimeout, 5000, 'more than half: shed after 5 s idle')
  t.strictSame(shortened, [5000], 'those idle already too')
  for (let i = 0; i < 2; i++) bounded.release('10.0.0.1')
  t.equal(server.keepAliveTimeout, 5000, 'at 40% still shedding')
  bounded.release('10.0.0.1')
  t.equal(server.keepAliveTimeout, 72_000, 'below 40%: the keep-alive timeout again')
  t.strictSame(lines, ['many connections open: idle keep-alive connections are closed sooner', 'connections back to normal: idle keep-alive connections kept as usual'])
})

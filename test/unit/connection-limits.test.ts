/** Which client an address counts as for the bound per address, and the fd limit read at start-up. */
import t from 'tap'
import { addressKey } from '../../plugins/app/connection-limits.js'
import { FALLBACK_FD_LIMIT, openFileLimit } from '../../src/fd-limit.js'

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

t.test('openFileLimit reads the soft limit from /proc/self/limits, else assumes the fallback', async (t) => {
  const limits = 'Limit                     Soft Limit           Hard Limit           Units\n' +
    'Max processes             63704                63704                processes\n' +
    'Max open files            20000                524288               files\n'
  t.equal(openFileLimit(limits), 20000, 'the soft limit, not the hard one')
  t.equal(openFileLimit(null), FALLBACK_FD_LIMIT, 'nothing to read: the fallback')
  t.equal(openFileLimit('Max processes 1 1 processes\n'), FALLBACK_FD_LIMIT, 'no such line: the fallback')
})

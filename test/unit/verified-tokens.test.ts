/**
 * The cache of verified tokens (src/verified-tokens.ts): its bound, what it drops first, and
 * what it costs in memory. That it keeps only tokens that passed, and that a cached token still
 * expires: test/app/authenticate.test.ts.
 */
import { randomBytes } from 'node:crypto'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { VERIFIED_TOKENS } from '../../plugins/app/authenticate.js'
import { VerifiedTokens } from '../../src/verified-tokens.js'

/** A token as long as ours (HS256, `exp` alone), flat as the HTTP parser makes header values. */
function tokenLike (): string {
  const header = Buffer.from('{"alg":"HS256","typ":"JWT"}').toString('base64url')
  const payload = Buffer.from(JSON.stringify({ exp: 1_800_000_000 + Math.floor(Math.random() * 1e6) })).toString('base64url')
  return Buffer.from(`${header}.${payload}.${randomBytes(32).toString('base64url')}`).toString('latin1')
}

t.test('keeps at most its capacity, the oldest dropped first, by the exact token', async (t) => {
  const cache = new VerifiedTokens(3)
  const tokens = ['a.b.c', 'a.b.d', 'a.b.e', 'a.b.f']
  tokens.forEach((token, i) => cache.remember(token, 1000 + i))
  t.equal(cache.size, 3, 'three kept')
  t.equal(cache.expiryOf('a.b.c'), undefined, 'the oldest went')
  t.strictSame(tokens.slice(1).map((token) => cache.expiryOf(token)), [1001, 1002, 1003], 'the others kept, each with its expiry')
  t.equal(cache.expiryOf('a.b.d '), undefined, 'another spelling is another token')
  t.equal(cache.expiryOf('A.b.d'), undefined, 'case counts')
})

t.test(`${VERIFIED_TOKENS} tokens cost less than 4 MB`, async (t) => {
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const cache = new VerifiedTokens(VERIFIED_TOKENS)
  gc()
  const before = process.memoryUsage().heapUsed
  for (let i = 0; i < VERIFIED_TOKENS; i++) cache.remember(tokenLike(), 1_800_000_000_000 + i)
  gc()
  const bytes = process.memoryUsage().heapUsed - before
  t.equal(cache.size, VERIFIED_TOKENS)
  t.comment(`${(bytes / VERIFIED_TOKENS).toFixed(0)} bytes a token, ${(bytes / 2 ** 20).toFixed(2)} MiB in all`)
  t.ok(bytes < 4 * 2 ** 20, `${(bytes / 2 ** 20).toFixed(2)} MiB`)
})

/**
 * The attempt limits of POST /token against real service processes (started as `npm start`
 * starts them, so `npm run build` must have run), client addresses from X-Forwarded-For: an
 * address over the per-address limit stays refused for its whole window however many other
 * addresses try meanwhile (the library's LRU forgot it after 5,000); the per-username limit
 * bounds guessing spread over many addresses, alike for a username that does not exist, and
 * never refuses an address that has logged in. How instances share them in Redis:
 * test/app/rate-limit-store.test.ts.
 */
import { randomUUID } from 'node:crypto'
import { Agent } from 'node:http'
import t from 'tap'
import { PASSWORD, testEnv, USERNAME } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { sendRequest } from '../helpers/keep-alive-request.js'
import { startService, type Service } from '../helpers/service.js'

interface Answer { status: number, message: string, retryAfter: string | null }

// Keep-alive connections, as many as the attempts sent at once: thousands of attempts, each on a
// new connection (or through fetch), cost this test process several seconds of CPU more
const agent = new Agent({ keepAlive: true, maxSockets: 20 })
t.teardown(() => agent.destroy())

async function attempt (service: Service, address: string, username: string, password: string): Promise<Answer> {
  const answer = await sendRequest(new URL(service.url), agent, {
    method: 'POST', path: '/token', body: { username, password }, headers: { 'x-forwarded-for': address }
  })
  if (answer.error !== undefined) throw new Error(`POST /token from ${address}: ${answer.error}`)
  const { message } = JSON.parse(answer.body!) as { message: string }
  const retryAfter = answer.headers!['retry-after']
  return { status: answer.status!, message, retryAfter: retryAfter ?? null }
}

const status = (answer: Answer) => `${answer.status} ${answer.message}`
const WRONG = '401 Invalid credentials'
const LIMITED = '429 Too many requests'

t.test('an address over the limit stays refused while 5,100 other addresses try', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, {
    ...testEnv(await createDatabase(t)), TOKEN_RATE_LIMIT: '3', FASTIFY_TRUST_PROXY_ENABLED: 'true'
  })
  const blocked = '198.51.100.7'
  const first = []
  for (let i = 0; i < 4; i++) first.push(status(await attempt(service, blocked, USERNAME, 'wrong')))
  t.strictSame(first, [WRONG, WRONG, WRONG, LIMITED], 'three attempts, then 429')

  // 10.0.0.0 to 10.0.19.235, 20 at a time, each with a username of its own
  const others = Array.from({ length: 5100 }, (_, i) => `10.0.${i >> 8}.${i & 255}`)
  const statuses = new Map<string, number>()
  for (let i = 0; i < others.length; i += 20) {
    const answers = await Promise.all(others.slice(i, i + 20).map((address) => attempt(service, address, randomUUID(), 'wrong')))
    for (const answer of answers) statuses.set(status(answer), (statuses.get(status(answer)) ?? 0) + 1)
  }
  t.strictSame(Object.fromEntries(statuses), { [WRONG]: 5100 }, 'each other address is answered')

  const after = await attempt(service, blocked, USERNAME, PASSWORD)
  t.equal(status(after), LIMITED, 'the blocked address is still refused, even with the right password')
  const retryAfter = Number(after.retryAfter)
  t.ok(retryAfter > 0 && retryAfter <= 60, `until its window ends (Retry-After: ${after.retryAfter})`)
})

/** `n` wrong guesses at `username`, each from a fresh address, over `services` in turn: the statuses. */
async function spread (services: Service[], username: string, n: number, fresh: () => string) {
  const answers: string[] = []
  for (let i = 0; i < n; i++) answers.push(status(await attempt(services[i % services.length]!, fresh(), username, 'wrong')))
  return answers
}

const USERNAME_LIMIT = 4

t.test('the per-username limit: guesses spread over addresses are bounded, a known address still logs in', { skip: STORE_INDEPENDENT }, async (t) => {
  const service = await startService(t, {
    ...testEnv(await createDatabase(t)), TOKEN_USERNAME_RATE_LIMIT: String(USERNAME_LIMIT), FASTIFY_TRUST_PROXY_ENABLED: 'true'
  })
  let next = 1
  const fresh = () => `203.0.113.${next++}`
  const home = '192.0.2.10'
  // Home is not known yet: this login is one of the username's attempts
  t.equal(status(await attempt(service, home, USERNAME, PASSWORD)), '200 Token generated successfully', 'the user logs in from home')

  const guesses = await spread([service], USERNAME, USERNAME_LIMIT, fresh)
  t.strictSame(guesses, [...Array(USERNAME_LIMIT - 1).fill(WRONG), LIMITED], `${USERNAME_LIMIT - 1} more attempts from as many addresses, then 429`)
  const right = await attempt(service, fresh(), USERNAME, PASSWORD)
  t.equal(status(right), LIMITED, 'the right password from another new address is refused too: a 429 tells nothing')
  t.ok(Number(right.retryAfter) > 0 && Number(right.retryAfter) <= 60, `Retry-After: ${right.retryAfter}`)

  const unknown = await spread([service], 'nobody-by-that-name', USERNAME_LIMIT + 1, fresh)
  t.strictSame(unknown, [...Array(USERNAME_LIMIT).fill(WRONG), LIMITED], 'a username that does not exist is limited alike')

  t.equal(status(await attempt(service, home, USERNAME, 'typo')), WRONG, 'from home a wrong password is still checked')
  t.equal(status(await attempt(service, home, USERNAME, PASSWORD)), '200 Token generated successfully', 'and the user logs in')
})

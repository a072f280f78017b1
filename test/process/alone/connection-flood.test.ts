/**
 * One address flooding idle keep-alive connections past the file-descriptor limit, against the
 * real process over real sockets: the flood is bounded (429, closed) while another address is
 * still served within 100 ms. In test/process/alone/ (nothing runs beside it): that bound is the
 * service's latency for one client while another floods it, which other files' CPU on the
 * same machine would blur past the bound. The other bounds on connections:
 * test/process/connection-limits.test.ts.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { testEnv } from '../../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../../helpers/database.js'
import { answered, body, closeAll, hold, type Held } from '../../helpers/held-connections.js'
import { PROJECT_ROOT } from '../../../src/project-root.js'
import { spawnService } from '../../helpers/service.js'
import { quantile, startProber } from '../../helpers/prober.js'
import { sleep, withTimeout } from '../../helpers/wait.js'

/** The file-descriptor limit the flooded service runs with: the flood goes past it. */
const FD_LIMIT = 2000
/** The bound per address the service derives from that limit, by default. */
const PER_ADDRESS = 256

t.test('one address flooding idle connections past the fd limit is bounded and answered 429; another address is served within 100 ms throughout', { skip: STORE_INDEPENDENT }, async (t) => {
  // npm start's own command, under a lower descriptor limit than this machine's 20,000, so that
  // the flood exhausts it without the bounds; the bounds are the defaults derived from it
  const start = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')).scripts.start as string
  const service = await spawnService(t, testEnv(await createDatabase(t)), `ulimit -n ${FD_LIMIT} && ${start}`)
  await service.listening()
  const flood: Held[] = []
  closeAll(t, flood)

  // Another client, from 127.0.0.1, keeps asking while the flood comes in
  const prober = startProber(`${service.url}/health/live`)

  const TOTAL = 2500
  // About 500 connections a second: as fast as this two-core machine can open them and still
  // leave the service a core of its own (faster, the test's client and the service queue for CPU
  // and every process on the machine is slow, with bounds or without)
  for (let opened = 0; opened < TOTAL; opened += 25) {
    flood.push(...await Promise.all(Array.from({ length: 25 }, () => hold(service, '127.0.0.2'))))
    await sleep(50)
  }
  await answered(flood, 30_000)
  // The ones over the bound were closed by the service; give the last few a moment to see it
  const refused = flood.filter((one) => one.status() === 429)
  await withTimeout(Promise.all(refused.map((one) => one.ended)), 10_000, 'the refused connections closed by the service')
  const { latencies, unexpected } = await prober.stop()

  const statuses = new Map<number | null, number>()
  for (const one of flood) statuses.set(one.status(), (statuses.get(one.status()) ?? 0) + 1)
  t.strictSame(Object.fromEntries(statuses), { 200: PER_ADDRESS, 429: TOTAL - PER_ADDRESS }, `the first ${PER_ADDRESS} served, every other one answered 429`)
  const sample = refused[0]!.received()
  t.match(sample, /\r\nretry-after: 5\r\n/i, '429 with Retry-After')
  t.match(sample, /\r\nconnection: close\r\n/i, 'and Connection: close')
  t.strictSame(body(sample), { status: 429, message: 'Too many connections from this address', data: null }, 'in the envelope')
  t.ok(refused.every((one) => body(one.received()) !== null), 'every 429 carries its envelope')
  const served = flood.filter((one) => one.status() === 200)
  t.notOk(served.some((one) => one.socket.readableEnded), 'the served connections are still open')

  const p99 = quantile(latencies, 0.99)
  t.comment(`${latencies.length} requests from 127.0.0.1 during the flood: median ${quantile(latencies, 0.5).toFixed(1)} ms, ` +
    `p99 ${p99.toFixed(1)} ms, worst ${quantile(latencies, 1).toFixed(1)} ms`)
  t.ok(latencies.length >= 20, 'the other address kept asking')
  t.strictSame(unexpected, [], 'and was answered 200 every time')
  t.ok(p99 < 100, `the other address was served within 100 ms (p99 ${p99.toFixed(1)} ms)`)

  const lines = service.stdout.split('\n').filter((line) => line.includes('MAX_CONNECTIONS_PER_ADDRESS'))
  t.equal(lines.length, 1, 'the log says so once for the address, not once per connection')
  t.match(JSON.parse(lines[0] ?? '{}'), { level: 40, address: '127.0.0.2', bound: PER_ADDRESS }, 'a warning naming the address and the bound')
  t.notOk(service.stdout.includes('"statusCode":429'), 'the refused requests have no request line at info')
  t.equal(service.exit, null, 'the service is still running')
})

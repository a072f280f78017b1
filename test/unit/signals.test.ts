/**
 * src/signals.ts against the fastify-cli and close-with-grace installed here. It relies on how
 * they handle signals, which neither documents for this, so an upgrade that changes it fails here
 * first, in words that name the cause. In this one process: the module loaded first, as `fastify
 * start -r` loads it; then an app started through fastify-cli's documented helper (`build`: the
 * same start-up as `fastify start`, ready instead of listening), whose `beginShutdown` the test
 * ends when it wants; signals emitted on `process`; close-with-grace's `process.exit` captured.
 * One scenario: the module's state is the process's. test/process/shutdown-delay.test.ts and
 * signals.test.ts check the same on the real service, signals and npm.
 */
import { build } from 'fastify-cli/helper.js'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import t from 'tap'
// First, so that it sees the instance fastify-cli creates
import { REPEAT_WINDOW_MS } from '../../src/signals.js'
import { sleep, waitUntil } from '../helpers/wait.js'

const SIGNALS = ['SIGINT', 'SIGTERM'] as const

t.test('the first SIGTERM begins the shutdown, its repeat is ignored, then close-with-grace closes and exits 0, and a later one exits 1', async (t) => {
  // The arguments of each call only (a diff of the calls themselves would print `process`)
  const exits = t.capture(process, 'exit', () => undefined as never).calls
  const exitCodes = () => exits.map(({ args }) => args[0])
  const logged = t.capture(console, 'error').calls
  const written = t.capture(process.stderr, 'write', () => true).calls
  const before = SIGNALS.map((signal) => process.listeners(signal).length)

  const shutdowns: string[] = []
  let delayOver = () => {}
  let closed = false
  const plugin = fp(async (fastify: FastifyInstance) => {
    fastify.decorate('beginShutdown', async (signal: string) => {
      shutdowns.push(signal)
      await new Promise<void>((resolve) => { delayOver = resolve })
    })
    fastify.addHook('onClose', async () => { closed = true })
  })
  // A name only: the app is given as a module (`serverModule`), not loaded from a file
  await build(['app.js'], {}, {}, plugin)

  t.strictSame(SIGNALS.map((signal) => process.listeners(signal).length), before.map((count) => count + 1),
    'one listener more for each signal: src/signals.ts\'s, close-with-grace\'s taken over')

  const state = () => ({ shutdowns, closed, exits: exitCodes() })
  process.emit('SIGTERM', 'SIGTERM')
  await sleep(50)
  t.strictSame(state(), { shutdowns: ['SIGTERM'], closed: false, exits: [] }, 'beginShutdown, with the signal; nothing closes during the delay')
  process.emit('SIGTERM', 'SIGTERM')
  await sleep(50)
  t.strictSame(state(), { shutdowns: ['SIGTERM'], closed: false, exits: [] }, 'the repeat within the window changes nothing')

  delayOver()
  await waitUntil(() => exits.length > 0, 5000, 'close-with-grace to exit')
  t.equal(closed, true, 'close-with-grace closed the app once the delay was over')
  t.strictSame(exitCodes(), [0], 'and exited 0')

  await sleep(REPEAT_WINDOW_MS)
  process.emit('SIGINT', 'SIGINT')
  t.strictSame(exitCodes(), [0, 1], 'a later signal, while closing: close-with-grace exits 1')
  t.strictSame(logged.map(({ args }) => args), [['second SIGINT, exiting']], 'and says so')
  t.strictSame(written.map(({ args }) => String(args[0])), [], 'and src/signals.ts found what it expected: it wrote nothing')
})

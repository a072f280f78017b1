/**
 * SIGTERM and SIGINT reach the server whatever they are sent to, through real npm: `npm start`
 * and `npm run dev`, each signalled at npm's pid, at the whole process group (what a terminal's
 * Ctrl-C does: npm, in the group too, then forwards the same signal once more) and at the server
 * process (see CASES). Each time the server closes gracefully exactly once, npm exits 0 and no process of
 * the group is left.
 *
 * `npm start --ignore-scripts` skips only the `prestart` build (npm test built already). The dev
 * script's command after its build runs through `npm exec -c`, which npm runs through the same
 * @npmcli/run-script as a script, forwarding signals alike: a build in this tree would rewrite
 * dist/ under the feet of the other test files. test/process/dev.test.ts runs the
 * whole `npm run dev`, build included, once, in a copy of the tree.
 */
import t from 'tap'
import { testEnv } from '../helper.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { DEV_COMMAND, spawnService, temporaryDirectory } from '../helpers/service.js'
import { waitUntil } from '../helpers/wait.js'

const COMMANDS = {
  'npm start': 'exec npm start --ignore-scripts --silent',
  'npm run dev': `exec npm exec --silent -c '${DEV_COMMAND}'`
}
// Each signal to each process an orchestrator, an operator or a terminal may signal: npm, the
// server, the whole group (systemd and `kill -- -<pgid>` with SIGTERM, Ctrl-C with SIGINT)
const CASES = (['SIGTERM', 'SIGINT'] as const).flatMap((signal) =>
  (['npm', 'process group', 'server'] as const).map((target) => [signal, target] as const))
// Short, but long enough that a duplicate signal (npm's, some milliseconds later) taken for a
// second request would visibly cut it short
const DELAY_MS = 500

t.test('signals stop the service once, gracefully, exit 0, nothing left', { skip: STORE_INDEPENDENT }, async (t) => {
  // Each case has its own processes and database: a few side by side
  t.jobs = 4
  for (const [name, command] of Object.entries(COMMANDS)) {
    for (const [signal, target] of CASES) {
      t.test(`${name}: ${signal} to the ${target}`, async (t) => {
        // Everything configured: npm run dev chooses nothing, and writes nothing but here
        const env = { ...testEnv(await createDatabase(t)), SHUTDOWN_DELAY_MS: String(DELAY_MS), DEV_DATA_DIR: temporaryDirectory(t) }
        const service = await spawnService(t, env, command)
        await service.listening()
        const npm = service.child.pid!
        t.not(service.serverPid, npm, 'npm runs the server as a process of its own')

        process.kill(target === 'npm' ? npm : target === 'process group' ? -npm : service.serverPid, signal)
        t.strictSame(await service.waitForExit(), { code: 0, signal: null }, 'npm exits 0 (as the server did)')
        await waitUntil(() => service.processGroupGone, 2000, 'no process of the group left')

        const lines = service.logLines()
        const begins = lines.filter(({ msg }) => msg.startsWith('shutdown begins'))
        const closing = lines.filter(({ msg }) => msg.startsWith('server closing'))
        t.equal(begins.length, 1, 'shutdown begins once')
        t.equal(closing.length, 1, 'the server closes once')
        const delayed = (closing[0]?.time ?? NaN) - (begins[0]?.time ?? NaN)
        t.ok(delayed >= DELAY_MS - 5, `and only after SHUTDOWN_DELAY_MS (${delayed} ms)`)
        t.notMatch(service.stdout + service.stderr, /second SIG|killed by timeout/, 'never forced')
      })
    }
  }
})

/**
 * A test file that tap ends for overrunning its time (SIGALRM, before its teardowns run) still
 * stops what it started: test/helpers/service.ts kills the process groups of its services as
 * the file's process exits. Here a real test process starts one (a `sleep`, through the same
 * `spawnService`), gets tap's SIGALRM, and the group must be gone.
 */
import { spawn } from 'node:child_process'
import t from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { STORE_INDEPENDENT } from '../helpers/database.js'
import { waitUntil, withTimeout } from '../helpers/wait.js'

// A test file in miniature, run as tap runs one: it starts a process group and never ends,
// and neither do its other teardowns (client-examples' stuck on a socket so, and left four
// services running)
const OVERRUNNING_FILE = `
  import t from 'tap'
  import { spawnService } from '${new URL('../helpers/service.js', import.meta.url).href}'
  t.test('overruns', async (t) => {
    t.teardown(() => new Promise(() => {}))
    const service = await spawnService(t, {}, 'exec sleep 600')
    t.teardown(() => new Promise(() => {}))
    console.log('group ' + service.child.pid)
    await new Promise(() => {})
  })
`

const groupAlive = (group: number) => {
  try {
    process.kill(-group, 0)
    return true
  } catch {
    return false
  }
}

t.test('the services of a file tap ends for its time are killed as its process exits', { skip: STORE_INDEPENDENT }, async (t) => {
  const file = spawn(process.execPath, ['--input-type=module', '-e', OVERRUNNING_FILE], {
    cwd: PROJECT_ROOT, stdio: ['ignore', 'pipe', 'inherit']
  })
  let output = ''
  file.stdout.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
  const exited = new Promise((resolve) => file.once('exit', resolve))
  await waitUntil(() => /group \d+\n/.test(output), 30_000, 'the file to start its process group')
  const group = Number(/group (\d+)/.exec(output)![1])
  t.teardown(() => { if (groupAlive(group)) process.kill(-group, 'SIGKILL') })
  t.ok(groupAlive(group), 'the group runs')

  file.kill('SIGALRM')
  await withTimeout(exited, 10_000, 'the test process to exit')
  await waitUntil(() => !groupAlive(group), 2000, 'the group to be gone')
  t.notOk(groupAlive(group), 'no process of the group is left')
})

/**
 * The README's walk-through, run as printed against `npm run dev` as a newcomer starts it: the
 * two lines `npm run dev` prints once it listens, then the README's commands, in bash, each
 * answer compared with the one the README shows. And its login step when the login fails: one
 * readable line, no stack trace. Real processes, curl and node as the README uses them.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'
import { createDatabase, STORE_INDEPENDENT } from '../helpers/database.js'
import { closedPort, DEV_COMMAND, spawnService, temporaryDirectory } from '../helpers/service.js'

interface Step {
  /** The command, as printed (continuation lines included). */
  command: string
  /** The answer the README shows after it (`# {...}`), `...` standing for anything; none: prints nothing. */
  answer?: string
}

/** The walk-through's commands: the first `sh` block of its section, one step per paragraph. */
function walkThrough (): Step[] {
  const readme = readFileSync(join(PROJECT_ROOT, 'README.md'), 'utf8')
  const start = readme.indexOf('## Walk-through')
  const section = readme.slice(start, readme.indexOf('\n## ', start))
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1]
  if (block === undefined) throw new Error('the walk-through has no sh block')
  return block.split(/\n\s*\n/).map((paragraph) => {
    const lines = paragraph.split('\n').filter((line) => line !== '')
    return {
      command: lines.filter((line) => !line.startsWith('#')).join('\n'),
      answer: lines.find((line) => line.startsWith('# {'))?.slice(2)
    }
  })
}

/** The two lines `npm run dev` printed for the walk-through, as printed. */
function printedLines (stderr: string): string[] {
  const lines = stderr.split('\n')
  const heading = lines.findIndex((line) => line.includes('Walk-through (README.md)'))
  return lines.slice(heading + 1, heading + 3).map((line) => line.trim())
}

const SEPARATOR = '\n--- step ---\n'

/** Runs `lines` in one bash, the output of each step apart: what each printed, and stderr. */
async function bash (lines: string[], steps: Step[]): Promise<{ outputs: string[], stderr: string }> {
  const script = [...lines, ...steps.map((step) => `${step.command}\nprintf '${SEPARATOR.replaceAll('\n', '\\n')}'`)].join('\n')
  const { stdout, stderr } = await promisify(execFile)('bash', ['-c', script], { encoding: 'utf8', timeout: 30_000 })
  return { outputs: stdout.split(SEPARATOR).slice(0, steps.length), stderr }
}

function answerPattern (answer: string): RegExp {
  return new RegExp(`^${answer.split('...').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`)
}

t.test('the walk-through works as printed against npm run dev', { skip: STORE_INDEPENDENT }, async (t) => {
  const steps = walkThrough()
  t.ok(steps.length >= 7, `the walk-through has its steps (${steps.length})`)
  t.match(steps[0]?.command, /^TOKEN=\$\(/, 'it starts with the login')

  // As a newcomer runs it: nothing set but where the data goes, and a port the system picks
  const service = await spawnService(t, { DEV_DATA_DIR: temporaryDirectory(t), HOST: undefined }, DEV_COMMAND)
  await service.listening(60_000)
  t.equal(service.host, '127.0.0.1', 'npm run dev listens on 127.0.0.1 when HOST is not set')
  t.match(service.stderr, /HOST=127\.0\.0\.1 \(this machine only\)/, 'and says so')
  await service.waitFor(() => /LOGIN=/.test(service.stderr), 5000, 'the walk-through lines')
  const printed = printedLines(service.stderr)
  t.strictSame(printed.map((line) => line.split('=')[0]), ['BASE', 'LOGIN'], 'it printed BASE and LOGIN')
  t.equal(printed[0], `BASE=${service.url}`, 'BASE is where it listens')
  await service.waitFor(() => /Console: /.test(service.stderr), 5000, 'the console line')
  const consoleUrl = /Console: open (\S+) in a browser and sign in as dev$/m.exec(service.stderr)?.[1]
  t.equal(consoleUrl, `${service.url}/console/`, 'it says where the console is')
  const page = await fetch(consoleUrl!)
  t.equal(page.status, 200, 'and the console answers there')
  t.match(await page.text(), /<title>Bookkeeping console<\/title>/)

  // The create that is safe to retry, run twice as the README says
  const last = steps.at(-1)!
  const { outputs, stderr } = await bash(printed, [...steps, last])
  t.equal(stderr, '', 'nothing on stderr')
  for (const [index, step] of [...steps, last].entries()) {
    const output = outputs[index]?.trim()
    if (step.answer === undefined) {
      t.equal(output, '', `${step.command.split('\n')[0]}: prints nothing`)
    } else {
      t.match(output, answerPattern(step.answer), `${step.command.split('\n')[0]}: answers as the README shows`)
      // In a terminal the next prompt or answer starts on a line of its own
      t.ok(outputs[index]?.endsWith('}\n'), 'on a line of its own')
    }
  }
})

t.test('the printed LOGIN holds any password; the login step says why it got no token, in one line', { skip: STORE_INDEPENDENT }, async (t) => {
  const [login] = walkThrough()
  // What a shell or JSON would take for its own: quotes of both kinds, a backslash, a dollar
  const password = 'it\'s "mine" \\ $HOME'
  // The tests' database: what is printed does not depend on the store, and an embedded one
  // would cost the creation of a cluster (the walk-through above has its own)
  const service = await spawnService(t, { DEV_DATA_DIR: temporaryDirectory(t), AUTH_PASSWORD: password, DB_URL: await createDatabase(t) }, DEV_COMMAND)
  await service.listening(60_000)
  await service.waitFor(() => /LOGIN=/.test(service.stderr), 5000, 'the walk-through lines')
  const showToken = { command: 'printf "TOKEN=[%s]" "$TOKEN"' }

  const printed = await bash(printedLines(service.stderr), [login!, showToken])
  t.equal(printed.stderr, '', `the printed lines log in with the password ${password}`)
  t.match(printed.outputs[1], /^TOKEN=\[[\w-]+\.[\w-]+\.[\w-]+\]$/, 'and get a token')

  const wrong = await bash([`BASE=${service.url}`, 'LOGIN=\'{"username":"dev","password":"wrong"}\''], [login!, showToken])
  t.equal(wrong.stderr, 'No token: Invalid credentials\n', 'a wrong password: the service\'s message')
  t.equal(wrong.outputs[1], 'TOKEN=[]', 'and no token')

  const nowhere = `http://127.0.0.1:${await closedPort()}`
  const down = await bash([`BASE=${nowhere}`, 'LOGIN=\'{"username":"dev","password":"x"}\''], [login!, showToken])
  t.equal(down.stderr, `No token: no answer from ${nowhere}\n`, 'nothing listening: says where it asked')
  t.equal(down.outputs[1], 'TOKEN=[]', 'and no token')
})

/**
 * `npm test`'s summary (test/run.js), read from a real run of test/fixtures/summary.test.ts: each
 * run's time and outcome, every failure and every skip named by its TypeScript file and its
 * tests, the closing counts, and a non-zero exit when a test failed. And the tiers' runner
 * (test/run-files.js) starting more files while cores are idle, read from runs of
 * test/fixtures/sibling-*.test.ts.
 */
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'

/**
 * `node <script> <args>` in the project's root, with `env` added; without the TAP_* variables
 * tap gave this process, which would make the tap inside report as a child of this one, with no
 * counts of its own.
 */
function runScript (script: string, args: string[], env: Record<string, string>): Promise<{ code: number | null, stdout: string }> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TAP')))
  return new Promise((resolve) => {
    execFile(process.execPath, [script, ...args], { cwd: PROJECT_ROOT, env: { ...inherited, ...env } },
      (err, stdout) => resolve({ code: err === null ? 0 : (err.code as number | null), stdout }))
  })
}

/** `node test/run.js <files>`, as `npm test -- <files>` runs it after its build. */
const runTests = (...files: string[]) => runScript('test/run.js', files, { SUMMARY_FIXTURE: '1' })

/** `node test/run-files.js <args>`, as a tier's script runs it. */
const runFiles = (args: string[], env: Record<string, string>) => runScript('test/run-files.js', args, env)

// The runner's cases wait seconds on purpose: the file's tests run side by side
t.jobs = 4

t.test('the summary names each failure and skip by file and test, with the counts, and the run fails', async (t) => {
  const { code, stdout } = await runTests('test/fixtures/summary.test.ts')
  const summary = stdout.slice(stdout.indexOf('\n=== summary ===\n'))
  t.equal(code, 1, 'a failed test fails the run')
  t.match(stdout, /\nnot ok 1 - \.test-build\/test\/fixtures\/summary\.test\.js # time=[\d.]+ms\n# cpu \d+\.\d\d s \d+\.\d s \.test-build\/test\/fixtures\/summary\.test\.js\n/,
    'the file\'s result, then the CPU time it took')
  t.match(summary, /\ntest:files +\d+\.\d s {2}FAILED \(exit 1\): 1 passed, 1 failed, 1 skipped\n/, 'the run\'s time and outcome')
  t.match(summary, /\nall tiers +\d+\.\d s\n/, 'the total time')
  t.match(summary, '\nFailed (1):\n  test/fixtures/summary.test.ts: fails when asked > a failure on purpose\n', 'the failure, by its TypeScript file')
  t.match(summary, '\nSkipped (1):\n  test/fixtures/summary.test.ts: skips (a reason given)\n', 'the skip, with its reason')
  t.ok(summary.endsWith('\ntests: 1 passed, 1 failed, 1 skipped\n'), `the closing counts last: ${summary.slice(-60)}`)
})

t.test('a file that dies with no test failed is a failure, and the run fails', async (t) => {
  const { code, stdout } = await runTests('test/fixtures/dies.test.ts')
  const summary = stdout.slice(stdout.indexOf('\n=== summary ===\n'))
  t.equal(code, 1, 'a file that died fails the run')
  t.match(stdout, '\n# .test-build/test/fixtures/dies.test.js exited SIGKILL\n', 'how it ended')
  t.match(summary, '\nFailed (1):\n  test/fixtures/dies.test.ts\n', 'the file, by its TypeScript name')
})

const SIBLINGS = ['.test-build/test/fixtures/sibling-1.test.js', '.test-build/test/fixtures/sibling-2.test.js']

/** Runs the two sibling files with `args`; whether each saw the other start while it waited `waitMs`. */
async function runSiblings (t: Test, args: string[], waitMs: number) {
  const dir = mkdtempSync(join(tmpdir(), 'bookkeeping-siblings-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return await runFiles([...args, ...SIBLINGS], { SIBLINGS_DIR: dir, SIBLING_WAIT_MS: String(waitMs) })
}

// Whether the machine has a core idle is the machine's, not the test's: --idle-cores=0 counts
// it as idle whatever it does, more cores than it has as never idle
t.test('--jobs-if-idle starts one more file while the cores it wants are idle', async (t) => {
  const { code, stdout } = await runSiblings(t, ['--jobs=1', '--jobs-if-idle=2', '--idle-cores=0'], 30_000)
  t.equal(code, 0, 'both files saw the other one start while they ran')
  t.match(stdout, '\n# 2 of 2 files passed\n', 'both passed')
})

t.test('--jobs-if-idle starts no more files while fewer cores are idle', async (t) => {
  const { code, stdout } = await runSiblings(t, ['--jobs=1', '--jobs-if-idle=2', `--idle-cores=${cpus().length + 1}`], 5000)
  t.equal(code, 1, 'the first file never saw the second start')
  t.match(stdout, /\nnot ok 1 - \.test-build\/test\/fixtures\/sibling-1\.test\.js /, 'the first file waited in vain')
})

t.test('--jobs alone runs no more files at once', async (t) => {
  const { code, stdout } = await runSiblings(t, ['--jobs=1'], 5000)
  t.equal(code, 1, 'the first file never saw the second start')
  t.match(stdout, /\nnot ok 1 - \.test-build\/test\/fixtures\/sibling-1\.test\.js /, 'the first file waited in vain')
})

t.test('--jobs-if-idle below --jobs is refused', async (t) => {
  const { code, stdout } = await runFiles(['--jobs=2', '--jobs-if-idle=1', ...SIBLINGS], {})
  t.equal(code, 2)
  t.equal(stdout, '', 'nothing run')
})

t.test('a name that is neither a tier nor a test file is refused', async (t) => {
  const { code, stdout } = await runTests('units')
  t.equal(code, 2)
  t.equal(stdout, '', 'nothing run')
})

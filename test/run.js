/**
 * `npm test`: the tiers one after another, each a run of its own folder (test/run-files.js), after one build
 * (`pretest`). `npm test -- app process` runs only those tiers; `npm test -- test/app/books.test.ts`
 * only those files (their JavaScript, test/build.js). At the end, after the TAP: each tier's time
 * and result, every failure and every skip (file, test, reason) read from the TAP, the tests
 * skipped for a missing program (test/helpers/programs.ts) with the command that installs it, and
 * one closing line of the counts. Exits non-zero when a tier failed.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** The tiers, in the order they run: the cheapest, and the first to point at a mistake, first. */
const TIERS = ['unit', 'app', 'process', 'browser']
const TEST_FILE = /^(?:\.\/)?(test\/.+)\.test\.ts$/

const asked = process.argv.slice(2)
const unknown = asked.filter((arg) => !TIERS.includes(arg) && !TEST_FILE.test(arg))
if (unknown.length > 0) {
  console.error(`test/run.js: no tier or test file ${unknown.join(', ')}; the tiers are ${TIERS.join(', ')}, a file is test/<tier>/<name>.test.ts`)
  process.exit(2)
}
const files = asked.flatMap((arg) => TEST_FILE.exec(arg)?.[1] ?? []).map((file) => `.test-build/${file}.test.js`)
const askedTiers = asked.filter((arg) => TIERS.includes(arg))
/** What runs: each tier by its own script, and files named one by one in one run of their own. */
const runs = [
  ...(asked.length > 0 ? TIERS.filter((tier) => askedTiers.includes(tier)) : TIERS)
    .map((tier) => ({ name: tier, command: ['npm', 'run', '--silent', '--ignore-scripts', `test:${tier}`] })),
  ...(files.length > 0 ? [{ name: 'files', command: [process.execPath, 'test/run-files.js', ...files] }] : [])
]

const scratch = mkdtempSync(join(tmpdir(), 'bookkeeping-test-run-'))
const skippedFile = join(scratch, 'skipped')

/**
 * Reads a tier's TAP line by line and keeps its failures and skips, each with the file and the
 * names of the subtests it is in. TAP indents a subtest's lines by four spaces a level, after a
 * `# Subtest: <name>` line (the file's path at the top level); a subtest that failed is reported
 * after its assertions, so a failure inside one already reported is not listed again.
 */
class TapOutcomes {
  failures = []
  skips = []
  #path = []

  line (line) {
    const depth = Math.floor((line.length - line.trimStart().length) / 4)
    // tap ends a subtest's result line with its time, a comment
    const text = line.trim().replace(/ # time=[\d.]+m?s$/, '')
    const subtest = /^# Subtest: (.*)$/.exec(text)
    if (subtest !== null) {
      this.#path = [...this.#path.slice(0, depth), subtest[1]]
      return
    }
    const result = /^(not ok|ok) \d+(?: - (.*?))?(?: # (SKIP|TODO)\S*(?: (.*))?)?$/i.exec(text)
    if (result === null) return
    const [, outcome, name = '', directive, reason = ''] = result
    const where = [...this.#path.slice(0, depth), name].map((part, i) => i === 0 ? sourceOf(part) : part)
    const [file = name, ...test] = where
    if (directive?.toUpperCase() === 'SKIP') {
      this.skips.push({ file, test: test.join(' > '), reason })
    } else if (outcome === 'not ok' && directive === undefined) {
      const inside = (failure) => failure.where.length > where.length && where.every((part, i) => failure.where[i] === part)
      if (!this.failures.some(inside)) this.failures.push({ where, file, test: test.join(' > ') })
    }
  }
}

/** A test file by its TypeScript source: the runner runs and names the JavaScript test/build.js made of it. */
const sourceOf = (file) => file.replace(/^\.test-build\/(.*)\.js$/, '$1.ts')

/** At most this many skips are listed one by one; the rest are counted by reason. */
const SKIPS_LISTED = 20

/**
 * One tier by its own script (`npm run test:<tier>`, without its build: done once already), or
 * the files asked for, its output passed through as it comes; the counts read from it.
 */
function runTier ({ name: tier, command: [program, ...args] }) {
  const started = performance.now()
  const counts = { pass: 0, fail: 0, skip: 0 }
  const outcomes = new TapOutcomes()
  return new Promise((resolve) => {
    const run = spawn(program, args, {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, TEST_SKIPPED_FILE: skippedFile }
    })
    let pending = ''
    run.stdout.on('data', (chunk) => {
      process.stdout.write(chunk)
      pending += chunk.toString('utf8')
      const lines = pending.split('\n')
      pending = lines.pop()
      for (const line of lines) {
        outcomes.line(line)
        // The summary each file's tap prints last, indented as its subtest: `# { total: 12, pass: 11,
        // skip: 1 }` (fail and todo when any); the files' summaries add up
        const summary = /^# \{ total: \d+(.*) \}$/.exec(line.trim())
        if (summary === null) continue
        for (const [, key, value] of summary[1].matchAll(/(\w+): (\d+)/g)) {
          if (key in counts) counts[key] += Number(value)
        }
      }
    })
    run.on('close', (code) => resolve({ tier, code, seconds: (performance.now() - started) / 1000, ...counts, outcomes }))
  })
}

const results = []
for (const run of runs) {
  console.log(`\n=== test:${run.name} ===`)
  results.push(await runTier(run))
}

let skippedPrograms = []
try {
  skippedPrograms = [...new Set(readFileSync(skippedFile, 'utf8').split('\n').filter(Boolean))]
} catch {}
rmSync(scratch, { recursive: true, force: true })

console.log('\n=== summary ===')
for (const { tier, code, seconds, pass, fail, skip } of results) {
  const outcome = code === 0 ? 'passed' : `FAILED (exit ${code})`
  console.log(`test:${tier.padEnd(8)} ${seconds.toFixed(1).padStart(6)} s  ${outcome}: ${pass} passed, ${fail} failed, ${skip} skipped`)
}
const total = results.reduce((sum, { seconds }) => sum + seconds, 0)
console.log(`all tiers ${total.toFixed(1).padStart(9)} s`)
const failures = results.flatMap(({ outcomes }) => outcomes.failures)
if (failures.length > 0) {
  console.log(`\nFailed (${failures.length}):`)
  for (const { file, test } of failures) console.log(`  ${file}${test === '' ? '' : `: ${test}`}`)
}
const skips = results.flatMap(({ outcomes }) => outcomes.skips)
if (skips.length > 0) {
  console.log(`\nSkipped (${skips.length}):`)
  for (const { file, test, reason } of skips.slice(0, SKIPS_LISTED)) console.log(`  ${file}${test === '' ? '' : `: ${test}`} (${reason || 'no reason given'})`)
  const rest = new Map()
  for (const { reason } of skips.slice(SKIPS_LISTED)) rest.set(reason, (rest.get(reason) ?? 0) + 1)
  for (const [reason, count] of rest) console.log(`  and ${count} more: ${reason || 'no reason given'}`)
}
if (skippedPrograms.length > 0) {
  console.log('\nSkipped for a missing program:')
  for (const line of skippedPrograms) console.log(`  ${line}`)
}
const sum = (key) => results.reduce((n, result) => n + result[key], 0)
const failed = results.some(({ code }) => code !== 0)
console.log(`\ntests: ${sum('pass')} passed, ${sum('fail')} failed, ${sum('skip')} skipped`)
process.exitCode = failed ? 1 : 0

/**
 * `npm test`: the tiers one after another, each a tap run of its own folder, after one build
 * (`pretest`). `npm test -- app process` runs only those tiers. At the end: each tier's time and
 * result, the tests skipped for a missing program (test/helpers/programs.ts) with the command
 * that installs it, and one closing line of the counts. Exits non-zero when a tier failed.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** The tiers, in the order they run: the cheapest, and the first to point at a mistake, first. */
const TIERS = ['unit', 'app', 'process', 'browser']

const asked = process.argv.slice(2)
const unknown = asked.filter((tier) => !TIERS.includes(tier))
if (unknown.length > 0) {
  console.error(`test/run.js: no tier ${unknown.join(', ')}; the tiers are ${TIERS.join(', ')}`)
  process.exit(2)
}
const tiers = asked.length > 0 ? TIERS.filter((tier) => asked.includes(tier)) : TIERS

const scratch = mkdtempSync(join(tmpdir(), 'bookkeeping-test-run-'))
const skippedFile = join(scratch, 'skipped')

/**
 * One tier by its own script (`npm run test:<tier>`, without its build: done once already), its
 * output passed through as it comes; tap's counts read from it.
 */
function runTier (tier) {
  const started = performance.now()
  const counts = { pass: 0, fail: 0, skip: 0 }
  return new Promise((resolve) => {
    const tap = spawn('npm', ['run', '--silent', '--ignore-scripts', `test:${tier}`], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, TEST_SKIPPED_FILE: skippedFile }
    })
    let pending = ''
    tap.stdout.on('data', (chunk) => {
      process.stdout.write(chunk)
      pending += chunk.toString('utf8')
      const lines = pending.split('\n')
      pending = lines.pop()
      for (const line of lines) {
        // The summary tap prints last: `# { total: 12, pass: 11, skip: 1 }` (fail and todo when any)
        const summary = /^# \{ total: \d+(.*) \}$/.exec(line.trim())
        if (summary === null) continue
        for (const [, key, value] of summary[1].matchAll(/(\w+): (\d+)/g)) {
          if (key in counts) counts[key] = Number(value)
        }
      }
    })
    tap.on('close', (code) => resolve({ tier, code, seconds: (performance.now() - started) / 1000, ...counts }))
  })
}

const results = []
for (const tier of tiers) {
  console.log(`\n=== test:${tier} ===`)
  results.push(await runTier(tier))
}

let skippedPrograms = []
try {
  skippedPrograms = [...new Set(readFileSync(skippedFile, 'utf8').split('\n').filter(Boolean))]
} catch {}
rmSync(scratch, { recursive: true, force: true })

console.log('\n=== summary ===')
for (const { tier, code, seconds, pass, fail, skip } of results) {
  const outcome = code === 0 ? 'passed' : `FAILED (tap exit ${code})`
  console.log(`test:${tier.padEnd(8)} ${seconds.toFixed(1).padStart(6)} s  ${outcome}: ${pass} passed, ${fail} failed, ${skip} skipped`)
}
const total = results.reduce((sum, { seconds }) => sum + seconds, 0)
console.log(`all tiers ${total.toFixed(1).padStart(9)} s`)
if (skippedPrograms.length > 0) {
  console.log('\nSkipped for a missing program:')
  for (const line of skippedPrograms) console.log(`  ${line}`)
}
const sum = (key) => results.reduce((n, result) => n + result[key], 0)
const failed = results.some(({ code }) => code !== 0)
console.log(`\ntests: ${sum('pass')} passed, ${sum('fail')} failed, ${sum('skip')} skipped`)
process.exitCode = failed ? 1 : 0

/**
 * `node test/run-files.js [--jobs=N] [--jobs-if-idle=M [--idle-cores=C]] <glob>...`: the tiers'
 * runner. Runs each test file that the globs match, in the order the globs come (each glob's
 * files in the order of their paths; a file once), as a plain `node --enable-source-maps <file>`
 * of its own, N at once (up to M while C cores of the machine are idle: see `IDLE_CORES`), and
 * prints each file's TAP as one subtest once the file has ended (files side by side never
 * interleave), followed by a comment of the CPU time it took (`# cpu <s> s <wall> s <file>`: the
 * file's process and the processes it started and waited for, such as its services), then
 * `1..<files>`. Exits non-zero when a file failed: a failed test, an exit other than 0, or a
 * file that overran its time (package.json's `tap.timeout`, which each file's tap enforces
 * itself; this runner ends a file that still runs a minute later).
 *
 * Not tap's own runner: it loads its process-info hook into every test file (a module loader
 * thread that sees and records every module the file loads, for coverage and `tap --changed`,
 * neither of which these tests use, and which no setting turns off), and an app test loads the
 * whole service. docs/development.md, Tests, says what that cost. A single file runs with
 * tap's runner as well: `npx tap <file>`.
 */
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { availableParallelism, cpus } from 'node:os'
import { globSync } from 'glob'

const TIMEOUT_SECONDS = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).tap.timeout
/** After its own timeout, the time a file gets to report it and stop its services. */
const GRACE_MS = 60_000

/**
 * Files that wait on timeouts, services and topologies leave the CPU idle for seconds at a time:
 * with `--jobs-if-idle`, one more file starts whenever, over the last second, at least this many
 * cores of the machine were idle (every process on it counted, PostgreSQL too; `--idle-cores`
 * sets another number) and no file started in the last `IDLE_START_GAP_MS` (a file takes that
 * long to load and start what it tests). Files that ended are not replaced while more than N run.
 */
const IDLE_CORES = 0.8
const IDLE_START_GAP_MS = 3000

const options = process.argv.slice(2).filter((arg) => arg.startsWith('--'))
const patterns = process.argv.slice(2).filter((arg) => !arg.startsWith('--'))
const jobsOption = options.find((arg) => arg.startsWith('--jobs='))
const jobs = jobsOption === undefined ? Math.max(1, availableParallelism() - 1) : Number(jobsOption.slice('--jobs='.length))
const idleOption = options.find((arg) => arg.startsWith('--jobs-if-idle='))
const jobsIfIdle = idleOption === undefined ? jobs : Number(idleOption.slice('--jobs-if-idle='.length))
const coresOption = options.find((arg) => arg.startsWith('--idle-cores='))
const idleCoresWanted = coresOption === undefined ? IDLE_CORES : Number(coresOption.slice('--idle-cores='.length))
const unknown = options.filter((arg) => arg !== jobsOption && arg !== idleOption && arg !== coresOption)
if (unknown.length > 0 || !(jobs >= 1) || !(jobsIfIdle >= jobs) || !(idleCoresWanted >= 0)) {
  console.error('test/run-files.js: usage: node test/run-files.js [--jobs=N] [--jobs-if-idle=M, M >= N [--idle-cores=C]] <glob>... ' +
    `(not ${unknown.join(' ') || [jobsOption, idleOption, coresOption].filter(Boolean).join(' ')})`)
  process.exit(2)
}
const files = [...new Set(patterns.flatMap((pattern) => globSync(pattern).sort()))]
if (files.length === 0) {
  console.error(`test/run-files.js: no test file matches ${patterns.join(' ')}`)
  process.exit(2)
}

/** Runs `file`; resolves with what it printed, how it ended and how long it took. */
function runFile (file) {
  const started = performance.now()
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--enable-source-maps', file], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, TAP_TIMEOUT: String(TIMEOUT_SECONDS) }
    })
    let output = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (chunk) => { output += chunk })
    let cpu = 0
    child.on('exit', () => {
      const now = childrenCpuSeconds()
      cpu = now - reapedCpu
      reapedCpu = now
    })
    let overran = false
    const overrun = setTimeout(() => {
      overran = true
      // SIGTERM first: the file's exit handlers stop the services it started
      child.kill('SIGTERM')
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref()
    }, TIMEOUT_SECONDS * 1000 + GRACE_MS)
    child.on('close', (code, signal) => {
      clearTimeout(overrun)
      resolve({ file, output, code, signal, overran, ms: performance.now() - started, cpu })
    })
  })
}

/**
 * CPU seconds of this runner's children that have ended, and of the processes they waited for
 * (the kernel adds a child's to its parent's when the parent reaps it). Read as each file ends,
 * the difference is that file's; two files that end in the same instant are reaped together, and
 * the first of them is then given both.
 */
function childrenCpuSeconds () {
  const fields = readFileSync('/proc/self/stat', 'utf8').replace(/^.*\) /s, '').split(' ')
  return (Number(fields[13]) + Number(fields[14])) / 100
}

let reapedCpu = childrenCpuSeconds()

/** Whether the file's TAP says a test failed: a `not ok` at its top level. */
const failedInOutput = (output) => /^not ok /m.test(output)

/**
 * The machine's idle and total CPU time so far, in clock ticks (the first line of /proc/stat);
 * undefined where there is no /proc/stat: there the runner keeps to N files.
 */
function machineCpu () {
  let stat
  try {
    stat = readFileSync('/proc/stat', 'utf8')
  } catch {
    return undefined
  }
  const [user, nice, system, idle, iowait, irq, softirq, steal] = stat.split('\n', 1)[0].trim().split(/\s+/).slice(1).map(Number)
  return { idle: idle + iowait, total: user + nice + system + idle + iowait + irq + softirq + steal }
}

let next = 0
let running = 0
let lastStart = 0
let reported = 0
let failed = 0
console.log('TAP version 14')

function report ({ file, output, code, signal, overran, ms, cpu }) {
  const ok = code === 0 && !failedInOutput(output)
  if (!ok) failed++
  const body = output.replace(/^TAP version \d+\n/, '').replace(/\n$/, '').split('\n').map((line) => line === '' ? '' : `    ${line}`).join('\n')
  const why = overran ? `ran past ${TIMEOUT_SECONDS} s and was ended` : code !== 0 ? `exited ${code ?? signal}` : ''
  console.log(`# Subtest: ${file}\n${body}\n${why === '' ? '' : `# ${file} ${why}\n`}${ok ? 'ok' : 'not ok'} ${++reported} - ${file} # time=${ms.toFixed(3)}ms\n# cpu ${cpu.toFixed(2)} s ${(ms / 1000).toFixed(1)} s ${file}\n`)
}

await new Promise((resolve) => {
  /** Starts files until `jobs` run, or none is left. */
  const fill = () => {
    for (let slot = running; slot < jobs && next < files.length; slot++) start()
  }
  const start = () => {
    running++
    lastStart = performance.now()
    runFile(files[next++]).then((ran) => {
      report(ran)
      running--
      fill()
      if (running === 0 && next === files.length) resolve()
    })
  }
  fill()
  let before = machineCpu()
  if (jobsIfIdle === jobs || before === undefined) return
  const watch = setInterval(() => {
    const now = machineCpu()
    const idleCores = (now.idle - before.idle) / (now.total - before.total) * cpus().length
    before = now
    if (next === files.length) clearInterval(watch)
    else if (idleCores >= idleCoresWanted && running < jobsIfIdle && performance.now() - lastStart >= IDLE_START_GAP_MS) start()
  }, 1000)
})
console.log(`1..${files.length}`)
console.log(`# ${files.length - failed} of ${files.length} files passed`)
process.exitCode = failed > 0 ? 1 : 0

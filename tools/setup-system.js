/**
 * `npm run setup:system` (as root; .ci/run calls it): installs the Debian packages of
 * tools/system-packages.json that are missing, the programs the process and browser tests and
 * the topology scripts start. Nothing else installs system packages: a test finds a program
 * missing and skips, naming this command (test/helpers/programs.ts), or fails under CI=true.
 * Plain JavaScript, so it runs before anything is built.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

/**
 * Installed without their recommended packages, which for Chromium alone are about a hundred
 * (systemd, udev, printing, Mesa) that headless tests never use. Its fonts are one of them, and
 * the console's screenshots need them: Chromium draws its default Arial in Liberation Sans.
 */
const NOT_PROGRAMS = ['fonts-liberation']
const packages = [...new Set([
  ...Object.values(JSON.parse(readFileSync(new URL('system-packages.json', import.meta.url), 'utf8'))),
  ...NOT_PROGRAMS
])]

const installed = (pkg) =>
  // dpkg-query's own format field, not a template
  // eslint-disable-next-line no-template-curly-in-string
  spawnSync('dpkg-query', ['-W', '-f', '${Status}', pkg], { encoding: 'utf8' }).stdout?.includes('install ok installed')
const missing = packages.filter((pkg) => !installed(pkg))

if (missing.length === 0) {
  console.log(`setup:system: installed already: ${packages.join(' ')}`)
  process.exit(0)
}
const install = `apt-get install -y -q --no-install-recommends ${missing.join(' ')}`
if (process.getuid?.() !== 0) {
  console.error(`setup:system: missing ${missing.join(' ')}; as root: sudo npm run setup:system (or: sudo apt-get update && sudo ${install})`)
  process.exit(1)
}
console.log(`setup:system: installing ${missing.join(' ')}`)
const run = (command) => spawnSync('sh', ['-c', command], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } }).status
// The package lists of a new machine may be missing or old: refresh them first
process.exit(run(`apt-get update -q && ${install}`) === 0 ? 0 : 1)

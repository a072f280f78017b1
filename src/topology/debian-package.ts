/**
 * The programs of a topology (PgBouncer, HAProxy) come from Debian's packages. A script that needs
 * one installs it when it is missing, as CI installs anything else the tests need.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'

// Daemons live in sbin, which is not on every user's PATH
const SEARCH_PATH = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/bin']

function findCommand (command: string): string | undefined {
  if (path.isAbsolute(command)) return fs.existsSync(command) ? command : undefined
  return SEARCH_PATH.map((dir) => path.join(dir, command)).find((file) => fs.existsSync(file))
}

/**
 * The path of `command` (a name looked up in PATH and sbin, or an absolute path), after
 * installing Debian's `pkg` with apt-get if it is missing. Test files run in parallel: installs
 * take turns on a lock file (flock, from util-linux), and each looks again once it has the lock.
 */
export function ensureCommand (command: string, pkg: string): string {
  const found = findCommand(command)
  if (found !== undefined) return found
  if (process.getuid?.() !== 0) {
    throw new Error(`${command} is not installed: run \`sudo apt-get install ${pkg}\``)
  }
  process.stderr.write(`${command} is missing: installing Debian's ${pkg} with apt-get\n`)
  const install = `command -v ${command} >/dev/null || PATH="$PATH:/usr/sbin" command -v ${command} >/dev/null || ` +
    `{ apt-get install -y -q ${pkg} || { apt-get update -q && apt-get install -y -q ${pkg}; }; }`
  const result = spawnSync('flock', ['/tmp/bookkeeping-apt.lock', 'sh', '-c', install], {
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    stdio: ['ignore', 'ignore', 'inherit']
  })
  const installed = findCommand(command)
  if (result.status !== 0 || installed === undefined) {
    throw new Error(`could not install Debian's ${pkg} (apt-get exit ${result.status ?? result.signal})`)
  }
  return installed
}

/**
 * The programs the topologies start (PgBouncer, HAProxy, Patroni, etcd, PostgreSQL's own
 * binaries) and the browser tests drive (Chromium) come from Debian's packages, listed in
 * tools/system-packages.json and installed by `npm run setup:system`. Nothing here installs:
 * a missing program is an error that says how to install it.
 */
import fs from 'node:fs'
import path from 'node:path'
import { PROJECT_ROOT } from '../src/project-root.js'

/** Program (a name looked up in PATH and sbin, or an absolute path) to its Debian package. */
export const SYSTEM_PACKAGES: Record<string, string> =
  JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'tools', 'system-packages.json'), 'utf8'))

// Daemons live in sbin, which is not on every user's PATH
const SEARCH_PATH = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/bin']

/** The path of `program`, or undefined when it is not installed. */
export function locateProgram (program: string): string | undefined {
  if (path.isAbsolute(program)) return fs.existsSync(program) ? program : undefined
  return SEARCH_PATH.map((dir) => path.join(dir, program)).find((file) => fs.existsSync(file))
}

/** What to run to install `program`. */
export function installHint (program: string): string {
  const pkg = SYSTEM_PACKAGES[program]
  if (pkg === undefined) throw new Error(`${program} is not in tools/system-packages.json`)
  return `npm run setup:system (as root), or: sudo apt-get install ${pkg}`
}

/** The path of `program`; an error naming the install command when it is missing. */
export function findProgram (program: string): string {
  const found = locateProgram(program)
  if (found === undefined) throw new Error(`${program} is not installed; install it with ${installHint(program)}`)
  return found
}

/**
 * Tests that start programs from Debian's packages (tools/system-packages.json, installed by
 * `npm run setup:system`). Where one is missing the test is skipped with a reason that names it
 * and the command that installs it, and the reason joins the list `npm test` prints at the end
 * (test/run.js); under CI=true nothing is skipped, so the missing program fails the test.
 */
import { appendFileSync } from 'node:fs'
import { installHint, locateProgram } from '../../tools/system-programs.js'

/** For `t.test(name, { skip: needsPrograms('haproxy', 'pgbouncer') }, ...)`. */
export function needsPrograms (...programs: string[]): string | false {
  if (process.env.CI === 'true') return false
  const missing = programs.filter((program) => locateProgram(program) === undefined)
  if (missing.length === 0) return false
  const reason = missing.map((program) => `needs ${program}, not installed: ${installHint(program)}`).join('; ')
  if (process.env.TEST_SKIPPED_FILE) appendFileSync(process.env.TEST_SKIPPED_FILE, `${reason}\n`)
  return reason
}

/** PostgreSQL 15's server program, for the tests that start servers of their own. */
export const PG_SERVER = '/usr/lib/postgresql/15/bin/postgres'

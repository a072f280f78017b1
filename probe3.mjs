import { execSync } from 'node:child_process'
const { createDatabaseWithBooks } = await import('./.test-build/test/helpers/database.js')
const pg = () => Number(execSync('/tmp/pgcpu.sh').toString())
const fns = []
const t = { teardown (fn) { fns.push(fn) } }
for (const n of [0, 200000]) {
  const a = pg(), t0 = performance.now()
  await createDatabaseWithBooks(t, n)
  console.log(n, 'pg cpu ms', pg() - a, 'wall', (performance.now() - t0).toFixed(0))
}
for (const fn of fns.reverse()) await fn()
process.exit(0)

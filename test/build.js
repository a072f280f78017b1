/**
 * The TypeScript the tests run, transpiled once into `.test-build/` (one .js per .ts, at the same
 * path under it, with a source map), so that each test process starts as plain Node.js: a
 * TypeScript loader in every test process (tsx) costs each one CPU to start, and more for every
 * module it loads through the loader's thread, which adds up over the hundreds of processes of
 * `npm test` (docs/performance.md, Test and CI times).
 * esbuild only strips the types, each file alone: nothing is bundled or minified;
 * `npm run typecheck` checks them. Run by every test script's `pre` script, and by `npm test`'s
 * `pretest` once for all tiers; the old output is removed first, so a deleted test is not run.
 */
import { readdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { build } from 'esbuild'

const ROOT = join(import.meta.dirname, '..')
const OUT_DIR = '.test-build'
/** Every folder whose TypeScript a test imports: the service, the tests, the tools, the console and the typed example. */
const FOLDERS = ['src', 'plugins', 'routes', 'test', 'tools', 'console', 'docs/examples']
const SKIPPED = new Set(['node_modules', 'dist'])

function typeScriptFiles (folder) {
  return readdirSync(join(ROOT, folder), { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name)
    if (entry.isDirectory()) return SKIPPED.has(entry.name) ? [] : typeScriptFiles(path)
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : []
  })
}

rmSync(join(ROOT, OUT_DIR), { recursive: true, force: true })
await build({
  absWorkingDir: ROOT,
  entryPoints: FOLDERS.flatMap(typeScriptFiles),
  outdir: OUT_DIR,
  outbase: '.',
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: 'linked',
  logLevel: 'warning'
})

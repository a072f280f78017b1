import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'

/** The nearest directory above `dir` that holds a package.json. */
function nearestPackage (dir: string): string {
  if (existsSync(join(dir, 'package.json'))) return dir
  /* c8 ignore next */
  if (dirname(dir) === dir) throw new Error(`no package.json above ${import.meta.dirname}`)
  return nearestPackage(dirname(dir))
}

/** The project's directory, whether this code runs as TypeScript (the tests) or from dist/. */
export const PROJECT_ROOT = nearestPackage(import.meta.dirname)

/**
 * The layout map is one README.md per top-level folder, and this test keeps each one true: its
 * `## Entries` section lists the folder's entries, one bullet each, "- `name`: what it is"
 * (`name/` for a subfolder, whose files are not listed), and nothing else. Compared both ways
 * with what git sees in the folder (tracked files and new ones it does not ignore, so build
 * output such as dist/ and tools/dist/ is left out), so an entry added, removed or renamed
 * without its line fails here. A path a README names inside one of its subfolders
 * (`app/http-edge.ts`) must exist too.
 */
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'

const ENTRY = /^- `([^`/]+\/?)`: \S/

/** Every file git tracks or would track (not ignored), as paths from the project root. */
function projectFiles (): string[] | undefined {
  let listing: string
  try {
    listing = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: PROJECT_ROOT, encoding: 'utf8' })
  } catch {
    return undefined
  }
  // A file deleted but not yet removed from the index is gone all the same
  return listing.split('\0').filter((file) => file !== '' && existsSync(join(PROJECT_ROOT, file)))
}

/** What a folder holds: its files by name, its subfolders as `name/`. */
function entriesOf (folder: string, files: string[]): string[] {
  const entries = new Set<string>()
  for (const file of files) {
    if (!file.startsWith(`${folder}/`)) continue
    const [first, ...rest] = file.slice(folder.length + 1).split('/')
    entries.add(rest.length > 0 ? `${first}/` : first!)
  }
  entries.delete('README.md')
  return [...entries].sort()
}

/** The entries a README lists, and the lines of its Entries section that are not an entry. */
function listedIn (readme: string): { listed: string[], malformed: string[] } {
  const lines = readme.split('\n')
  const start = lines.indexOf('## Entries')
  if (start === -1) return { listed: [], malformed: ['no "## Entries" section'] }
  const end = lines.findIndex((line, index) => index > start && line.startsWith('## '))
  const section = lines.slice(start + 1, end === -1 ? undefined : end).filter((line) => line.trim() !== '')
  return {
    listed: section.flatMap((line) => ENTRY.exec(line)?.[1] ?? []),
    malformed: section.filter((line) => !ENTRY.test(line))
  }
}

const files = projectFiles()
const folders = [...new Set((files ?? []).filter((file) => file.includes('/')).map((file) => file.split('/')[0]!))].sort()

t.test('every top-level folder has a README whose entries are what the folder holds', { skip: files === undefined && 'not a git checkout: nothing to compare with' }, async (t) => {
  t.ok(folders.length >= 8, `the top-level folders were found (${folders.join(', ')})`)
  for (const folder of folders) {
    t.test(`${folder}/README.md`, async (t) => {
      const path = join(PROJECT_ROOT, folder, 'README.md')
      if (!t.ok(existsSync(path), `${folder}/ has a README.md`)) return
      const readme = readFileSync(path, 'utf8')
      const { listed, malformed } = listedIn(readme)
      t.strictSame(malformed, [], 'every line of its Entries section is "- `name`: what it is"')
      const actual = entriesOf(folder, files!)
      const duplicated = listed.filter((name, index) => listed.indexOf(name) !== index)
      t.strictSame(duplicated, [], 'no entry is listed twice')
      t.strictSame(listed.filter((name) => !actual.includes(name)), [], 'every entry it lists is in the folder')
      t.strictSame(actual.filter((name) => !listed.includes(name)), [], 'every entry of the folder is listed')

      // Paths inside a listed subfolder, wherever the README names them
      const subfolders = listed.filter((name) => name.endsWith('/'))
      const named = [...readme.matchAll(/`([\w.-]+\/[\w./-]*)`/g)].map((match) => match[1]!)
        .filter((name) => subfolders.some((subfolder) => name.startsWith(subfolder)))
      t.strictSame(named.filter((name) => !existsSync(join(PROJECT_ROOT, folder, name))), [], 'every path it names in a subfolder exists')
    })
  }
})

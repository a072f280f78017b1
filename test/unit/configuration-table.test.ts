/**
 * The configuration table of docs/configuration.md restates src/config.ts for a reader; this test
 * holds the two equal. Every variable of the schema has one row and every row names one of the schema's
 * variables; `Required` is `yes` exactly for those without a default that must be set; the
 * first value in backticks under `Default` is the schema's default (`empty` for an empty one,
 * `unset` for an optional variable without one); a range `N-M` in `Meaning` is the schema's
 * minimum and maximum; the log levels are the schema's.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { ConfigSchema, LOG_LEVELS, connectionBounds } from '../../src/config.js'
import { PROJECT_ROOT } from '../../src/project-root.js'

/**
 * The file-descriptor limit of the table's examples: the defaults that depend on the machine
 * are shown as they are there.
 */
const EXAMPLE_FILE_LIMIT = 20_000

interface Row { variable: string, cells: number, required: string, defaultCell: string, meaning: string }

/** The rows of the table in the section of docs/configuration.md on the service's variables. */
function tableRows (): Row[] {
  const doc = readFileSync(join(PROJECT_ROOT, 'docs', 'configuration.md'), 'utf8')
  const start = doc.indexOf("\n## The service's variables\n")
  if (start === -1) throw new Error("docs/configuration.md has no section on the service's variables")
  const end = doc.indexOf('\n## ', start + 1)
  const section = doc.slice(start, end === -1 ? undefined : end)
  return section.split('\n').flatMap((line) => {
    const cells = /^\| `([A-Z_]+)` \|(.*)\|$/.exec(line)
    if (cells === null) return []
    const rest = cells[2]!.split('|').map((cell) => cell.trim())
    const [required = '', defaultCell = '', meaning = ''] = rest
    return [{ variable: cells[1]!, cells: rest.length, required, defaultCell, meaning }]
  })
}

type Property = { default?: unknown, minimum?: number, maximum?: number }
const properties = ConfigSchema.properties as Record<string, Property>
const required = new Set<string>(ConfigSchema.required ?? [])

/** The default as the table shows it: the schema's, or the example machine's where it depends on the machine. */
function shownDefault (variable: string): unknown {
  const bounds = connectionBounds(EXAMPLE_FILE_LIMIT)
  if (variable === 'MAX_CONNECTIONS') return bounds.maxConnections
  if (variable === 'MAX_CONNECTIONS_PER_ADDRESS') return bounds.maxConnectionsPerAddress
  return properties[variable]?.default
}

const rows = tableRows()

t.test('one row per variable of the schema, and none for anything else', async (t) => {
  const listed = rows.map((row) => row.variable)
  t.strictSame([...listed].sort(), Object.keys(properties).sort(), 'the variables of the table are those of the schema')
  t.equal(new Set(listed).size, listed.length, 'no variable has two rows')
  t.strictSame(rows.filter((row) => row.cells !== 3).map((row) => row.variable), [], 'each row has its four cells (no | inside one)')
})

t.test('each row says what the schema says', async (t) => {
  for (const { variable, required: requiredCell, defaultCell, meaning } of rows) {
    const property = properties[variable]
    if (property === undefined) continue
    const mustBeSet = required.has(variable) && property.default === undefined
    t.equal(requiredCell, mustBeSet ? 'yes' : 'no', `${variable}: Required`)

    const value = shownDefault(variable)
    if (mustBeSet) t.equal(defaultCell, '', `${variable}: no default`)
    else if (value === undefined) t.match(defaultCell, /^unset\b/, `${variable}: unset by default`)
    else if (value === '') t.match(defaultCell, /^empty\b/, `${variable}: empty by default`)
    else t.equal(/`([^`]*)`/.exec(defaultCell)?.[1], String(value), `${variable}: the default`)

    for (const [, low, high] of meaning.matchAll(/\((\d+)-(\d+)\b/g)) {
      t.strictSame([Number(low), Number(high)], [property.minimum, property.maximum], `${variable}: the range`)
    }
  }
  const levels = rows.find((row) => row.variable === 'LOG_LEVEL')?.meaning ?? ''
  t.strictSame([...levels.matchAll(/`(\w+)`/g)].map((match) => match[1]), [...LOG_LEVELS], 'LOG_LEVEL: the levels')
})

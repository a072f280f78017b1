/**
 * Each plugin's first comment says what it adds to the instance (plugins/README.md), and this
 * test keeps it so: every file of plugins/external and plugins/app starts with a JSDoc block that
 * opens with "Adds" and names each decorator the file makes (`fastify.x` for `decorate('x'`,
 * `request.x` for `decorateRequest`, `reply.x` for `decorateReply`) and each hook it adds
 * (`onSend`, ...). What the code adds is read from its calls, so a decorator or hook added
 * without its words in the comment fails here. And the external wrappers are a layer below
 * ours: they import nothing from plugins/app.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PROJECT_ROOT } from '../../src/project-root.js'

const LAYERS = ['external', 'app'] as const

/** A block comment at the very start of the file, before the imports. */
const LEADING_COMMENT = /^\/\*\*([\s\S]*?)\*\//
/** `decorate('name'`, `decorateRequest('name'`, `decorateReply('name'`, on any instance. */
const DECORATE = /\.decorate(Request|Reply)?\(\s*(['"`])(\w+)\2/g
/** `addHook('onSend'` and the like, on any instance. */
const ADD_HOOK = /\.addHook\(\s*(['"`])(\w+)\1/g
/** A module specifier in plugins/app, as an external wrapper would write it. */
const FROM_APP = /(?:\bfrom\s*|\bimport\s*\(\s*)['"`]\.\.\/app\//

const OWNER = { '': 'fastify', Request: 'request', Reply: 'reply' } as const

/** The comment's text without the ` * ` that starts each line. */
function textOf (comment: string): string {
  return comment.replace(/^[ \t]*\*[ \t]?/gm, '').trim()
}

/** Whether `text` names `word` (`fastify.booksRepository`, `onSend`) as a whole, not inside a longer name. */
function names (text: string, word: string): boolean {
  return new RegExp(`(?<![\\w.])${word.replaceAll('.', '\\.')}(?![\\w])`).test(text)
}

let decorators = 0
let hooks = 0

for (const layer of LAYERS) {
  const folder = join(PROJECT_ROOT, 'plugins', layer)
  const files = readdirSync(folder).filter((file) => file.endsWith('.ts')).sort()

  t.test(`plugins/${layer}/`, async (t) => {
    t.ok(files.length > 0, `plugins/${layer} has plugins (${files.join(', ')})`)
    for (const file of files) {
      t.test(file, async (t) => {
        const source = readFileSync(join(folder, file), 'utf8')
        const leading = LEADING_COMMENT.exec(source)
        if (!t.ok(leading, 'the file starts with a JSDoc block, before the imports')) return
        const comment = textOf(leading![1]!)
        t.match(comment, /^Adds\b/, 'the comment says first what the plugin adds ("Adds ...")')

        const decorated = [...source.matchAll(DECORATE)].map(([, kind = '', , name]) => `${OWNER[kind as keyof typeof OWNER]}.${name}`)
        decorators += decorated.length
        t.strictSame(decorated.filter((name) => !names(comment, name)), [], 'the comment names every decorator the file makes')

        const added = [...new Set([...source.matchAll(ADD_HOOK)].map(([, , hook]) => hook!))]
        hooks += added.length
        t.strictSame(added.filter((hook) => !names(comment, hook)), [], 'the comment names every hook the file adds')

        if (layer === 'external') {
          const imports = source.split('\n').filter((line) => FROM_APP.test(line))
          t.strictSame(imports, [], 'an external wrapper imports nothing from plugins/app')
        }
      })
    }
  })
}

// Patterns that no longer match anything would pass every file above without checking it
t.test('the patterns find decorators and hooks', async (t) => {
  t.ok(decorators > 0, `decorate calls found: ${decorators}`)
  t.ok(hooks > 0, `addHook calls found: ${hooks}`)
})

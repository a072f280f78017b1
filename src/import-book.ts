/**
 * One book of an import, checked exactly as POST /book checks its body: the same TypeBox schema
 * compiled by Ajv with the options Fastify compiles it with in this app (@fastify/ajv-compiler's
 * defaults, then `coerceTypes: false` from the app's server options), and the same refusals
 * json-body makes before validation (a `__proto__` or `constructor.prototype` key, a string with
 * a lone surrogate). A refusal is one short text naming the field: `year: must be an integer`.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import { isWellFormedJson } from './body-text.js'
import { BookCreateSchema, type BookCreate } from './schemas/book.js'

let compiled: ValidateFunction<BookCreate> | undefined

/**
 * @fastify/ajv-compiler's defaults with the app's `coerceTypes: false`; a unit test holds them
 * equal to what Fastify does with the app's options. The compiler's `uriResolver` and formats
 * change nothing for this schema, which has no `$ref` and no `format`. Compiled on the first
 * import: an instance that never imports does not pay for it at every start.
 */
const validateBook = () => (compiled ??= new Ajv({
  coerceTypes: false,
  useDefaults: true,
  removeAdditional: true,
  addUsedSchema: false,
  allErrors: false
}).compile(BookCreateSchema))

export type BookCheck = { book: BookCreate, error?: undefined } | { book?: undefined, error: string }

/** Only a text holding one of these can hold a key secure-json-parse refuses. */
const POISON_WORDS = /__proto__|constructor/

/** Only a text holding one of these escapes can decode to a lone surrogate (its bytes are UTF-8). */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/

/**
 * A value parsed from JSON text, checked as POST /book checks its body. `text` is the JSON text
 * it was parsed from, or undefined when it is not known (then the searches always run).
 */
export function checkJsonBook (value: unknown, text?: string): BookCheck {
  if ((text === undefined || POISON_WORDS.test(text)) && hasPoisonedKey(value)) {
    return { error: 'a key __proto__ or constructor.prototype is not allowed' }
  }
  if ((text === undefined || SURROGATE_ESCAPE.test(text)) && !isWellFormedJson(value)) {
    return { error: 'a string is not well-formed Unicode (a lone surrogate)' }
  }
  return checkBook(value)
}

/** A value checked against the schema of POST /book's body; only title, author and year are kept. */
export function checkBook (value: unknown): BookCheck {
  const validate = validateBook()
  if (validate(value)) return { book: { title: value.title, author: value.author, year: value.year } }
  return { error: problemText(validate.errors![0]!, value) }
}

const ARTICLES: Record<string, string> = { integer: 'an integer', object: 'an object', array: 'an array' }

/** Ajv's first error as a short text for a person: the field, then what it must be. */
function problemText (error: ErrorObject, value: unknown): string {
  const field = error.instancePath.slice(1).replaceAll('/', '.')
  const prefix = field === '' ? '' : `${field}: `
  const params = error.params as Record<string, unknown>
  switch (error.keyword) {
    case 'required':
      return `${String(params.missingProperty)}: is required`
    case 'type': {
      const type = String(params.type)
      return `${prefix}must be ${ARTICLES[type] ?? `a ${type}`}`
    }
    case 'minLength':
    case 'maxLength': {
      const limit = Number(params.limit)
      const bound = error.keyword === 'minLength' ? 'at least' : 'at most'
      return `${prefix}must have ${bound} ${limit} character${limit === 1 ? '' : 's'}`
    }
    case 'minimum':
      return `${prefix}must be at least ${String(params.limit)}`
    case 'maximum':
      return `${prefix}must be at most ${String(params.limit)}`
    case 'pattern': {
      const text = (value as Record<string, unknown>)[field]
      return `${prefix}${typeof text === 'string' && text.includes('\u0000') ? 'must not hold a NUL character' : 'must not be blank'}`
    }
    /* c8 ignore next 2 */
    default:
      return `${prefix}${error.message ?? 'is not valid'}`
  }
}

/**
 * What secure-json-parse (Fastify's JSON parser, set to refuse both) refuses: an own key
 * `__proto__` anywhere, or a key `constructor` whose object has a key `prototype`. No recursion:
 * a value may nest deep.
 */
function hasPoisonedKey (value: unknown): boolean {
  const pending: unknown[] = [value]
  while (pending.length > 0) {
    const next = pending.pop()
    if (typeof next !== 'object' || next === null) continue
    if (Array.isArray(next)) {
      for (const item of next) pending.push(item)
      continue
    }
    if (Object.hasOwn(next, '__proto__')) return true
    const constructor = Object.hasOwn(next, 'constructor') ? (next as Record<string, unknown>).constructor : undefined
    if (typeof constructor === 'object' && constructor !== null && Object.hasOwn(constructor, 'prototype')) return true
    for (const item of Object.values(next)) pending.push(item)
  }
  return false
}

/**
 * An import body as JSON: one array of book objects, tokenized by stream-json's parser as the
 * body arrives and each element assembled alone (stream-json's Assembler), so that only one
 * book is ever held. Each element is a problem or a book, at the line it starts on; the text is
 * given to the tokenizer line by line for that (a JSON lexeme never spans lines: a string
 * cannot hold a raw line feed).
 *
 * Fatal: a body that is not one array, broken JSON anywhere (the reading cannot resynchronise),
 * an element over ELEMENT_MAX_CHARACTERS (its text is not held to skip it), bytes that are not
 * UTF-8. A UTF-8 BOM at the start is dropped, as POST /book drops it.
 */
import { Assembler } from 'stream-json/assembler.js'
import { jsonParser, type Token } from 'stream-json/parser.js'
import { checkJsonBook } from './import-book.js'
import type { ImportItem, ImportProblem } from './import-items.js'
import { Utf8Bytes } from './import-utf8.js'

/** The largest element, in characters of its text, as POST /book's body limit (64 KiB) bounds one book. */
const ELEMENT_MAX_CHARACTERS = 64 * 1024

/**
 * The most text of one line given to the tokenizer at once. The tokenizer gives nothing of a
 * text it throws on: the books of that piece before a syntax error are not given. The pieces
 * are cut by the text alone (its lines, and this length from each line's start), never by
 * where the body's chunks end, so that what is given is the same for any chunks.
 */
const PIECE_CHARACTERS = 4096

/** What the tokenizer function gives and is told: stream-chain's markers, global symbols by design. */
const NONE = Symbol.for('object-stream.none')
const MANY = Symbol.for('object-stream.many')

/** The items of a JSON body, in batches: those each chunk completes. */
export async function * readJson (body: AsyncIterable<Buffer>): AsyncGenerator<ImportItem[]> {
  const utf8 = new Utf8Bytes()
  const elements = new JsonElements()
  for await (const chunk of body) {
    const { bytes, bad } = utf8.take(chunk)
    const items = elements.read(bytes.toString('utf8'))
    if (bad && !elements.ended) items.push(fatalItem({ line: utf8.line, book: null, error: 'bytes that are not UTF-8' }))
    yield items
    if (bad || elements.ended) return
  }
  if (utf8.cutOff()) yield [fatalItem({ line: utf8.line, book: null, error: 'bytes that are not UTF-8 (a character cut off)' })]
  else yield elements.end()
}

function fatalItem (problem: ImportProblem): ImportItem {
  return { kind: 'problem', problem, fatal: true }
}

/** The tokens of the body's text, line by line, made into the array's elements. */
class JsonElements {
  /** Whether a fatal problem was given: nothing more is read. */
  ended = false
  readonly #tokenize = jsonParser()
  readonly #assembler = new Assembler()
  #line = 1
  #index = 0
  #atStart = true
  /** Whether any text but whitespace was given to the tokenizer. */
  #sawText = false
  /** The text of the current line not yet given to the tokenizer. */
  #pending = ''
  /** 0 before the array, 1 inside it between elements, more inside an element. */
  #depth = 0
  #arrayEnded = false
  /** The element being read: its line, and its size so far (characters of its text, about). */
  #elementLine = 0
  #elementSize = 0

  read (text: string): ImportItem[] {
    const items: ImportItem[] = []
    if (this.#atStart && text.length > 0) {
      this.#atStart = false
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    let pending = this.#pending + text
    let lf = pending.indexOf('\n')
    while (lf !== -1 && !this.ended) {
      this.#feedLine(pending.slice(0, lf + 1), items)
      this.#line++
      pending = pending.slice(lf + 1)
      lf = pending.indexOf('\n')
    }
    while (pending.length >= PIECE_CHARACTERS && !this.ended) {
      const cut = isHighSurrogate(pending.charCodeAt(PIECE_CHARACTERS - 1)) ? PIECE_CHARACTERS - 1 : PIECE_CHARACTERS
      this.#feed(pending.slice(0, cut), items)
      pending = pending.slice(cut)
    }
    this.#pending = pending
    return items
  }

  end (): ImportItem[] {
    const items: ImportItem[] = []
    this.#feedLine(this.#pending, items)
    this.#pending = ''
    if (!this.ended) this.#feed(NONE, items)
    if (!this.ended && !this.#arrayEnded) items.push(this.#fatal('not a JSON array'))
    return items
  }

  /** The rest of a line, the pieces of it already fed aside. */
  #feedLine (text: string, items: ImportItem[]): void {
    if (text.length > 0 && !this.ended) this.#feed(text, items)
  }

  #feed (text: string | typeof NONE, items: ImportItem[]): void {
    if (!this.#sawText && text !== NONE) this.#sawText = text.trim() !== ''
    let tokens: Token[]
    try {
      tokens = manyValues((this.#tokenize as (text: unknown) => unknown)(text))
    } catch {
      // The tokenizer's texts name its states; the line is what a person can use
      items.push(text === NONE && !this.#sawText ? this.#fatal('not a JSON array (the body is empty)', 1) : this.#fatal('broken JSON'))
      return
    }
    for (const token of tokens) {
      const item = this.#token(token)
      if (item !== undefined) items.push(item)
      if (this.ended) return
    }
  }

  /** One token: the item of the element it ends, if it ends one. */
  #token (token: Token): ImportItem | undefined {
    if (this.#depth === 0) {
      if (token.name === 'startArray') this.#depth = 1
      else return this.#fatal('not a JSON array')
      return undefined
    }
    if (this.#depth === 1) {
      if (token.name === 'endArray') {
        this.#depth = 0
        this.#arrayEnded = true
        return undefined
      }
      if (this.#elementSize === 0) this.#elementLine = this.#line
    }
    this.#elementSize += 'value' in token && typeof token.value === 'string' && isChunk(token) ? token.value.length : 1
    if (this.#elementSize > ELEMENT_MAX_CHARACTERS) return this.#fatal(`a book over ${ELEMENT_MAX_CHARACTERS / 1024} KiB`, this.#elementLine)
    if (token.name === 'startObject' || token.name === 'startArray') this.#depth++
    else if (token.name === 'endObject' || token.name === 'endArray') this.#depth--
    this.#assembler.consume(token)
    if (this.#depth !== 1 || !this.#assembler.done || !isValueEnd(token)) return undefined
    const index = ++this.#index
    const line = this.#elementLine
    this.#elementSize = 0
    const check = checkJsonBook(this.#assembler.current)
    if (check.error !== undefined) return { kind: 'problem', problem: { line, book: index, error: check.error }, fatal: false }
    return { kind: 'book', line, index, book: check.book }
  }

  #fatal (error: string, line = this.#line): ImportItem {
    this.ended = true
    return fatalItem({ line, book: null, error })
  }
}

function isHighSurrogate (code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff
}

function isChunk (token: Token): boolean {
  return token.name === 'stringChunk' || token.name === 'numberChunk'
}

/** Whether the token ends a value: the Assembler is done with an element only at one of these. */
function isValueEnd (token: Token): boolean {
  switch (token.name) {
    case 'endObject': case 'endArray': case 'stringValue': case 'numberValue':
    case 'nullValue': case 'trueValue': case 'falseValue':
      return true
    default:
      return false
  }
}

/** The tokens of one call of the tokenizer: several (stream-chain's `many`) or none. */
function manyValues (result: unknown): Token[] {
  if (result === NONE) return []
  if (typeof result === 'object' && result !== null && MANY in result) return (result as unknown as { values: Token[] }).values
  return [result as Token]
}

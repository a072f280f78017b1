/**
 * Reads the books of a `GET /books` answer while it arrives, so the first rows show before the
 * whole list has come: the answer is one envelope, `{"status":200,"message":"...","data":[...]}`,
 * which the service streams page by page. Each `push` scans the new text once, keeping only the
 * end of an object cut in the middle, and parses the whole objects it found with one
 * `JSON.parse` (far faster than a token-by-token parser in JavaScript).
 *
 * The scan follows only what can hide a brace: strings (with their escapes) and nesting. It
 * checks nothing else; `JSON.parse` does that for every object. An answer that stops before its
 * array is closed (the service cuts a listing that fails half-way) is an error at `end`.
 */
export class ListingParser<Item = unknown> {
  /** Text not yet parsed: the start of an object whose end has not come, or nothing. */
  #pending = ''
  /** Where the scan of `#pending` goes on. */
  #scanned = 0
  #inString = false
  /** Nesting depth: 0 before the envelope; inside the array, 0 between its items. */
  #depth = 0
  #state: 'envelope' | 'items' | 'done' = 'envelope'

  /** The items that `chunk` completed, in order. */
  push (chunk: string): Item[] {
    if (this.#state === 'done') return []
    const text = this.#pending + chunk
    let i = this.#scanned
    // Where this text's items begin: after the envelope's head, if it is in this text
    let first = 0
    let lastEnd = -1
    while (i < text.length) {
      if (this.#inString) {
        // Jump to the next quote; it ends the string unless an odd number of backslashes precede it
        const quote = text.indexOf('"', i)
        if (quote === -1) {
          i = text.length
          break
        }
        let backslashes = 0
        while (text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes++
        if (backslashes % 2 === 0) this.#inString = false
        i = quote + 1
        continue
      }
      const c = text.charCodeAt(i)
      if (c === QUOTE) {
        this.#inString = true
      } else if (this.#state === 'envelope') {
        if (c === OPEN_BRACE) this.#depth++
        else if (c === OPEN_BRACKET && this.#depth === 1) {
          // The envelope's one array: `data`
          this.#state = 'items'
          this.#depth = 0
          first = lastEnd = i + 1
        }
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        this.#depth++
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        if (this.#depth === 0) {
          // The array's end
          this.#state = 'done'
          i++
          break
        }
        this.#depth--
        if (this.#depth === 0) lastEnd = i + 1
      }
      i++
    }
    const items = lastEnd === -1 ? [] : parseItems<Item>(text.slice(first, lastEnd))
    if (this.#state === 'done') {
      this.#pending = ''
      this.#scanned = 0
    } else if (lastEnd === -1) {
      this.#pending = text
      this.#scanned = i
    } else {
      this.#pending = text.slice(lastEnd)
      this.#scanned = i - lastEnd
    }
    return items
  }

  /** Throws unless the answer's array was closed: otherwise the list is not whole. */
  end (): void {
    if (this.#state !== 'done') throw new Error('the list ended before its last book')
  }
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d
const LEADING_COMMA = /^\s*,/

/** Whole items, each but the first after a comma (the one that followed the item before). */
function parseItems<Item> (text: string): Item[] {
  const items = text.replace(LEADING_COMMA, '')
  return items.trim() === '' ? [] : JSON.parse(`[${items}]`) as Item[]
}

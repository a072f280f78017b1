/**
 * The words of a search (`q`, docs/api.md Search) that a title or an author holds, to be marked
 * in the rows of its results: the words of `q` as written (in quotes too), the last one also as
 * the start of a word, and a word of 5 letters or more through a typo (one for 5 to 8 letters,
 * two from 9: the optimal string alignment distance). Excluded words mark nothing. Pure text, no
 * DOM (book-table.ts builds the nodes). `q` is read as the service reads it, with its own code
 * (src/schemas/search-syntax.ts).
 *
 * The service folds and splits words with PostgreSQL (lower case, its `unaccent` rules, its text
 * search parser); this is close to it, not the same: lower case, accents stripped (NFD), the
 * letters that are two (`ß`, `æ`, `œ`) or have their stroke (`ø`, `ł`, `đ`) folded as `unaccent`
 * folds them, and a word is a run of letters and digits. Marking is presentation only: which
 * books are listed, and in what order, is the service's alone.
 */
import { searchPieces, typoDistance, typosFor } from '../src/schemas/search-syntax.js'

/** A part of a text: marked when it is (part of) a word the search matched. */
interface TextPart { text: string, marked: boolean }

/** What a search marks in a text: its parts, in order, or null when it marks nothing. */
export type Marker = (text: string) => TextPart[] | null

/** A word of the search: folded, matching as the start of a word too, and how many typos it forgives. */
interface Term { word: string, prefix: boolean, typos: number }

/** Letters that fold to others than their base letter once their accents are stripped. */
const FOLDED_LETTERS: Record<string, string> = { ß: 'ss', æ: 'ae', œ: 'oe', ø: 'o', ł: 'l', đ: 'd', ı: 'i' }
const FOLDED_PATTERN = new RegExp(`[${Object.keys(FOLDED_LETTERS).join('')}]`, 'g')
/** The combining accents that NFD takes off a letter */
const ACCENTS = /[\u0300-\u036f]/g
/** A word: letters, digits, and the marks on them */
const WORD = /[\p{L}\p{N}\p{M}]+/gu
/** The shortest and longest words the service remembers for typos (`search_words`), in letters */
const KNOWN_WORD = { min: 4, max: 64 }

/** `text` folded as the search folds it: lower case, without accents, `ß` as `ss`. */
function fold (text: string): string {
  return text.toLowerCase().normalize('NFD').replace(ACCENTS, '').replace(FOLDED_PATTERN, (letter) => FOLDED_LETTERS[letter]!)
}

/** The words `q` searches for, folded; excluded ones are not. */
function termsOf (q: string): Term[] {
  return searchPieces(q).filter((piece) => !piece.excluded).flatMap((piece) => {
    const words = piece.text.match(WORD)?.map(fold).filter((word) => word !== '') ?? []
    return words.map((word, index) => ({
      word,
      // The word a piece ends with (also the last part of `rock-n-ro`)
      prefix: piece.last && index === words.length - 1,
      // The words of a phrase match only as written
      typos: piece.phrase ? 0 : typosFor(word)
    }))
  })
}

/** Whether `q` has a word or phrase to find (the service refuses one without: only punctuation, only exclusions). */
export function hasWordToFind (q: string): boolean {
  return termsOf(q).length > 0
}

/**
 * How many folded letters of `word` (a word of a text) a term matches from its start: all of
 * them for the word as written or through a typo, the term's own for a prefix, 0 for none.
 */
function matchedLength (word: string, terms: readonly Term[]): number {
  let matched = 0
  for (const { word: term, prefix, typos } of terms) {
    if (word === term) return word.length
    if (typos > 0 && isTypoOf(word, term, typos)) return word.length
    if (prefix && word.startsWith(term)) matched = Math.max(matched, term.length)
  }
  return matched
}

/** Whether a word of a text is `typos` typos or fewer from a term: only a word the service remembers. */
function isTypoOf (word: string, term: string, typos: number): boolean {
  const letters = [...word].length
  return letters >= KNOWN_WORD.min && letters <= KNOWN_WORD.max && !/[0-9]/.test(word) &&
    Math.abs(letters - [...term].length) <= typos && typoDistance(term, word) <= typos
}

/** How many characters of `word`, from its start, fold to `length` characters or more (its accents with them). */
function originalLength (word: string, length: number): number {
  let folded = 0
  let end = 0
  for (const character of word) {
    const size = fold(character).length
    if (folded >= length && size > 0) break
    folded += size
    end += character.length
  }
  return end
}

/** What the search `q` marks in a text; null when it marks nothing in any text. */
export function searchMarker (q: string): Marker | null {
  const terms = termsOf(q)
  if (terms.length === 0) return null
  return (text) => {
    const parts: TextPart[] = []
    let from = 0
    for (const match of text.matchAll(WORD)) {
      const word = match[0]
      const length = matchedLength(fold(word), terms)
      if (length === 0) continue
      const end = match.index + originalLength(word, length)
      if (match.index > from) parts.push({ text: text.slice(from, match.index), marked: false })
      parts.push({ text: text.slice(match.index, end), marked: true })
      from = end
    }
    if (parts.length === 0) return null
    if (from < text.length) parts.push({ text: text.slice(from), marked: false })
    return parts
  }
}

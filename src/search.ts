/**
 * What `q` of `GET /books` asks for (docs/api.md, Search): its syntax, the typo rule, and the
 * text search queries (`tsquery`) that a page matches and ranks books with
 * (src/db/search-sql.ts). PostgreSQL splits the pieces of `q` into words, as it splits a book's
 * title and author (`search_words_of`, src/db/migrations.ts): a word here is one of its lexemes.
 */

/** The longest `q`, in characters (code points, as JSON Schema counts them). */
export const SEARCH_MAX_LENGTH = 200

/** A search with no word to find (only punctuation, or only exclusions): answered `400 Invalid input`. */
export class SearchWithoutWords extends Error {
  constructor () {
    super('the search has no word to find')
  }
}

/**
 * A piece of `q`: a word as typed (between spaces) or a quoted phrase; `excluded` with a leading
 * `-`; `last`: the word `q` ends with, which also matches as a prefix (not when a space follows
 * it: the word is then complete).
 */
export interface SearchPiece {
  text: string
  phrase: boolean
  excluded: boolean
  last: boolean
}

/**
 * The pieces of `q`: `"a phrase"` (a quote left open runs to the end), `-word` and `-"a phrase"`
 * excluded, the rest words. A `-` only excludes at the start of a piece: `rock-n-roll` is one word.
 */
export function searchPieces (q: string): SearchPiece[] {
  const pieces: SearchPiece[] = []
  const pattern = /(-?)(?:"([^"]*)"?|([^\s"]+))/gu
  for (const match of q.matchAll(pattern)) {
    const [whole, minus, phrase, word] = match as unknown as [string, string, string | undefined, string | undefined]
    // A `-` alone is a word (of punctuation): the pattern takes it as such, minus empty
    const excluded = minus === '-'
    const last = match.index + whole.length === q.length && phrase === undefined && !excluded
    pieces.push({ text: phrase ?? word!, phrase: phrase !== undefined, excluded, last })
  }
  return pieces
}

/**
 * The optimal string alignment distance of two words, in characters: how many letters inserted,
 * deleted, changed, or two neighbours swapped, each letter edited once at most.
 */
export function typoDistance (a: string, b: string): number {
  const s = [...a]
  const t = [...b]
  // Three rows of the table: two back, one back, this one
  let before = new Array<number>(t.length + 1).fill(0)
  let previous = Array.from({ length: t.length + 1 }, (_, j) => j)
  for (let i = 1; i <= s.length; i++) {
    const row = [i]
    for (let j = 1; j <= t.length; j++) {
      const changed = s[i - 1] === t[j - 1] ? 0 : 1
      let cost = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + changed)
      if (i > 1 && j > 1 && s[i - 1] === t[j - 2] && s[i - 2] === t[j - 1]) cost = Math.min(cost, before[j - 2]! + 1)
      row.push(cost)
    }
    before = previous
    previous = row
  }
  return previous[t.length]!
}

/** A lexeme as a `tsquery` operand: quoted, its quotes doubled and its backslashes escaped. */
function operand (lexeme: string, prefix = false): string {
  return `'${lexeme.replace(/\\/g, '\\\\').replace(/'/g, "''")}'${prefix ? ':*' : ''}`
}

/**
 * A word of `q` to find (`lexeme`, which also matches as a prefix when `prefix`, and through a typo
 * as each of `typoWords`), with its queries: `forms`, every way a book may hold it, `exact` as
 * written, `exactOrPrefix` as written or as a prefix.
 */
export interface SearchTerm {
  lexeme: string
  prefix: boolean
  typoWords: string[]
  forms: string
  exact: string
  exactOrPrefix: string
}

/**
 * The queries of a search: its words (`terms`, in the order typed), its phrases, and the words
 * and phrases it excludes, each a `tsquery`; `pairs`, for each two neighbouring terms, the query
 * of the two next to each other in that order (`adjacent`) and within three words of each other
 * in either order (`near`).
 */
export interface Search {
  terms: SearchTerm[]
  phrases: string[]
  excluded: string[]
  pairs: Array<{ adjacent: string, near: string }>
}

/**
 * A word of a piece, as PostgreSQL split it (src/db/search-sql.ts, PIECE_WORDS): its lexeme, how
 * many typos it may be off by, and the known words that may be that far from it.
 */
export interface PieceWord {
  lexeme: string
  typos: number
  near: string[]
}

/**
 * The search that pieces ask for, given the words PostgreSQL split each into (`words[i]` for
 * `pieces[i]`, in position order); null when it has no word to find (only punctuation, or only
 * exclusions).
 */
export function searchOf (pieces: readonly SearchPiece[], words: ReadonlyArray<readonly PieceWord[]>): Search | null {
  const search: Search = { terms: [], phrases: [], excluded: [], pairs: [] }
  pieces.forEach((piece, i) => {
    const pieceWords = words[i] ?? []
    if (pieceWords.length === 0) return
    if (piece.phrase || piece.excluded) {
      const phrase = pieceWords.map(({ lexeme }) => operand(lexeme)).join(' <-> ')
      ;(piece.excluded ? search.excluded : search.phrases).push(phrase)
      return
    }
    // The word a piece ends with, and a compound ending with it (`rock-n-ro`), match as prefixes
    const final = pieceWords.at(-1)!.lexeme
    for (const { lexeme, typos, near } of pieceWords) {
      const prefix = piece.last && (lexeme === final || lexeme.endsWith(`-${final}`))
      const typoWords = near.filter((word) => word !== lexeme && typoDistance(lexeme, word) <= typos)
      const exactOrPrefix = operand(lexeme, prefix)
      search.terms.push({
        lexeme,
        prefix,
        typoWords,
        forms: [exactOrPrefix, ...typoWords.map((word) => operand(word))].join(' | '),
        exact: operand(lexeme),
        exactOrPrefix
      })
    }
  })
  if (search.terms.length === 0 && search.phrases.length === 0) return null
  for (let i = 1; i < search.terms.length; i++) {
    const a = `(${search.terms[i - 1]!.forms})`
    const b = `(${search.terms[i]!.forms})`
    search.pairs.push({ adjacent: `${a} <-> ${b}`, near: [`${a} <2> ${b}`, `${a} <3> ${b}`, `${b} <-> ${a}`, `${b} <2> ${a}`, `${b} <3> ${a}`].join(' | ') })
  }
  return search
}

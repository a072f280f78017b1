/**
 * What `q` of `GET /books` asks for (docs/api.md, Search): the text search queries (`tsquery`)
 * that a page matches and ranks books with (src/db/search-sql.ts), from the pieces of `q`
 * (src/schemas/search-syntax.ts). PostgreSQL splits the pieces into words, as it splits a book's
 * title and author (`search_words_of`, src/db/migrations.ts): a word here is one of its lexemes.
 */
import { typoDistance, type SearchPiece } from './schemas/search-syntax.js'

/** A search with no word to find (only punctuation, or only exclusions): answered `400 Invalid input`. */
export class SearchWithoutWords extends Error {
  constructor () {
    super('the search has no word to find')
  }
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
 * A phrase of `q` to find: its words (`lexemes`) next to each other in that order (`query`), and
 * the words anywhere (`everyWord`), which an index reads without checking each book it finds.
 */
export interface SearchPhrase {
  lexemes: string[]
  query: string
  everyWord: string
}

/**
 * The queries of a search: its words (`terms`, in the order typed), its phrases, and the words
 * and phrases it excludes, each a `tsquery`; `pairs`, for each two neighbouring terms, the query
 * of the two next to each other in that order (`adjacent`) and within three words of each other
 * in either order (`near`).
 */
export interface Search {
  terms: SearchTerm[]
  phrases: SearchPhrase[]
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
      const lexemes = pieceWords.map(({ lexeme }) => lexeme)
      const query = lexemes.map((lexeme) => operand(lexeme)).join(' <-> ')
      if (piece.excluded) search.excluded.push(query)
      else search.phrases.push({ lexemes, query, everyWord: lexemes.map((lexeme) => operand(lexeme)).join(' & ') })
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

/**
 * The syntax of a search (`q` of `GET /books`, docs/api.md Search) and its typo rule, with no
 * dependency: the service (src/search.ts, src/db/search-sql.ts) and the console, which marks the
 * words a search matched (console/search-marks.ts), read `q` with the same code.
 */

/** The longest `q`, in characters (code points, as JSON Schema counts them). */
export const SEARCH_MAX_LENGTH = 200

/**
 * How long a word must be, in characters once folded (`Straße` has 7), to be forgiven one typo,
 * and two. A word with a digit in it (a year, a number) must match as written.
 */
export const TYPO_LENGTHS = { one: 5, two: 9 } as const

/** How many typos a folded word may be off by (`TYPO_LENGTHS`). */
export function typosFor (word: string): number {
  if (/[0-9]/.test(word)) return 0
  const length = [...word].length
  return length >= TYPO_LENGTHS.two ? 2 : length >= TYPO_LENGTHS.one ? 1 : 0
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

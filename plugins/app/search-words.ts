/**
 * Adds `fastify.searchWords`, made by `createSearchWords` (below) on the pool of
 * @fastify/postgres once migrate has brought the tables up to date: what a search (`q`,
 * docs/api.md Search) needs of the database's words before its page is read. The words of its
 * pieces as PostgreSQL splits them, each with the known words a typo away (`searchFor`); and how
 * a one-word search by relevance reads the levels of its rank (`levelsOf`), by the planner's
 * statistics of the words, read once a minute. The statements: src/db/search-sql.ts.
 */
import type { PostgresDb } from '@fastify/postgres'
import type { QueryResultRow } from 'pg'
import fp from 'fastify-plugin'
import { boundedQueryOn, boundedTransaction } from '../../src/db/bounded-query.js'
import type { SqlDialect } from '../../src/db/dialect.js'
import { PIECE_WORDS, WORD_STATISTICS, typoCandidates } from '../../src/db/search-sql.js'
import { TYPO_LENGTHS, searchPieces } from '../../src/schemas/search-syntax.js'
import { SearchWithoutWords, searchOf, type PieceWord, type Search } from '../../src/search.js'
import { WordShares, searchLevels, type SearchLevel, type WordFrequencies } from '../../src/search-plan.js'

declare module 'fastify' {
  interface FastifyInstance {
    searchWords: ReturnType<typeof createSearchWords>
  }
}

/** How long the planner's statistics of the words serve a search before they are read again. */
const WORD_STATISTICS_MS = 60_000

function createSearchWords (pg: PostgresDb, dialect: SqlDialect) {
  const query = boundedQueryOn(pg.pool)

  /**
 * The search `q` asks for: its pieces split into words by PostgreSQL, each with the known words
 * a typo away from it. `SearchWithoutWords` when it has none to find.
 */
  async function searchFor (q: string): Promise<Search> {
    const pieces = searchPieces(q)
    const [, { rows }] = await boundedTransaction<[QueryResultRow, PieceWord & { piece: number }]>(pg.pool, [
      { text: typoCandidates(pieces.filter(({ phrase, excluded }) => !phrase && !excluded).map(({ text }) => text)) },
      { text: PIECE_WORDS, values: [pieces.map(({ text }) => text), pieces.map(({ phrase, excluded }) => !phrase && !excluded), TYPO_LENGTHS.one, TYPO_LENGTHS.two] }
    ])
    const words = pieces.map((): PieceWord[] => [])
    // In the order of the pieces and of their words
    for (const row of rows) words[row.piece - 1]!.push(row)
    const search = searchOf(pieces, words)
    if (search === null) throw new SearchWithoutWords()
    return search
  }

  /**
 * The planner's statistics of the words (src/search-plan.ts), read again once they are
 * `WORD_STATISTICS_MS` old: none where the dialect has none, or before an ANALYZE.
 */
  let wordStatistics: { read: number, frequencies: Promise<WordFrequencies | null> } | null = null
  function wordFrequencies (): Promise<WordFrequencies | null> {
    if (wordStatistics === null || performance.now() - wordStatistics.read > WORD_STATISTICS_MS) {
    // A failed read is tried again by the next search
      wordStatistics = { read: performance.now(), frequencies: readWordFrequencies().catch(() => { wordStatistics = null; return null }) }
    }
    return wordStatistics.frequencies
  }
  async function readWordFrequencies (): Promise<WordFrequencies | null> {
    if (!dialect.estimatesMatches) return null
    const { rows } = await query<{ index: string, words: string[], frequencies: number[], books: number }>(WORD_STATISTICS, [])
    if (rows.length === 0) return null
    const of = (index: string) => {
      const row = rows.find((each) => each.index === index)
      // The frequencies end with more figures (the least and the most of them)
      return new WordShares(row === undefined ? [] : row.words.map((word, i) => [word, row.frequencies[i]!] as const))
    }
    return { title: of('books_title_words'), author: of('books_author_words'), books: rows[0]!.books }
  }

  return {
    searchFor,
    /** How a page of `limit` books of a search by relevance reads its levels; null: it ranks every match. */
    levelsOf: async (search: Search, limit: number): Promise<SearchLevel[] | null> => searchLevels(search, await wordFrequencies(), limit)
  }
}

export default fp(async function searchWords (fastify) {
  fastify.decorate('searchWords', createSearchWords(fastify.pg, fastify.sqlDialect))
}, { name: 'search-words', dependencies: ['postgres', 'migrate'] })

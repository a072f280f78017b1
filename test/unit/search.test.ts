/**
 * What `q` asks for (src/search.ts): its pieces, the typo distance, the queries built from the
 * words PostgreSQL split; how a one-word search reads the levels of its rank (src/search-plan.ts);
 * and the cursors of walks without a search, which the search left as they were.
 */
import t from 'tap'
import { listingCursors } from '../../src/listing.js'
import { typoCandidates } from '../../src/db/search-sql.js'
import { searchPieces, typoDistance, typosFor } from '../../src/schemas/search-syntax.js'
import { searchOf, type PieceWord } from '../../src/search.js'
import { WordShares, searchLevels, type WordFrequencies } from '../../src/search-plan.js'

t.test('the pieces of q', async (t) => {
  const piece = (text: string, rest: { phrase?: boolean, excluded?: boolean, last?: boolean } = {}) =>
    ({ text, phrase: false, excluded: false, last: false, ...rest })
  t.strictSame(searchPieces('herbert dune'), [piece('herbert'), piece('dune', { last: true })], 'words, the last as a prefix')
  t.strictSame(searchPieces('herbert dune '), [piece('herbert'), piece('dune')], 'no prefix after a space')
  t.strictSame(searchPieces('"frank herbert" -messiah -"dune messiah"'),
    [piece('frank herbert', { phrase: true }), piece('messiah', { excluded: true }), piece('dune messiah', { phrase: true, excluded: true })])
  t.strictSame(searchPieces('rock-n-roll'), [piece('rock-n-roll', { last: true })], 'a hyphen inside a word')
  t.strictSame(searchPieces('"name of the rose'), [piece('name of the rose', { phrase: true })], 'a quote left open runs to the end')
  t.strictSame(searchPieces('a - b'), [piece('a'), piece('-'), piece('b', { last: true })], 'a lone - is a word of punctuation')
  t.strictSame(searchPieces('  '), [])
  t.strictSame(searchPieces('-"'), [piece('', { phrase: true, excluded: true })])
})

t.test('the typo distance: letters inserted, deleted, changed, two neighbours swapped', async (t) => {
  for (const [a, b, distance] of [
    ['tolkien', 'tolkien', 0], ['tolkein', 'tolkien', 1], ['hobit', 'hobbit', 1], ['hobbbit', 'hobbit', 1], ['hobbot', 'hobbit', 1],
    ['fondatoin', 'foundation', 2], ['fnodatoin', 'foundation', 4], ['ca', 'abc', 3], ['', 'abc', 3], ['三体', '体三', 1], ['é', 'e', 1]
  ] as Array<[string, string, number]>) {
    t.equal(typoDistance(a, b), distance, `${a} ${b}`)
    t.equal(typoDistance(b, a), distance, `${b} ${a}`)
  }
})

t.test('how many typos a word is forgiven: by its length, none with a digit', async (t) => {
  for (const [word, typos] of [['dune', 0], ['hobit', 1], ['strasse', 1], ['mieville', 1], ['fondation', 2], ['三体黑暗森林', 1], ['dune2', 0], ['123456789', 0]] as Array<[string, number]>) {
    t.equal(typosFor(word), typos, word)
  }
})

t.test('the queries of a search', async (t) => {
  const word = (lexeme: string, near: string[] = [], typos = 1): PieceWord => ({ lexeme, typos, near })
  const search = searchOf(searchPieces("tolkein o'brien hob"), [[word('tolkein', ['tolkien', 'tolkiens', 'token'])], [word('o', [], 0), word('brien')], [word('hob', [], 0)]])!
  t.strictSame(search.terms.map(({ lexeme, prefix, typoWords }) => [lexeme, prefix, typoWords]),
    [['tolkein', false, ['tolkien']], ['o', false, []], ['brien', false, []], ['hob', true, []]],
    'the near words a typo away (two are not), the last word as a prefix')
  t.strictSame(search.terms[0], { lexeme: 'tolkein', prefix: false, typoWords: ['tolkien'], forms: "'tolkein' | 'tolkien'", exact: "'tolkein'", exactOrPrefix: "'tolkein'" })
  t.equal(search.terms[3]!.forms, "'hob':*")
  t.equal(search.pairs.length, 3, 'a pair of each two neighbouring terms')
  t.equal(search.pairs[1]!.adjacent, "('o') <-> ('brien')")
  t.equal(search.pairs[1]!.near, "('o') <2> ('brien') | ('o') <3> ('brien') | ('brien') <-> ('o') | ('brien') <2> ('o') | ('brien') <3> ('o')")

  const quoted = searchOf(searchPieces('"it\'s a\\b" -x'), [[word('it', [], 0), word('s', [], 0), word("a\\b'", [], 0)], [word('x', [], 0)]])!
  t.strictSame(quoted.phrases, [{ lexemes: ['it', 's', "a\\b'"], query: "'it' <-> 's' <-> 'a\\\\b'''", everyWord: "'it' & 's' & 'a\\\\b'''" }],
    'a phrase, its quotes doubled and backslashes escaped')
  t.strictSame(quoted.excluded, ["'x'"])

  const compound = searchOf(searchPieces('rock-n-ro'), [[word('rock-n-ro', [], 0), word('rock', [], 0), word('n', [], 0), word('ro', [], 0)]])!
  t.strictSame(compound.terms.map(({ lexeme, prefix }) => [lexeme, prefix]), [['rock-n-ro', true], ['rock', false], ['n', false], ['ro', true]],
    'the last word of a hyphenated word, and the whole of it, as prefixes')

  t.equal(searchOf(searchPieces('!!! -dune'), [[], [word('dune')]]), null, 'only exclusions: nothing to find')
  t.equal(searchOf(searchPieces('!!!'), [[]]), null, 'only punctuation')
})

t.test('the share of a prefix: the sum of the shares of every common word that starts with it', async (t) => {
  // Sums of fractions differ from the sums written here in the last bits
  const near = (actual: number, expected: number, name = 'the sum of their shares') => t.ok(Math.abs(actual - expected) < 1e-12, name, { actual, expected })
  const shares = new WordShares([['theory', 0.01], ['the', 0.26], ['tha', 0.001], ['thf', 0.004], ['there', 0.02], ['tolkien', 0.00001], ['ṭhe', 0.5], ['thé', 0.003]])
  near(shares.startingWith('the'), 0.26 + 0.01 + 0.02, 'the word and the longer ones, not those beside them')
  near(shares.startingWith('th'), 0.26 + 0.01 + 0.02 + 0.001 + 0.004 + 0.003, 'with a letter beyond ASCII after it')
  near(shares.startingWith('tolkien'), 0.00001, 'the last word')
  near(shares.startingWith('ṭ'), 0.5, 'a letter beyond ASCII')
  near(shares.startingWith('thez'), 0, 'no word')
  near(shares.startingWith('zz'), 0, 'past every word')
  t.equal(shares.of('there'), 0.02)
  t.equal(shares.of('ther'), 0, 'a word is not a prefix')
  near(new WordShares([]).startingWith('a'), 0, 'no statistics')
})

t.test('the levels of a one-word search, each walked where dense and read through an index where sparse', async (t) => {
  const frequencies: WordFrequencies = {
    title: new WordShares([['the', 0.26], ['theory', 0.01], ['there', 0.02], ['tolkien', 0.00001]]),
    author: new WordShares([['the', 0.0001], ['tolkien', 0.002]]),
    books: 10_000_000
  }
  // Each query names its form
  const term = (lexeme: string, prefix: boolean, typoWords: string[] = []) =>
    ({ lexeme, prefix, typoWords, forms: 'forms', exact: 'exact', exactOrPrefix: 'exactOrPrefix' })
  const levels = (lexeme: string, prefix: boolean, typoWords: string[] = []) =>
    searchLevels({ terms: [term(lexeme, prefix, typoWords)], phrases: [], excluded: [], pairs: [] }, frequencies, 20)!
  const read = (list: ReturnType<typeof levels>) => list.map(({ holds, walk }) => [holds.map(({ field, query }) => `${field} ${query}`).join(' or '), walk])
  const the = levels('the', true)
  t.strictSame(read(the), [
    ['title forms', true], // a quarter of the books: a page within a hundred walked
    ['author exact', false], // a thousand books, through the index
    ['title forms', true], // `the` as a prefix only: 3% of the books
    ['author exactOrPrefix', false]
  ])
  t.ok(the.every((level, i) => i === 0 || level.rank < the[i - 1]!.rank), 'best first')
  const tolkein = levels('tolkein', false, ['tolkien'])
  t.strictSame(read(tolkein), [
    ['title exact or author exact', false], ['author exact', false], ['title forms', false], ['author forms', true]
  ], 'a word no book holds as written: its books as written, none, through the indexes; then its typo in 0.2% of the authors, walked (a page within 10,000 books)')
  t.strictSame(read(levels('th', true)), [
    ['title exact or author exact', false], ['author exact', false], ['title forms', true], ['author exactOrPrefix', false]
  ], 'a prefix that no book holds as a word: the books that hold it as written, through the indexes, not the quarter that hold it as a prefix')
  t.equal(tolkein.at(-1)!.rank, 0, 'through a typo in the author alone: the lowest rank')
  t.equal(searchLevels({ terms: [term('the', true)], phrases: [], excluded: [], pairs: [] }, null, 20), null, 'no statistics: every match ranked')
  t.equal(searchLevels({ terms: [term('war', false), term('peace', true)], phrases: [], excluded: [], pairs: [] }, frequencies, 20), null,
    'two words: every match ranked')
})

t.test('the levels of a search for one phrase: in the title, then in the author alone, each through the indexes of its words', async (t) => {
  const phrase = { lexemes: ['the', 'night'], query: "'the' <-> 'night'", everyWord: "'the' & 'night'" }
  const expected = [
    { rank: 256, holds: [{ field: 'title', query: "'the' & 'night'", words: ['the', 'night'] }], walk: false },
    { rank: 0, holds: [{ field: 'author', query: "'the' & 'night'", words: ['the', 'night'] }], walk: false }
  ]
  t.strictSame(searchLevels({ terms: [], phrases: [phrase], excluded: ["'day'"], pairs: [] }, null, 20), expected, 'with an exclusion, and no statistics')
  t.equal(searchLevels({ terms: [], phrases: [phrase, phrase], excluded: [], pairs: [] }, null, 20), null, 'two phrases: every match ranked')
})

t.test('the trigram threshold of the typo candidates: low only where a word may be two typos off', async (t) => {
  const threshold = (texts: string[]) => /= ([0-9.]+)$/.exec(typoCandidates(texts))![1]
  t.equal(threshold(['tolkein', 'war peace']), '0.19', 'no run of 9 characters: no word of 9 letters')
  t.equal(threshold([]), '0.19')
  t.equal(threshold(['war fondation']), '0.1', 'a word of 9 letters')
  t.equal(threshold(['rock-n-roll']), '0.1', 'a run of 9 characters that PostgreSQL may keep as one word')
  t.equal(threshold(['straße']), '0.1', 'beyond ASCII, folding may lengthen a word')
})

t.test('a cursor of a walk without a search is the one made before searches existed', async (t) => {
  const cursors = listingCursors('a secret of the tests, long enough for any key')
  const walk = { field: 'year', descending: true, author: 'tolkien' } as const
  const made = 'WzEsMTk1NCwiNDIiLCIxMDA6MTA1OiIsdHJ1ZV0.3bC7MA4JAHkHbswovEXUBA'
  t.equal(cursors.encode(walk, { key: 1954, id: '42', snapshot: '100:105:', matchesFirst: true }), made)
  t.ok(cursors.decode(walk, made), 'and read')
  t.equal(cursors.decode({ ...walk, q: 'tolkien' }, made), null, 'not for a search')
})

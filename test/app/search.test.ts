/**
 * GET /books?q= (docs/api.md, Search): the words and how they are folded and split, the prefix,
 * phrases, exclusions, each kind of typo and the length rule, the order, the search with the
 * listing's other parameters, its 400s, books found however they were written, and a walk that
 * lists each unchanged match exactly once while books change.
 */
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, call, errorEnvelope, getToken } from '../helper.js'
import { createDatabase, ON_CITUS, pgClient } from '../helpers/database.js'

interface Book { id: number, title: string, author: string, year: number }

/**
 * On Citus, which runs no trigger on a distributed table, what an operator runs after writing
 * books with SQL of their own (docs/deployment.md, Citus): their words into the known ones.
 * Nothing elsewhere, where the triggers add them.
 */
const LEARN_WORDS_BY_HAND = ON_CITUS
  ? `INSERT INTO search_words (word)
     SELECT word FROM books, search_words_to_know(books.title, books.author) AS word
     EXCEPT SELECT word FROM search_words`
  : null

/** The path of a `Link: <path>; rel="next"`, or null without one. */
function nextPath (link: string | string[] | undefined): string | null {
  return link === undefined ? null : /^<(\/books\?[^>]+)>; rel="next"$/.exec(String(link))![1]!
}

/** A searcher over `app`: the titles a search finds, in order, and its pages. */
function searcher (app: FastifyInstance, token: string) {
  const get = (url: string) => call(app, token, { method: 'GET', url })
  async function found (q: string, parameters = ''): Promise<Book[]> {
    const { status, body } = await get(`/books?q=${encodeURIComponent(q)}${parameters}`)
    if (status !== 200) throw new Error(`q=${q}${parameters}: ${status} ${JSON.stringify(body)}`)
    return body.data
  }
  /** Follows `next` from the first page: every book listed, and the number of pages. */
  async function walk (q: string, limit: number, between: (page: Book[]) => Promise<void> = async () => {}) {
    const books: Book[] = []
    let pages = 0
    for (let next: string | null = `/books?q=${encodeURIComponent(q)}&limit=${limit}`; next !== null; pages++) {
      const { status, body, headers } = await get(next)
      if (status !== 200) throw new Error(`${next}: ${status} ${JSON.stringify(body)}`)
      books.push(...body.data)
      next = nextPath(headers.link)
      await between(body.data)
    }
    return { books, pages }
  }
  return { get, found, titles: async (q: string, parameters = '') => (await found(q, parameters)).map((book) => book.title), walk }
}

/**
 * Runs `checks` with both ways a search by relevance reads its books (plugins/app/listings-repository.ts):
 * every match ranked, by a service that has no statistics of the words; then, once ANALYZE has
 * made them, by a service started after it, where a one-word search reads level by level
 * (src/search-plan.ts; not with the SQL for Citus, which has no such statistics).
 */
async function eitherPlan (t: Test, dbUrl: string, checks: (t: Test, app: FastifyInstance) => Promise<void>) {
  await t.test('without statistics of the words', async (t) => checks(t, await build(t, dbUrl)))
  const db = await pgClient(t, dbUrl)
  await db.query('ANALYZE books')
  await t.test('with statistics of the words', async (t) => checks(t, await build(t, dbUrl)))
}

async function create (app: FastifyInstance, token: string, books: Array<[string, string, number?]>): Promise<Book[]> {
  const created: Book[] = []
  for (const [title, author, year = 2000] of books) {
    const { status, body } = await call(app, token, { method: 'POST', url: '/book', payload: { title, author, year } })
    if (status !== 201) throw new Error(`${title}: ${status} ${JSON.stringify(body)}`)
    created.push(body.data)
  }
  return created
}

t.test('the words of a search', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  await create(app, token, [
    ['Dune', 'Frank Herbert'],
    ['Dune Messiah', 'Frank Herbert'],
    ['Wuthering Heights', 'Emily Brontë'],
    ['Jane Eyre', 'Charlotte Bronte'],
    ['The Name of the Rose', 'Umberto Eco'],
    ['Die Straße', 'Anna Müller'],
    ['Rock-n-Roll Forever', "Flann O'Brien"],
    ['Nineteen Eighty-Four 1984', 'George Orwell'],
    ['三体黑暗森林', '刘慈欣'],
    ['The Hobbit', 'J. R. R. Tolkien'],
    ['Herbert Frank', 'Nobody'],
    ['Economics', 'Someone'],
    ['Æsop', 'Łódź']
  ])
  await eitherPlan(t, dbUrl, async (t, app) => {
    const { titles } = searcher(app, token)

    t.test('every word, in the title or the author, ignoring case and accents', async (t) => {
      t.strictSame(await titles('bronte '), ['Wuthering Heights', 'Jane Eyre'], 'bronte finds Brontë and Bronte')
      t.strictSame(await titles('BRONTË '), ['Wuthering Heights', 'Jane Eyre'], 'and so does Brontë, in capitals')
      t.strictSame(await titles('ECO '), ['The Name of the Rose'], 'ECO finds Eco, and not Economics: a word is whole but for the last')
      t.strictSame(await titles('strasse muller '), ['Die Straße'], 'ß folds to ss, ü to u')
      t.strictSame(await titles('straße müller '), ['Die Straße'])
      t.strictSame(await titles('herbert dune'), ['Dune', 'Dune Messiah'], 'words from the author and the title together')
      t.strictSame(await titles('herbert dune messiah'), ['Dune Messiah'], 'every word must match')
      t.strictSame(await titles('herbert zebra'), [], 'a word that no book holds finds nothing')
    })

    t.test('how texts split into words: hyphens, apostrophes, digits, CJK', async (t) => {
      for (const q of ['rock-n-roll ', 'rock ', 'roll ', 'n roll ']) t.strictSame(await titles(q), ['Rock-n-Roll Forever'], `${q}: a hyphenated word, and each of its parts`)
      for (const q of ["o'brien ", 'brien ', 'o brien ']) t.strictSame(await titles(q), ['Rock-n-Roll Forever'], `${q}: an apostrophe splits`)
      t.strictSame(await titles('1984 '), ['Nineteen Eighty-Four 1984'], 'digits are a word')
      t.strictSame(await titles('198 '), [], 'and match whole')
      t.strictSame(await titles('三体黑暗森林'), ['三体黑暗森林'], 'a run of CJK characters is one word')
      t.strictSame(await titles('黑暗 '), [], 'whose parts are not words')
      t.strictSame(await titles('三体 '), [], 'not even its first characters, but as a prefix')
      t.strictSame(await titles('三体'), ['三体黑暗森林'])
      t.strictSame(await titles('aesop lodz'), ['Æsop'], 'æ is ae, ł is l')
    })

    t.test('the last word also matches as a prefix, unless a space follows it', async (t) => {
      t.strictSame(await titles('dun'), ['Dune', 'Dune Messiah'], 'dun finds Dune')
      t.strictSame(await titles('tolk'), ['The Hobbit'], 'tolk finds Tolkien')
      t.strictSame(await titles('dun '), [], 'a word followed by a space is complete')
      t.strictSame(await titles('dun herbert'), [], 'only the last word is a prefix')
      t.strictSame(await titles('herbert mess'), ['Dune Messiah'])
      t.strictSame(await titles('"dun"'), [], 'nor a word in quotes')
      t.strictSame(await titles('rock-n-ro'), ['Rock-n-Roll Forever'], 'a hyphenated word as a prefix')
    })

    t.test('a phrase: its words together, in that order, in one field', async (t) => {
      t.strictSame(await titles('"frank herbert"'), ['Dune', 'Dune Messiah'], 'the author, not Herbert Frank')
      t.strictSame(await titles('"herbert frank"'), ['Herbert Frank'])
      t.strictSame(await titles('"dune frank"'), [], 'not across the title and the author')
      t.strictSame(await titles('"name rose"'), [], 'nor with a word between them')
      t.strictSame(await titles('"name of the rose'), ['The Name of the Rose'], 'a quote left open runs to the end')
      t.strictSame(await titles('"dune messiah" herbert'), ['Dune Messiah'], 'with words beside it')
    })

    t.test('a word or a phrase after - is excluded', async (t) => {
      t.strictSame(await titles('herbert -messiah'), ['Herbert Frank', 'Dune'], 'herbert but not messiah')
      t.strictSame(await titles('herbert -"frank herbert"'), ['Herbert Frank'], 'an excluded phrase')
      t.strictSame(await titles('herbert -frank'), [], 'excluded from the author too')
      t.strictSame(await titles('rock-n-roll'), ['Rock-n-Roll Forever'], 'a hyphen inside a word excludes nothing')
    })
  })
})

t.test('typos', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  await create(app, token, [
    ['Dune', 'Frank Herbert'],
    ['The Hobbit', 'J. R. R. Tolkien'],
    ['Foundation', 'Isaac Asimov'],
    ['Perdido Street Station', 'China Miéville'],
    ['Year 12345', 'Digits'],
    ['Barbarella', 'Jean-Claude Forest']
  ])
  await eitherPlan(t, dbUrl, async (t, app) => {
    const { titles } = searcher(app, token)

    t.test('a word of 5 to 8 letters may be one typo off', async (t) => {
      t.strictSame(await titles('herbret '), ['Dune'], 'two letters swapped')
      t.strictSame(await titles('tolkein '), ['The Hobbit'], 'two letters swapped')
      t.strictSame(await titles('hobbbit '), ['The Hobbit'], 'a letter inserted')
      t.strictSame(await titles('hobit '), ['The Hobbit'], 'a letter deleted')
      t.strictSame(await titles('hobbot '), ['The Hobbit'], 'a letter changed')
      t.strictSame(await titles('mieviile '), ['Perdido Street Station'], 'on the folded word')
      t.strictSame(await titles('hbobti '), [], 'not two')
      t.strictSame(await titles('herbret'), ['Dune'], 'the last word too')
      t.strictSame(await titles('tolkei'), [], 'not in the start of a longer word')
    })

    t.test('a word of 9 letters or more may be two typos off', async (t) => {
      t.strictSame(await titles('fondation '), ['Foundation'], 'one')
      t.strictSame(await titles('fondatoin '), ['Foundation'], 'two')
      t.strictSame(await titles('fuondatoin '), ['Foundation'], 'two swaps, which leave few of its trigrams')
      t.strictSame(await titles('fnodatoin '), [], 'not three')
      t.strictSame(await titles('barbarela '), ['Barbarella'], 'a word of 9 letters')
      t.strictSame(await titles('brabarela '), ['Barbarella'], 'two typos in 9 letters')
      t.strictSame(await titles('perdiod '), ['Perdido Street Station'], 'one in 7')
      t.strictSame(await titles('prediod '), [], 'not two in 7')
      t.strictSame(await titles('miavilla '), [], 'not two in 8')
    })

    t.test('a word of 4 letters or fewer, or with a digit, must match as written', async (t) => {
      t.strictSame(await titles('dnue'), [], 'dnue finds nothing')
      t.strictSame(await titles('dune '), ['Dune'])
      t.strictSame(await titles('duen '), [])
      t.strictSame(await titles('12354 '), [], 'a number with two digits swapped')
      t.strictSame(await titles('12345 '), ['Year 12345'])
      t.strictSame(await titles('dune2 '), [], 'not even a word of letters and a digit, a typo away from a word of letters')
    })

    t.test('a phrase or an excluded word matches as written', async (t) => {
      t.strictSame(await titles('"frank herbret"'), [])
      t.strictSame(await titles('frank -herbret'), ['Dune'])
    })
  })
})

t.test('the order: exact words, then words without a typo, then the title, then words close together; ties by id', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  await create(app, token, [
    ['Garden of stone', 'Anonymous'], // typo for `garten`: after the exact ones
    ['Garten', 'Someone'],
    ['Gartens of the North', 'Someone'], // `garten` as a prefix only
    ['Notes', 'Ann Garten'], // exact, in the author alone
    ['Garten again', 'Someone'],
    ['Almanac', 'City Lights Press'], // the phrase in the author alone, before those in the title
    ['Winter city lights', 'Author One'],
    ['City lights in winter', 'Author Two'],
    ['Lights of the city', 'Author Three'],
    ['City of winter', 'Lights Author'],
    ['Alpha beta', 'Gamma'],
    ['Beta', 'Alpha Gamma'],
    ['Essays', 'Bob Garten'], // exact, in the author alone
    ['Notebook', 'Gartenson'], // as a prefix, in the author alone
    ['Notepad', 'Ann Garden'], // through a typo, in the author alone
    // Enough other books that a level of a few is read through the index, not walked (src/search-plan.ts)
    ...Array.from({ length: 200 }, (_, i): [string, string] => [`Filler ${i}`, 'Nobody'])
  ])
  // Its row now lies after those of the books with higher ids: a level is in id order, not in the order rows lie
  await (await pgClient(t, dbUrl)).query("UPDATE books SET year = 1999 WHERE title = 'Winter city lights'")
  await eitherPlan(t, dbUrl, async (t, app) => {
    const { titles, walk } = searcher(app, token)
    t.strictSame(await titles('garten'), ['Garten', 'Garten again', 'Notes', 'Essays', 'Gartens of the North', 'Notebook', 'Garden of stone', 'Notepad'],
      'as written, then as a prefix, then through a typo; in each, the title above the author alone; ties by id')
    t.strictSame(await titles('garten '), ['Garten', 'Garten again', 'Notes', 'Essays', 'Garden of stone', 'Gartens of the North', 'Notepad'],
      'not a prefix: as written, then through typos')
    const { books: paged } = await walk('garten', 1)
    t.strictSame(paged.map((book) => book.title), await titles('garten'), 'a page at a time, the same order')
    t.strictSame(await titles('city lights'), ['Winter city lights', 'City lights in winter', 'Lights of the city', 'City of winter', 'Almanac'],
      'both in the title next to each other in order (ties by id), then within three words, then one in the title')
    const { books: phrased } = await walk('"city lights"', 1)
    t.strictSame(phrased.map((book) => book.title), ['Winter city lights', 'City lights in winter', 'Almanac'],
      'a phrase in the title above one in the author alone, a page at a time')
    t.strictSame(await titles('alpha gamma '), ['Alpha beta', 'Beta'], 'one word in the title above both next to each other in the author')
    t.strictSame(await titles('alpha beta '), ['Alpha beta', 'Beta'], 'both in the title above one')
  })
})

t.test('a word is found however the text writes it, where the books are walked in id order', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  // `the` in most titles: its level is walked (src/search-plan.ts), each text checked first
  await create(app, token, [['The night', 'A'], ['THE DAY', 'B'], ['Other words', 'C'], ['Thé ivory', 'D'], ['the end', 'E'], ['The sea', 'F']])
  await eitherPlan(t, dbUrl, async (t, app) => {
    const { titles } = searcher(app, token)
    t.strictSame(await titles('the '), ['The night', 'THE DAY', 'Thé ivory', 'the end', 'The sea'], 'in any case, with an accent, and not within a word')
  })
})

t.test('a search with the listing\'s other parameters', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const { get, titles } = searcher(app, token)
  const books = await create(app, token, Array.from({ length: 30 }, (_, i): [string, string, number] =>
    [`${i % 3 === 0 ? 'Zeta' : 'Alpha'} tale ${String(i).padStart(2, '0')}`, i % 2 === 0 ? 'Teller' : 'Tale Teller', 1990 + i]))

  t.test('year_from and year_to', async (t) => {
    t.strictSame(await titles('tale ', '&year_from=2015&year_to=2017'), ['Alpha tale 25', 'Alpha tale 26', 'Zeta tale 27'])
  })

  t.test('sort orders the matches by that field', async (t) => {
    const expected = books.filter((book) => book.title.startsWith('Zeta')).sort((a, b) => b.year - a.year).map((book) => book.title)
    t.strictSame(await titles('zeta ', '&sort=-year'), expected)
    const { status, headers } = await get('/books?q=tale&sort=title&limit=4')
    t.equal(status, 200)
    const second = await get(nextPath(headers.link)!)
    t.strictSame(second.body.data.map((book: Book) => book.title), ['Alpha tale 07', 'Alpha tale 08', 'Alpha tale 10', 'Alpha tale 11'])
  })

  t.test('pages follow the order of relevance, each book once', (t) => eitherPlan(t, dbUrl, async (t, app) => {
    const { titles, walk } = searcher(app, token)
    const all = await titles('tale ')
    t.equal(all.length, 30)
    const { books: walked, pages } = await walk('tale ', 7)
    t.equal(pages, 5, 'four full pages and a last one')
    t.strictSame(walked.map((book) => book.title), all)
    t.strictSame(all, books.map((book) => book.title), 'every one in its title, as written: one rank, by id')
  }))

  t.test('a cursor is for its own search only', async (t) => {
    const { headers } = await get('/books?q=tale&limit=2')
    const next = nextPath(headers.link)!
    t.match(next, /^\/books\?limit=2&q=tale&cursor=/, 'q is in the next link')
    t.equal((await get(next)).status, 200)
    for (const other of [next.replace('q=tale', 'q=teller'), next.replace('q=tale', 'q=tale%20'), next.replace('q=tale&', '')]) {
      const { status, body } = await get(other)
      t.equal(status, 400, other)
      t.strictSame(body, errorEnvelope(400, 'Invalid input'))
    }
  })

  t.test('a search in CSV', async (t) => {
    const response = await app.inject({ method: 'GET', url: '/books?q=zeta%20tale%2003', headers: { authorization: token, accept: 'text/csv' } })
    t.equal(response.statusCode, 200)
    t.equal(response.body, 'id,title,author,year\r\n4,Zeta tale 03,Tale Teller,1993\r\n')
  })

  t.test('400 Invalid input', async (t) => {
    for (const q of ['', ' ', '!!!', '-"', '""', '-tale', '-tale -zeta', 'x'.repeat(201), 'tale\u0000', 'é'.repeat(201)]) {
      const { status, body } = await get(`/books?q=${encodeURIComponent(q)}`)
      t.equal(status, 400, `q=${q.slice(0, 20)}`)
      t.strictSame(body, errorEnvelope(400, 'Invalid input'))
    }
    t.equal((await get(`/books?q=${encodeURIComponent('é'.repeat(200))}`)).status, 200, '200 characters, each of two bytes')
    t.equal((await get('/books?q=tale&q=zeta')).status, 400, 'given twice')
  })
})

t.test('a book is found however it was written, as soon as it is committed', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl)
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl)
  const { titles } = searcher(app, token)
  const [book] = await create(app, token, [['Placeholder', 'Nobody']])
  t.strictSame(await titles('quintessence '), [])
  await call(app, token, { method: 'PUT', url: `/book/${book!.id}`, payload: { title: 'Quintessence' } })
  t.strictSame(await titles('quintessence '), ['Quintessence'], 'PUT')
  t.strictSame(await titles('placeholder '), [], 'and no longer by its old title')
  t.strictSame(await titles('quintesence '), ['Quintessence'], 'through a typo of a word it brought')

  const imported = await app.inject({
    method: 'POST', url: '/books', headers: { authorization: token, 'content-type': 'text/csv' }, payload: 'title,author,year\r\nMarvellous,Imported Author,1999\r\n'
  })
  t.equal(imported.statusCode, 201)
  t.strictSame(await titles('marvelous imported'), ['Marvellous'], 'an import')

  await db.query("INSERT INTO books (title, author, year) VALUES ('Operator restored', 'Xylophonist', 1900)")
  t.strictSame(await titles('xylophonist '), ['Operator restored'], 'SQL of an operator')
  if (LEARN_WORDS_BY_HAND !== null) await db.query(LEARN_WORDS_BY_HAND)
  t.strictSame(await titles('xylophnoist '), ['Operator restored'], 'through a typo too')
  await db.query("UPDATE books SET author = 'Zitherist' WHERE title = 'Operator restored'")
  if (LEARN_WORDS_BY_HAND !== null) await db.query(LEARN_WORDS_BY_HAND)
  t.strictSame(await titles('zitherits '), ['Operator restored'], 'an update by SQL')
})

t.test('with the SQL for Citus, which runs no trigger, the service\'s writes add their words to the known ones', async (t) => {
  const dbUrl = await createDatabase(t)
  const app = await build(t, dbUrl, { DB_DIALECT: 'citus' })
  const token = await getToken(app)
  const db = await pgClient(t, dbUrl)
  // On PostgreSQL, with the triggers gone, only the statements add words. On a Citus cluster
  // there are none, and Citus refuses even DROP TRIGGER IF EXISTS on a distributed table
  if (!ON_CITUS) await db.query('DROP TRIGGER IF EXISTS books_search_words_created ON books; DROP TRIGGER IF EXISTS books_search_words_updated ON books')
  const { titles } = searcher(app, token)
  const [book] = await create(app, token, [['Placeholder', 'Nobody']])
  await create(app, token, [['Marvellous', 'Created Author']])
  t.strictSame(await titles('marvelous '), ['Marvellous'], 'POST /book')
  const keyed = await call(app, token, { method: 'POST', url: '/book', headers: { 'idempotency-key': '"a-key-of-the-test"' }, payload: { title: 'Wondrous', author: 'Keyed', year: 1 } })
  t.equal(keyed.status, 201)
  t.strictSame(await titles('wonderous '), ['Wondrous'], 'POST /book with an Idempotency-Key')
  await call(app, token, { method: 'PUT', url: `/book/${book!.id}`, payload: { title: 'Quintessence' } })
  t.strictSame(await titles('quintesence '), ['Quintessence'], 'PUT')
  const imported = await app.inject({
    method: 'POST', url: '/books', headers: { authorization: token, 'content-type': 'text/csv' }, payload: 'title,author,year\r\nXylophonist,Imported,1999\r\n'
  })
  t.equal(imported.statusCode, 201)
  t.strictSame(await titles('xylophnoist '), ['Xylophonist'], 'an import')
  const { rows } = await db.query('SELECT word, count(*)::int AS count FROM search_words GROUP BY word HAVING count(*) > 1')
  t.strictSame(rows, [], 'each word once')
})

t.test('a walk under concurrent writes lists each unchanged match exactly once', async (t) => {
  const dbUrl = await createDatabase(t)
  const first = await build(t, dbUrl)
  const token = await getToken(first)
  const db = await pgClient(t, dbUrl)
  // Ranks of every kind: in the title or the author, exact or as a prefix, one word or two
  await create(first, token, Array.from({ length: 120 }, (_, i): [string, string] => [
    [`Marble ${i}`, `Marbles and more ${i}`, `Old marble city ${i}`, `City ${i}`][i % 4]!,
    [`Mason ${i}`, 'Marble Mason', `Someone ${i}`][i % 3]!
  ]))
  const matches = (book: Pick<Book, 'title' | 'author'>) => /\bmarble/i.test(`${book.title} ${book.author}`)
  await eitherPlan(t, dbUrl, async (t, app) => {
    const { walk } = searcher(app, token)
    const books = (await db.query<Book>('SELECT id::int, title, author, year FROM books ORDER BY id')).rows
    const unchanged = new Map(books.filter(matches).map((book) => [book.id, book]))
    const changed = new Set<number>()
    let round = 0
    const { books: walked } = await walk('marble', 5, async (page) => {
      round++
      // Between pages: a book just listed moved down the order, where later pages read, another
      // moved to the top, a new match, one removed
      const moved = [page.at(-1)!.id, books[(round * 7) % books.length]!.id]
      for (const id of moved) {
        changed.add(id)
        unchanged.delete(id)
      }
      await call(app, token, { method: 'PUT', url: `/book/${moved[0]}`, payload: { title: `Marblestone ${round}`, author: 'Nobody' } })
      await call(app, token, { method: 'PUT', url: `/book/${moved[1]}`, payload: { title: 'Marble', author: 'Marble' } })
      const [created] = await create(app, token, [[`Marble new ${round}`, 'Marble']])
      changed.add(created!.id)
      const removed = books[(round * 11 + 3) % books.length]!.id
      changed.add(removed)
      unchanged.delete(removed)
      await call(app, token, { method: 'DELETE', url: `/book/${removed}` })
    })
    t.ok(round > 10, `${round} pages, with writes between them`)
    const counts = new Map<number, number>()
    for (const book of walked) counts.set(book.id, (counts.get(book.id) ?? 0) + 1)
    for (const [id, book] of unchanged) t.equal(counts.get(id), 1, `${book.title} / ${book.author}: listed once`)
    const strays = walked.filter((book) => !unchanged.has(book.id) && !changed.has(book.id))
    t.strictSame(strays, [], 'nothing else')
    // A book changed after the walk began is left out of the pages after the change: not listed
    // again at its new place
    t.strictSame([...counts].filter(([, count]) => count > 1), [], 'no book twice, the changed ones included')
  })
})

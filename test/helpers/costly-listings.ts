import type pg from 'pg'

/**
 * The kinds of `GET /books` that an outside probe found costly on a million books: filters that
 * no index bounds (docs/operations.md, The cost of a listing). On books whose titles hold the
 * word `the` and the trigram `eee`, each reads or rechecks every book.
 */
export const COSTLY_LISTINGS = [
  // Two letters: no trigram, every book read
  '/books?limit=1000&title=zq',
  // One character no trigram holds, sorted: the order's index walked to its end
  '/books?limit=1&sort=-title&title=%23',
  // A trigram that every title holds, each book rechecked with a 1,000-character pattern
  `/books?limit=1&title=${'e'.repeat(1000)}`,
  // Common words, the whole list without limit
  `/books?sort=title&title=${'the%20'.repeat(250)}`
]

/**
 * Inserts `count` books titled `The Reeel <n>`, in one statement, into a database whose indexes
 * the service builds when it starts (`createDatabaseWithBooks(t, 0)`): every title holds the
 * word `the` and the trigram `eee`, so no trigram narrows the probes above.
 */
export async function seedCostlyBooks (db: pg.Client, count: number): Promise<void> {
  await db.query(`INSERT INTO books (title, author, year)
    SELECT 'The Reeel ' || g, 'Author ' || g, g % 3000 FROM generate_series(1, $1::int) g`, [count])
}

/**
 * The table structure, as an ordered list of versioned steps. A step is never edited once it
 * has shipped: a change is a new step with the next version.
 */
export interface Migration {
  version: number
  name: string
  sql: string
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'create books',
    sql: `CREATE TABLE books (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      title text NOT NULL,
      author text NOT NULL,
      year integer NOT NULL
    )`
  }
]

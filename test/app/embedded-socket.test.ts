/**
 * `COPY ... FROM STDIN` on the embedded store's socket (src/db/embedded-socket.ts), as the
 * service's imports and psql send it: rows in, errors as PostgreSQL gives them with the
 * connection still usable, no other connection served in the middle of a copy, a copy left
 * unfinished by a connection that went away ended with it, and every other query untouched. On
 * a PGlite of its own, started as the service starts it.
 */
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { from as copyFrom, to as copyTo } from 'pg-copy-streams'
import t from 'tap'
import { embeddedDatabase, OWN_STORE } from '../helpers/database.js'
import { needsPrograms } from '../helpers/programs.js'
import { withTimeout } from '../helpers/wait.js'

const PSQL = '/usr/lib/postgresql/15/bin/psql'

/** `COPY ... FROM STDIN` of `data` on `client`: resolves when PostgreSQL has answered it. */
function copyIn (client: pg.Client, statement: string, data: string | Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const copy = client.query(copyFrom(statement))
    copy.on('error', reject).on('finish', resolve)
    copy.end(data)
  })
}

/** What `COPY ... TO STDOUT` sends, whole. */
async function copyOut (client: pg.Client, statement: string): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of client.query(copyTo(statement))) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

/** `count` lines of COPY's text format: `n<TAB>text n`, from `first`. */
function rows (count: number, first = 1): string {
  return Array.from({ length: count }, (_, i) => `${first + i}\ttext ${first + i}\n`).join('')
}

/** A connection left waiting would never answer: each wait is bounded. */
const WAIT_MS = 5_000

t.test('COPY FROM STDIN on the embedded store', { skip: OWN_STORE }, async (t) => {
  const url = await embeddedDatabase(t)
  const connect = async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    return client
  }
  const [a, b] = [await connect(), await connect()]
  t.teardown(() => Promise.all([a.end(), b.end()]))
  await a.query('CREATE TABLE t (n int8 PRIMARY KEY, s text NOT NULL)')
  const count = async (client = a) => Number((await client.query<{ count: string }>('SELECT count(*) FROM t')).rows[0]!.count)

  t.test('a transaction of several copies: every row, and no other connection served until it ends', async (t) => {
    await a.query('BEGIN')
    await copyIn(a, 'COPY t (n, s) FROM STDIN', rows(20_000))
    // Sent while the transaction is open: answered only once it has committed
    const seen = count(b)
    await copyIn(a, 'copy  public.t(n,s)  from  stdin', rows(20_000, 20_001))
    await copyIn(a, 'COPY "t" FROM STDIN', rows(20_000, 40_001))
    t.equal(await count(), 60_000, 'the transaction sees its rows')
    await a.query('COMMIT')
    t.equal(await withTimeout(seen, WAIT_MS, 'the other connection'), 60_000, 'the other connection, after the commit')
    t.equal((await a.query('SELECT s FROM t WHERE n = 59999')).rows[0].s, 'text 59999')
  })

  t.test('data the table refuses: PostgreSQL\'s error, nothing stored, the connection usable', async (t) => {
    const before = await count()
    await t.rejects(copyIn(a, 'COPY t FROM STDIN', `${rows(10, 100_001)}x\tnot a number\n${rows(10, 100_011)}`),
      { code: '22P02', message: /invalid input syntax for type bigint: "x"/ })
    await t.rejects(copyIn(a, 'COPY t FROM STDIN', rows(3, 1)), { code: '23505' }, 'a duplicate key')
    t.equal(await count(), before)
    t.strictSame((await a.query('SELECT 1 AS one')).rows, [{ one: 1 }])
  })

  t.test('a statement that fails: its error, answered after the data, the connection usable', async (t) => {
    await t.rejects(copyIn(a, 'COPY missing FROM STDIN', rows(5)), { code: '42P01' })
    await t.rejects(copyIn(a, 'COPY t (n, nope) FROM STDIN', rows(5)), { code: '42703' })
    t.strictSame((await a.query('SELECT 2 AS two')).rows, [{ two: 2 }])
  })

  t.test('a copy the client gives up (CopyFail): rolled back, the connection usable', async (t) => {
    const before = await count()
    const failed = new Promise<Error>((resolve) => {
      const copy = a.query(copyFrom('COPY t FROM STDIN'))
      copy.on('error', resolve)
      // Its callback runs once the CopyInResponse has come and the rows are sent
      copy.write(rows(100, 200_001), () => copy.destroy(new Error('given up')))
    })
    t.match((await failed).message, /given up/)
    t.equal(await count(), before)
    t.strictSame((await a.query('SELECT 3 AS three')).rows, [{ three: 3 }])
  })

  t.test('a connection that goes away in the middle of a copy: nothing of it stored, the others served', async (t) => {
    const before = await count()
    const leaving = await connect()
    leaving.on('error', () => {})
    const copy = leaving.query(copyFrom('COPY t FROM STDIN'))
    copy.on('error', () => {})
    // Sent once the copy has begun: no other connection is served until it ends
    await new Promise((resolve) => copy.write(rows(100, 300_001), resolve))
    const pending = count(b)
    leaving.connection.stream.destroy()
    t.equal(await withTimeout(pending, WAIT_MS, 'a connection after the copy\'s end'), before)
    t.equal(await count(), before)
  })

  t.test('what is not COPY FROM STDIN passes untouched', async (t) => {
    const copied = await withTimeout(copyOut(a, "COPY (SELECT 'from stdin' AS s, 1 AS n) TO STDOUT"), WAIT_MS, 'COPY TO')
    t.equal(copied.toString(), 'from stdin\t1\n')
    await a.query('CREATE TABLE "odd ""name""" (s text)')
    await copyIn(a, 'COPY "odd ""name""" (s) FROM STDIN', 'from stdin\n')
    t.strictSame((await a.query('SELECT s FROM "odd ""name"""')).rows, [{ s: 'from stdin' }])
    t.strictSame((await a.query("SELECT 'COPY t FROM STDIN' AS q")).rows, [{ q: 'COPY t FROM STDIN' }])
  })

  t.test('psql\'s \\copy, as text and as binary', { skip: needsPrograms(PSQL) }, async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'embedded-copy-'))
    t.teardown(() => rmSync(dir, { recursive: true, force: true }))
    const text = path.join(dir, 'rows.txt')
    writeFileSync(text, rows(1000, 400_001))
    const binary = path.join(dir, 'rows.bin')
    await a.query('CREATE TABLE u (n int8, s text)')
    writeFileSync(binary, await copyOut(a, 'COPY (SELECT n, s FROM t WHERE n BETWEEN 1 AND 500) TO STDOUT (FORMAT binary)'))
    const psql = (command: string) => promisify(execFile)(PSQL, [url, '-v', 'ON_ERROR_STOP=1', '-c', command])
    t.match((await psql(`\\copy t (n, s) FROM '${text}'`)).stdout, /COPY 1000/)
    t.match((await psql(`\\copy u FROM '${binary}' WITH (FORMAT binary)`)).stdout, /COPY 500/)
    t.strictSame((await a.query('SELECT count(*)::int AS u, (SELECT count(*)::int FROM t WHERE n > 400000) AS t FROM u')).rows, [{ u: 500, t: 1000 }])
    t.strictSame((await a.query('SELECT s FROM u WHERE n = 500')).rows, [{ s: 'text 500' }])
  })
})

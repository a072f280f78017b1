'use strict'
/**
 * The worker thread of `BENCH_STORE=pglite npm run bench:bulk` (tools/bench/bulk.cjs): an
 * embedded store as the service's own (src/db/embedded-worker.ts: PGlite with the service's
 * settings, served on a loopback port by src/db/embedded-socket.ts), with what the service's
 * store has not: PGlite's own COPY of a file, the reference for that store, run on the very
 * database the service uses without the socket between.
 *
 * Posts `{ port }` once listening, or `{ error }`. Messages: `{ copyIn: <csv file> }` answers `{ seconds }`,
 * `{ copyOut: true }` answers `{ seconds, bytes }`, each timed here around PGlite's own call;
 * 'stop' closes the server and the database and answers 'stopped'.
 */
const fs = require('node:fs')
const path = require('node:path')
const { parentPort } = require('node:worker_threads')

const DIST = path.join(__dirname, '..', '..', 'dist', 'src', 'db')

async function main () {
  const { PGlite } = await import('@electric-sql/pglite')
  const { pgliteOptions } = await import(path.join(DIST, 'embedded-settings.js'))
  const { serveOnLoopback } = await import(path.join(DIST, 'embedded-socket.js'))
  const db = await PGlite.create('memory://', pgliteOptions(PGlite.defaultStartParams))
  const { server, port } = await serveOnLoopback(db)
  const timed = async (run) => {
    const started = performance.now()
    const answer = await run()
    return { seconds: (performance.now() - started) / 1000, ...answer }
  }
  parentPort.on('message', (message) => {
    if (message === 'stop') {
      server.stop().then(() => db.close()).finally(() => parentPort.postMessage('stopped'))
      return
    }
    const step = message.copyIn !== undefined
      ? timed(async () => {
        await db.query("COPY books (title, author, year) FROM '/dev/blob' WITH (FORMAT csv, HEADER)", [], { blob: await fs.openAsBlob(message.copyIn) })
        return {}
      })
      : timed(async () => {
        const { blob } = await db.query("COPY (SELECT id, title, author, year FROM books ORDER BY id) TO '/dev/blob' WITH (FORMAT csv)")
        return { bytes: blob.size }
      })
    step.then((answer) => parentPort.postMessage(answer), (err) => parentPort.postMessage({ error: err.message }))
  })
  parentPort.postMessage({ port })
}

main().catch((err) => parentPort.postMessage({ error: err.message }))

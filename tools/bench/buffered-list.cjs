'use strict'
/**
 * The buffering baseline of tools/bench/stream.cjs: the whole list read with one query into one
 * array, then one JSON string, then one write. It answers `GET /books` with the service's
 * envelope, byte for byte, so both are measured with the same client. No statement timeout: what
 * is measured is what buffering costs, not the service's 3 s limit. A failure (V8's string limit,
 * the heap limit) is answered 500 with the error's name and message when the process survives it.
 *
 * Environment: DB_URL, PORT. Listens on 127.0.0.1.
 */
const http = require('node:http')
const pg = require('pg')

const pool = new pg.Pool({
  connectionString: process.env.DB_URL,
  max: 2,
  application_name: 'bookkeeping-bench-baseline'
})
pool.on('error', (err) => console.error(`idle database connection lost: ${err.message}`))

function send (res, status, message, data) {
  const body = JSON.stringify({ status, message, data })
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body)
  })
  res.end(body)
}

async function list (res) {
  const { rows } = await pool.query('SELECT id, title, author, year FROM books ORDER BY id')
  // bigint arrives as a string; the service answers a JSON number
  for (const row of rows) row.id = Number(row.id)
  send(res, 200, 'Books retrieved successfully', rows)
}

const server = http.createServer((req, res) => {
  if (req.method !== 'GET' || req.url !== '/books') {
    send(res, 404, 'Route not found', null)
    return
  }
  list(res).catch((err) => {
    console.error(err.stack)
    if (!res.headersSent) send(res, 500, `${err.name}: ${err.message}`, null)
    else res.destroy(err)
  })
})

server.listen(Number(process.env.PORT), '127.0.0.1')

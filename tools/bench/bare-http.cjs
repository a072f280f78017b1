'use strict'

/**
 * The floor of `npm run bench`: `node:http` alone answering every request with one small JSON
 * envelope (a book, as GET /book/<id> does), with no token, no database and no log. What any
 * HTTP server on this Node costs per request; the service's CPU per request is read against it.
 *
 *   PORT=N node tools/bench/bare-http.cjs
 */

const http = require('node:http')

const BODY = JSON.stringify({
  status: 200, message: 'Book retrieved successfully', data: { id: 1, title: 'Title 1', author: 'Author 1', year: 1901 }
})
const HEADERS = { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(BODY) }

http.createServer((req, res) => {
  // The request is read to its end, as a server must before it answers on a kept-alive connection
  req.resume()
  res.writeHead(200, HEADERS)
  res.end(BODY)
}).listen(Number(process.env.PORT), '127.0.0.1')

'use strict'

/**
 * The benchmark's yardstick: the typical hand-written `node:http` + `pg` server for the five
 * benchmarked requests, doing the least a correct answer needs. Same contract as the service
 * for them (bare HS256 token in `Authorization`, the `{status, message, data}` envelope with the
 * same messages), none of its operational extras (no logs, timeouts, rate limit, request ids).
 *
 *   node tools/bench/reference.cjs [--port=N] [--host=H] [--db-url=URL] [--secret=S]
 *                                [--username=U] [--password=P]
 *
 * Each option falls back to PORT, HOST, DB_URL, SECRET_TOKEN, AUTH_USERNAME, AUTH_PASSWORD.
 */

const { createHash, createHmac, timingSafeEqual } = require('node:crypto')
const http = require('node:http')
const pg = require('pg')

const args = Object.fromEntries(process.argv.slice(2).map((arg) => {
  const match = /^--([^=]+)=(.*)$/s.exec(arg)
  if (match === null) throw new Error(`bad argument ${arg}, expected --name=value`)
  return [match[1], match[2]]
}))

const PORT = Number(args.port ?? process.env.PORT ?? 8081)
const HOST = args.host ?? process.env.HOST ?? '127.0.0.1'
const DB_URL = args['db-url'] ?? process.env.DB_URL
const SECRET = args.secret ?? process.env.SECRET_TOKEN
const USERNAME = args.username ?? process.env.AUTH_USERNAME
const PASSWORD = args.password ?? process.env.AUTH_PASSWORD
if (!DB_URL || !SECRET || !USERNAME || !PASSWORD) {
  console.error('reference: DB_URL, SECRET_TOKEN, AUTH_USERNAME and AUTH_PASSWORD are required')
  process.exit(1)
}

// bigint ids arrive as strings; they stay far below 2^53
pg.types.setTypeParser(20, Number)
const pool = new pg.Pool({ connectionString: DB_URL })
pool.on('error', () => {})

const COLUMNS = 'id, title, author, year'
const FIND = `SELECT ${COLUMNS} FROM books WHERE id = $1`
const LIST = `SELECT ${COLUMNS} FROM books ORDER BY id`
const INSERT = `INSERT INTO books (title, author, year) VALUES ($1, $2, $3) RETURNING ${COLUMNS}`
const UPDATE = `UPDATE books SET title = COALESCE($2, title), author = COALESCE($3, author),
  year = COALESCE($4, year) WHERE id = $1 RETURNING ${COLUMNS}`
const EXISTS = 'SELECT 1 FROM books WHERE id = $1'

const JWT_HEADER = Buffer.from('{"alg":"HS256","typ":"JWT"}').toString('base64url')
const INVALID_TOKEN = 'Invalid token'
const BOOK_ID = /^\/book\/([1-9][0-9]{0,14})$/

const digest = (value) => createHash('sha256').update(value).digest()
const USERNAME_DIGEST = digest(USERNAME)
const PASSWORD_DIGEST = digest(PASSWORD)

function send (res, status, message, data = null) {
  const body = JSON.stringify({ status, message, data })
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

const sign = (input) => createHmac('sha256', SECRET).update(input).digest('base64url')

/** null when the token is good, else the 401 message. */
function checkToken (token) {
  if (!token) return 'Authorization token required'
  const parts = token.split('.')
  if (parts.length !== 3) return INVALID_TOKEN
  const expected = Buffer.from(sign(`${parts[0]}.${parts[1]}`))
  const given = Buffer.from(parts[2])
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return INVALID_TOKEN
  let payload
  try {
    payload = JSON.parse(Buffer.from(parts[1], 'base64url').toString())
  } catch {
    return INVALID_TOKEN
  }
  if (typeof payload?.exp !== 'number' || payload.exp * 1000 <= Date.now()) return INVALID_TOKEN
  return null
}

function readJson (req) {
  return new Promise((resolve, reject) => {
    const chunks = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', () => {
      try {
        const value = JSON.parse(Buffer.concat(chunks).toString())
        resolve(value !== null && typeof value === 'object' && !Array.isArray(value) ? value : undefined)
      } catch {
        resolve(undefined)
      }
    })
    req.on('error', reject)
  })
}

const isText = (value) => typeof value === 'string' && value.trim() !== '' && value.length <= 1000 && !value.includes('\0')
const isYear = (value) => Number.isInteger(value) && value >= -2147483648 && value <= 2147483647

/** The fields of a book body, or null; with `partial` every field may be absent. */
function bookFields (body, partial) {
  if (body === undefined) return null
  const { title, author, year } = body
  if (!(title === undefined ? partial : isText(title))) return null
  if (!(author === undefined ? partial : isText(author))) return null
  if (!(year === undefined ? partial : isYear(year))) return null
  return [title ?? null, author ?? null, year ?? null]
}

async function token (req, res) {
  const body = await readJson(req)
  if (typeof body?.username !== 'string' || typeof body.password !== 'string') {
    return send(res, 400, 'Invalid request payload')
  }
  const usernameMatches = timingSafeEqual(digest(body.username), USERNAME_DIGEST)
  const passwordMatches = timingSafeEqual(digest(body.password), PASSWORD_DIGEST)
  if (!(usernameMatches && passwordMatches)) return send(res, 401, 'Invalid credentials')
  const payload = Buffer.from(JSON.stringify({ exp: Math.floor(Date.now() / 1000) + 900 })).toString('base64url')
  send(res, 200, 'Token generated successfully', { token: `${JWT_HEADER}.${payload}.${sign(`${JWT_HEADER}.${payload}`)}` })
}

async function route (req, res) {
  const path = req.url
  const method = req.method
  if (path === '/token') {
    if (method !== 'POST') return send(res, 405, 'Method not allowed')
    return token(req, res)
  }
  if (path !== '/books' && path !== '/book' && !path.startsWith('/book/')) return send(res, 404, 'Route not found')
  const unauthorized = checkToken(req.headers.authorization)
  if (unauthorized !== null) return send(res, 401, unauthorized)

  if (path === '/books') {
    if (method !== 'GET') return send(res, 405, 'Method not allowed')
    const { rows } = await pool.query({ name: 'list', text: LIST })
    return send(res, 200, 'Books retrieved successfully', rows)
  }
  if (path === '/book') {
    if (method !== 'POST') return send(res, 405, 'Method not allowed')
    const fields = bookFields(await readJson(req), false)
    if (fields === null) return send(res, 400, 'Invalid input')
    const { rows } = await pool.query({ name: 'insert', text: INSERT, values: fields })
    return send(res, 201, 'Book created successfully', rows[0])
  }
  const id = BOOK_ID.exec(path)?.[1]
  if (id === undefined) return send(res, 404, 'Book not found')
  if (method === 'GET') {
    const { rows } = await pool.query({ name: 'find', text: FIND, values: [id] })
    if (rows.length === 0) return send(res, 404, 'Book not found')
    return send(res, 200, 'Book retrieved successfully', rows[0])
  }
  if (method === 'PUT') {
    const fields = bookFields(await readJson(req), true)
    if (fields === null) {
      // The spec looks the book up before reading the body: a missing book is 404 even then
      const { rowCount } = await pool.query({ name: 'exists', text: EXISTS, values: [id] })
      return rowCount === 0 ? send(res, 404, 'Book not found') : send(res, 400, 'Invalid input')
    }
    const { rows } = await pool.query({ name: 'update', text: UPDATE, values: [id, ...fields] })
    if (rows.length === 0) return send(res, 404, 'Book not found')
    return send(res, 200, 'Book updated successfully', rows[0])
  }
  return send(res, 405, 'Method not allowed')
}

const server = http.createServer((req, res) => {
  route(req, res).catch(() => {
    if (!res.headersSent) send(res, 500, 'Internal server error')
    else res.destroy()
  })
})

server.listen(PORT, HOST)

function stop () {
  server.close()
  server.closeAllConnections()
  pool.end().finally(() => process.exit(0))
}
process.once('SIGTERM', stop)
process.once('SIGINT', stop)

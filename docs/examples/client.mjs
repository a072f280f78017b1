/**
 * A client of the bookkeeping API with nothing but `fetch`: Node 20+ or a browser (served over
 * https or from localhost, where `crypto.randomUUID` exists). See docs/clients.md.
 *
 * Every method returns the `data` of the envelope, or throws an ApiError.
 * - The token goes in `Authorization` bare, as POST /token returned it (never `Bearer ...`).
 * - `401 Invalid token` (the token expired): log in again, once, and repeat the call.
 * - `429` or `503` with `Retry-After`: wait that long and repeat, at most `maxAttempts` tries in
 *   all; a wait over `maxWaitSeconds` is not waited, the answer is thrown instead.
 * - A create carries an `Idempotency-Key`, the same on every repeat: it is stored once.
 *
 * Run as a script, it logs in and does one round of create, list, read, update and delete:
 *   BOOKKEEPING_URL=http://localhost:8080 BOOKKEEPING_USERNAME=admin BOOKKEEPING_PASSWORD=change-me \
 *     node docs/examples/client.mjs
 */

/** An answer other than a success: its status, its envelope's message, its X-Request-Id. */
export class ApiError extends Error {
  constructor (status, message, requestId) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.requestId = requestId
  }
}

export class BookkeepingClient {
  #loggingIn = null

  constructor ({ baseUrl, username, password, token = null, maxAttempts = 3, maxWaitSeconds = 60, log = () => {} }) {
    Object.assign(this, { baseUrl, username, password, token, maxAttempts, maxWaitSeconds, log })
  }

  /** POST /token. Calls that find the token expired at the same time share one login. */
  login () {
    this.#loggingIn ??= this.#send('POST', '/token', { username: this.username, password: this.password })
      .then((data) => { this.token = data.token; return this.token })
      .finally(() => { this.#loggingIn = null })
    return this.#loggingIn
  }

  /** `idempotencyKey`: pass your own to repeat a create yourself (after a network error). */
  createBook (book, idempotencyKey = crypto.randomUUID()) {
    // A Structured Field string: the key in double quotes
    return this.#authorized('POST', '/book', book, { 'Idempotency-Key': `"${idempotencyKey}"` })
  }

  listBooks () { return this.#authorized('GET', '/books') }
  getBook (id) { return this.#authorized('GET', `/book/${id}`) }
  updateBook (id, changes) { return this.#authorized('PUT', `/book/${id}`, changes) }
  deleteBook (id) { return this.#authorized('DELETE', `/book/${id}`) }

  async #authorized (method, path, body, headers = {}) {
    const used = this.token ?? await this.login()
    try {
      return await this.#send(method, path, body, { ...headers, Authorization: used })
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 401 || err.message !== 'Invalid token') throw err
      // Another call may have logged in meanwhile: then its token is the one to use
      if (this.token === used) {
        this.log(`${method} ${path}: 401 Invalid token, logging in again`)
        await this.login()
      }
      return this.#send(method, path, body, { ...headers, Authorization: this.token })
    }
  }

  async #send (method, path, body, headers = {}) {
    if (body !== undefined) headers = { ...headers, 'Content-Type': 'application/json' }
    for (let attempt = 1; ; attempt++) {
      const response = await fetch(new URL(path, this.baseUrl), {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body)
      })
      // Not every answer is ours: a proxy in front may answer with a page of its own
      const envelope = await response.json().catch(() => null)
      if (response.ok) return envelope.data
      const wait = retryAfterSeconds(response)
      if ((response.status === 429 || response.status === 503) && wait !== null &&
          wait <= this.maxWaitSeconds && attempt < this.maxAttempts) {
        this.log(`${method} ${path}: ${response.status} ${envelope?.message}, waiting ${wait} s (attempt ${attempt} of ${this.maxAttempts})`)
        await new Promise((resolve) => setTimeout(resolve, wait * 1000))
        continue
      }
      throw new ApiError(response.status, envelope?.message ?? `HTTP ${response.status}`, response.headers.get('X-Request-Id'))
    }
  }
}

/** `Retry-After` in seconds (it may also be an HTTP date), or null without one. */
function retryAfterSeconds (response) {
  const value = response.headers.get('Retry-After')
  if (value === null) return null
  const seconds = /^\d+$/.test(value) ? Number(value) : (Date.parse(value) - Date.now()) / 1000
  return Number.isNaN(seconds) ? null : Math.max(0, Math.ceil(seconds))
}

async function main (env) {
  const client = new BookkeepingClient({
    baseUrl: env.BOOKKEEPING_URL ?? 'http://localhost:8080',
    username: env.BOOKKEEPING_USERNAME,
    password: env.BOOKKEEPING_PASSWORD,
    // A token kept from earlier, if any; an expired one is replaced at the first call
    token: env.BOOKKEEPING_TOKEN || null,
    log: (line) => console.error(line)
  })
  const created = await client.createBook({ title: 'Dune', author: 'Frank Herbert', year: 1965 })
  console.log('created', JSON.stringify(created))
  console.log('listed', JSON.stringify(await client.listBooks()))
  console.log('read', JSON.stringify(await client.getBook(created.id)))
  console.log('updated', JSON.stringify(await client.updateBook(created.id, { year: 1966 })))
  console.log('deleted', JSON.stringify(await client.deleteBook(created.id)))
}

// Node 20.11+ knows the file it runs; in a browser neither `process` nor the file name exists
if (import.meta.filename !== undefined && import.meta.filename === globalThis.process?.argv[1]) {
  await main(process.env).catch((err) => {
    console.error(err instanceof ApiError ? `${err.status} ${err.message} (request ${err.requestId})` : err)
    process.exitCode = 1
  })
}

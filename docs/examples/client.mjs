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
 * - `walkBooks(query)` follows each page's `Link` to the next; `updateBook` and `deleteBook` take
 *   the `ETag` of `getBookWithEtag` as `If-Match` (a book changed since: ApiError 412).
 *
 * Run as a script, it logs in and does one round of create, list, walk page by page, read,
 * update and delete:
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
      .then(({ data }) => { this.token = data.token; return this.token })
      .finally(() => { this.#loggingIn = null })
    return this.#loggingIn
  }

  /** `idempotencyKey`: pass your own to repeat a create yourself (after a network error). */
  createBook (book, idempotencyKey = crypto.randomUUID()) {
    // A Structured Field string: the key in double quotes
    return this.#authorizedData('POST', '/book', book, { 'Idempotency-Key': `"${idempotencyKey}"` })
  }

  listBooks () { return this.#authorizedData('GET', '/books') }

  /**
   * GET /books page by page: yields each page's books, then follows the page's `Link` to the
   * next until a page has none (the last may be empty). `query`: `limit`, `sort`, `title`,
   * `author`, `year_from`, `year_to` (docs/api.md); without `limit`, one page of them all.
   */
  async * walkBooks (query = {}) {
    let path = `/books?${new URLSearchParams(query)}`
    while (path !== null) {
      const { data, headers } = await this.#authorized('GET', path)
      yield data
      path = nextPage(headers.get('Link'))
    }
  }

  /**
   * The books that `q` finds (docs/api.md, Search), best first, page by page as `walkBooks`
   * yields them; `query`: `limit` and the other parameters of a listing.
   */
  searchBooks (q, query = {}) { return this.walkBooks({ ...query, q }) }

  getBook (id) { return this.#authorizedData('GET', `/book/${id}`) }

  /** The book and its `ETag`: the version to name in `If-Match` when changing or deleting it. */
  async getBookWithEtag (id) {
    const { data, headers } = await this.#authorized('GET', `/book/${id}`)
    return { book: data, etag: headers.get('ETag') }
  }

  /**
   * `ifMatch`, optional: an `ETag` of the book; if the book has changed since, the answer is
   * ApiError 412 `Precondition failed` and nothing changes.
   */
  updateBook (id, changes, ifMatch) {
    return this.#authorizedData('PUT', `/book/${id}`, changes, ifMatchHeader(ifMatch))
  }

  deleteBook (id, ifMatch) {
    return this.#authorizedData('DELETE', `/book/${id}`, undefined, ifMatchHeader(ifMatch))
  }

  async #authorizedData (method, path, body, headers) {
    return (await this.#authorized(method, path, body, headers)).data
  }

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

  /** A success's envelope `data` and response headers, or an ApiError. */
  async #send (method, path, body, headers = {}) {
    if (body !== undefined) headers = { ...headers, 'Content-Type': 'application/json' }
    for (let attempt = 1; ; attempt++) {
      const response = await fetch(new URL(path, this.baseUrl), {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body)
      })
      // Not every answer is ours: a proxy in front may answer with a page of its own
      const envelope = await response.json().catch(() => null)
      if (response.ok) return { data: envelope.data, headers: response.headers }
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

/** Without a tag, no precondition: the write is done whatever the book's version. */
function ifMatchHeader (ifMatch) {
  return ifMatch == null ? {} : { 'If-Match': ifMatch }
}

/** The path of the next page in a listing's `Link` (`</books?...>; rel="next"`), or null on the last. */
function nextPage (link) {
  return link?.match(/<([^>]*)>\s*;\s*rel="next"/)?.[1] ?? null
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
  // Herbert's books, one a page: a few pages to show even on a service with many books
  const pages = []
  for await (const page of client.walkBooks({ limit: 1, sort: 'title', author: 'herbert' })) pages.push(page)
  console.log('walked', JSON.stringify(pages))
  // A search, best first, despite its typo: its first page of two
  const { value: found } = await client.searchBooks('herbret', { limit: 2 }).next()
  console.log('searched', JSON.stringify(found))
  const { book, etag } = await client.getBookWithEtag(created.id)
  console.log('read', JSON.stringify(book))
  // Based on the book as read: had it changed since, the update would be refused (412)
  console.log('updated', JSON.stringify(await client.updateBook(created.id, { year: 1966 }, etag)))
  console.log('deleted', JSON.stringify(await client.deleteBook(created.id)))
}

// Node 20.11+ knows the file it runs; in a browser neither `process` nor the file name exists
if (import.meta.filename !== undefined && import.meta.filename === globalThis.process?.argv[1]) {
  await main(process.env).catch((err) => {
    console.error(err instanceof ApiError ? `${err.status} ${err.message} (request ${err.requestId})` : err)
    process.exitCode = 1
  })
}

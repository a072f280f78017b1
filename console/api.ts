/**
 * The console's calls: openapi-fetch over the types generated from the service's own
 * `/openapi.json` (bookkeeping-api.d.ts, `npm run client:types`), so a path, a body or an answer
 * that does not match the API fails the type check.
 *
 * The token is the one `POST /token` gave, kept in `sessionStorage` (gone with the tab, never in
 * `localStorage`, a cookie or a URL) and read at every call. When a book call is answered 401
 * (the token expired after its 15 minutes, or was dropped), `reauthenticate` asks the person to
 * sign in again, and the call is then sent again as it was: nothing they typed is lost.
 *
 * Edits and deletes name the version of the book they were made on (`If-Match` with its `ETag`),
 * so that a change someone else saved meanwhile is answered 412 instead of being overwritten.
 */
import createClient from 'openapi-fetch'
import type { paths } from './bookkeeping-api.js'
import type { Book } from './book-list.js'
import { retryAfterSeconds } from './retry-after.js'

const TOKEN_KEY = 'bookkeeping.token'

/** An answer other than a success, with what a person needs to act on it. */
export class ApiFailure extends Error {
  constructor (
    /** The HTTP status; 0 when no answer came */
    readonly status: number,
    /** The envelope's message, as the API wrote it */
    message: string,
    readonly requestId: string | null,
    /** Seconds to wait from `Retry-After`, when the answer has one */
    readonly retryAfter: number | null
  ) {
    super(message)
    this.name = 'ApiFailure'
  }
}

/** The person chose to sign out rather than sign in again: the interrupted call is dropped. */
export class SignedOut extends Error {
  constructor () {
    super('Signed out')
    this.name = 'SignedOut'
  }
}

export const session = {
  get token (): string | null {
    return sessionStorage.getItem(TOKEN_KEY)
  },
  set token (value: string | null) {
    if (value === null) sessionStorage.removeItem(TOKEN_KEY)
    else sessionStorage.setItem(TOKEN_KEY, value)
  }
}

/**
 * Asks the person to sign in again and resolves once they have (rejects with SignedOut if they
 * sign out instead). Set by the page; calls that find the token refused at the same time share
 * one prompt.
 */
let reauthenticate: () => Promise<void> = async () => { throw new SignedOut() }
let prompting: Promise<void> | null = null

export function onReauthenticate (prompt: () => Promise<void>): void {
  reauthenticate = prompt
}

function signInAgain (): Promise<void> {
  prompting ??= reauthenticate().finally(() => { prompting = null })
  return prompting
}

/** A network failure (no answer at all) as a failure a person can retry. */
export async function fetchOrFail (request: Request): Promise<Response> {
  try {
    return await fetch(request)
  } catch {
    throw new ApiFailure(0, 'No answer from the service', null, null)
  }
}

/**
 * A book call, which `send` makes with the token (in `Authorization`, bare): on a 401, sign in
 * again and send it again. Calls that are not fetch (an upload with progress) come through here too.
 */
export async function withToken (send: (token: string) => Promise<Response>): Promise<Response> {
  for (;;) {
    const token = session.token
    if (token === null) {
      await signInAgain()
      continue
    }
    const response = await send(token)
    // Refused, unless someone signed in meanwhile and the token already changed
    if (response.status !== 401) return response
    if (session.token === token) await signInAgain()
  }
}

function authorizedFetch (request: Request): Promise<Response> {
  return withToken((token) => {
    const attempt = request.clone()
    attempt.headers.set('Authorization', token)
    return fetchOrFail(attempt)
  })
}

const baseUrl = location.origin
// The envelope's answers only: GET /books also documents CSV and NDJSON, which this client never asks for
const publicApi = createClient<paths, 'application/json'>({ baseUrl, fetch: fetchOrFail })
const booksApi = createClient<paths, 'application/json'>({ baseUrl, fetch: authorizedFetch })

/** A successful answer: its message, as the API wrote it, and its data. */
export interface Answer<T> { message: string, data: T }

/** The envelope of a successful answer, or the ApiFailure it was. */
function answerOf<T> ({ data, error, response }: { data?: Answer<T>, error?: unknown, response: Response }): Answer<T> {
  if (data !== undefined) return data
  throw failureOf(response, error)
}

/** The failure an answer read without openapi-fetch is: its envelope's message, if it has one. */
export async function failureOfAnswer (response: Response): Promise<ApiFailure> {
  return failureOf(response, await response.json().catch(() => undefined))
}

function failureOf (response: Response, error?: unknown): ApiFailure {
  const message = (error as { message?: unknown } | undefined)?.message
  return new ApiFailure(response.status,
    typeof message === 'string' ? message : `HTTP ${response.status} ${response.statusText}`.trim(),
    response.headers.get('X-Request-Id'), retryAfterSeconds(response))
}

/** Signs in: the token is kept for the calls that follow. */
export async function signIn (username: string, password: string): Promise<void> {
  session.token = answerOf(await publicApi.POST('/token', { body: { username, password } })).data.token
}

export function signOut (): void {
  session.token = null
}

/**
 * `GET /books`, as a stream of text: the service streams a long listing, and the console shows
 * the first rows before the rest has come (listing-parser.ts).
 */
export async function listBooks (signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
  const { data, error, response } = await booksApi.GET('/books', { parseAs: 'stream', signal })
  if (data == null) throw failureOf(response, error)
  return data
}

/**
 * `GET /books/changes` after the change `lastEventId` names ('' for from now on): the feed as a
 * stream of text (change-feed.ts), which `signal` ends.
 */
export async function followChanges (lastEventId: string, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
  const header = lastEventId === '' ? {} : { 'last-event-id': lastEventId }
  const { data, error, response } = await booksApi.GET('/books/changes', { params: { header }, parseAs: 'stream', signal })
  if (data == null) throw failureOf(response, error)
  return data
}

/** The query of `GET /books` for a page: its limit, order, filters and cursor. */
export type ListQuery = NonNullable<paths['/books']['get']['parameters']['query']>

/** A page of books and the query of the next page (its `Link`), or null after the last. */
export interface Page { books: Book[], next: ListQuery | null }

/** One page of `GET /books`, which `signal` cancels (a filter typed on, a list left). */
export async function listPage (query: ListQuery, signal: AbortSignal): Promise<Page> {
  const answer = await booksApi.GET('/books', { params: { query }, signal })
  return { books: answerOf(answer).data, next: nextQuery(answer.response.headers.get('Link')) }
}

/** The query of the page a `Link: </books?...>; rel="next"` names, or null without one. */
function nextQuery (link: string | null): ListQuery | null {
  const target = /<([^>]*)>\s*;\s*rel="?next"?/.exec(link ?? '')?.[1]
  if (target === undefined) return null
  return Object.fromEntries(new URL(target, location.origin).searchParams) as ListQuery
}

/** A book as stored now, and its version: what an edit or a delete is checked against. */
export interface Versioned { book: Book, etag: string }

/** The `ETag` of an answer; every book answer has one, so its absence is a failure. */
function etagOf (response: Response): string {
  const etag = response.headers.get('ETag')
  if (etag === null) throw new ApiFailure(response.status, 'The answer carried no ETag', response.headers.get('X-Request-Id'), null)
  return etag
}

/** `GET /book/<id>`: the book and its `ETag`. */
export async function readBook (id: number): Promise<Versioned> {
  const answer = await booksApi.GET('/book/{id}', { params: { path: { id: String(id) } } })
  return { book: answerOf(answer).data, etag: etagOf(answer.response) }
}

/**
 * `POST /book` with an `Idempotency-Key`: a create repeated with the same key (after a 503, or
 * an answer that never came) is stored once.
 */
export async function createBook (book: Omit<Book, 'id'>, idempotencyKey: string): Promise<Answer<Book>> {
  return answerOf(await booksApi.POST('/book', {
    body: book,
    // A Structured Field string: the key in double quotes
    params: { header: { 'idempotency-key': `"${idempotencyKey}"` } }
  }))
}

/** `PUT /book/<id>` of the version `etag` names; a 412 failure when the book changed since. */
export async function updateBook (id: number, changes: Partial<Omit<Book, 'id'>>, etag: string): Promise<Answer<Book>> {
  return answerOf(await booksApi.PUT('/book/{id}', { params: { path: { id: String(id) }, header: { 'if-match': etag } }, body: changes }))
}

/** `DELETE /book/<id>` of the version `etag` names; a 412 failure when the book changed since. */
export async function deleteBook (id: number, etag: string): Promise<Answer<null>> {
  // openapi-fetch 0.17 types a `data` that can only be null as absent (docs/examples/typed-client.ts)
  const { data, error, response } = await booksApi.DELETE('/book/{id}', { params: { path: { id: String(id) }, header: { 'if-match': etag } } })
  return answerOf({ data: data === undefined ? undefined : { message: data.message, data: null }, error, response })
}

/**
 * A random key for one create. `crypto.randomUUID` exists only on secure origins (HTTPS or
 * localhost); the console may be served over plain HTTP on a private network.
 */
export function newIdempotencyKey (): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16))
  bytes[6] = (bytes[6]! & 0x0f) | 0x40
  bytes[8] = (bytes[8]! & 0x3f) | 0x80
  const hex = [...bytes].map((byte) => byte.toString(16).padStart(2, '0')).join('')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

/**
 * A client of GET /books/changes for the tests: a real HTTP request whose body is read as the
 * WHATWG event stream format says (fields up to a blank line; comments; `retry`), with what it
 * received kept for the test to look at. It reconnects when the test says so, or by itself after
 * `follow()`, with the last id it received as `Last-Event-ID`, as a browser's EventSource does.
 */
import { request as httpRequest, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http'
import { waitUntil } from './wait.js'

export interface FeedEvent {
  /** The `id` field of the event, if it had one */
  id?: string
  /** `message` when the event named none */
  event: string
  data: string
}

/** A book's change as the feed sends it: the kind and the book's JSON. */
export interface BookChange {
  id: string
  kind: string
  book: { id: number, title?: string, author?: string, year?: number }
}

export interface FeedAnswer {
  status: number
  headers: IncomingHttpHeaders
  /** The body of an answer that is not a feed (an envelope) */
  body?: string
}

export class FeedClient {
  /** Every event received, over every connection, in order */
  readonly events: FeedEvent[] = []
  /** Comment lines received (`: keep-alive`), with when each came */
  readonly comments: Array<{ text: string, at: number }> = []
  /** The `retry` values received */
  readonly retries: number[] = []
  /** The id of the last event that had one: what a reconnection sends */
  lastEventId: string | undefined
  /** Connections whose response ended (the service ended it) */
  ends = 0
  /** The status each connection was answered, in order */
  readonly statuses: number[] = []
  /** Connections opened by `follow()` after the first */
  reconnections = 0
  private following = false
  private request: ClientRequest | null = null
  private response: IncomingMessage | null = null
  private pending = ''
  private fields: { id?: string, event?: string, data: string[] } = { data: [] }

  constructor (private readonly baseUrl: string, public token: string) {}

  /** Opens the feed, with `lastEventId` (default: the last received, if any), and answers its status. */
  connect (lastEventId: string | undefined = this.lastEventId, extraHeaders: Record<string, string> = {}): Promise<FeedAnswer> {
    this.close()
    this.pending = ''
    this.fields = { data: [] }
    const headers: Record<string, string> = { authorization: this.token, accept: 'text/event-stream', ...extraHeaders }
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId
    return new Promise((resolve, reject) => {
      const request = httpRequest(`${this.baseUrl}/books/changes`, { headers, agent: false }, (response) => {
        this.response = response
        this.statuses.push(response.statusCode!)
        if (response.statusCode !== 200) {
          let body = ''
          response.setEncoding('utf8').on('data', (chunk) => { body += chunk }).on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }))
          return
        }
        response.setEncoding('utf8')
        response.on('data', (chunk: string) => this.read(chunk))
        response.on('end', () => {
          this.ends++
          if (this.response === response) this.again()
        })
        response.on('error', () => { if (this.response === response) this.again() })
        resolve({ status: 200, headers: response.headers })
      })
      request.on('error', (err) => {
        if (this.request === request && this.response === null) reject(err)
        if (this.request === request) this.again()
      })
      request.end()
      this.request = request
    })
  }

  /**
   * Keeps the feed open as an EventSource does: whenever a connection ends or fails, or is
   * answered other than 200, connects again after `retryMs` with the last id received.
   */
  async follow (retryMs = 200): Promise<void> {
    this.following = true
    this.retryMs = retryMs
    const answer = await this.connect()
    if (answer.status !== 200) this.again()
  }

  private retryMs = 200
  private again () {
    if (!this.following) return
    this.response = null
    this.request = null
    setTimeout(() => {
      if (!this.following || this.request !== null) return
      this.reconnections++
      this.connect().then((answer) => { if (answer.status !== 200) this.again() }, () => this.again())
    }, this.retryMs).unref()
  }

  /** Stops following and drops the connection. */
  stop () {
    this.following = false
    this.close()
  }

  /** Drops the connection, as a network that fails does. */
  close () {
    this.request?.destroy()
    this.request = null
    this.response = null
  }

  /** Stops reading (the socket's buffers fill), or reads again. */
  pause () { this.response?.pause() }
  resume () { this.response?.resume() }

  /** The book changes received (events created, updated, deleted), in order. */
  changes (): BookChange[] {
    return this.events.filter((e) => ['created', 'updated', 'deleted'].includes(e.event))
      .map((e) => ({ id: e.id!, kind: e.event, book: JSON.parse(e.data) }))
  }

  /** Waits until `done` holds for what was received. */
  async waitFor (what: string, done: (feed: this) => boolean, ms = 10_000): Promise<void> {
    await waitUntil(() => done(this), ms, what).catch(() => {
      throw new Error(`the feed did not receive ${what} within ${ms} ms (${this.events.length} events, the last ${JSON.stringify(this.events.at(-1))})`)
    })
  }

  private read (chunk: string) {
    this.pending += chunk
    const lines = this.pending.split(/\r\n|\r|\n/)
    // The last piece is an unfinished line (a trailing CR may yet be followed by its LF)
    this.pending = lines.pop()!
    for (const line of lines) this.line(line)
  }

  private line (line: string) {
    if (line === '') {
      if (this.fields.data.length > 0) {
        const event: FeedEvent = { event: this.fields.event ?? 'message', data: this.fields.data.join('\n') }
        if (this.fields.id !== undefined) event.id = this.fields.id
        this.events.push(event)
      }
      this.fields = { data: [] }
      return
    }
    if (line.startsWith(':')) {
      this.comments.push({ text: line.slice(1).trim(), at: Date.now() })
      return
    }
    const colon = line.indexOf(':')
    const name = colon === -1 ? line : line.slice(0, colon)
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '')
    if (name === 'data') this.fields.data.push(value)
    else if (name === 'event') this.fields.event = value
    else if (name === 'id') {
      this.fields.id = value
      this.lastEventId = value
    } else if (name === 'retry' && /^[0-9]+$/.test(value)) this.retries.push(Number(value))
  }
}

/**
 * The feed of changes, `GET /books/changes`, followed while signed in. The token goes in
 * `Authorization`, which the browser's EventSource cannot send, so the stream is read with
 * `fetch` and its server-sent events parsed here (`EventStreamParser`, the WHATWG format).
 *
 * - A connection that ends, fails or goes silent for longer than `SILENCE_MS` (keep-alives
 *   come every 5 s: a tab back from sleep holds a connection that died unseen) is opened again
 *   after the service's `retry` delay, with `Last-Event-ID`: nothing missed, nothing twice. The
 *   window's `online` event reconnects at once.
 * - `token-expired` ends a connection: the next one is refused 401, which signs in again
 *   (api.ts), and then resumes.
 * - The list is read again (`reload`) whenever the feed cannot say what it missed: `reset`, a
 *   `Last-Event-ID` refused (400), and a connection opened with no id to resume from (the first
 *   one: every feed starts with the id of where it starts, kept as the last event id).
 *   The first list is read once the feed has answered, so that a change saved while the list is
 *   read comes through the feed; without an answer within `LIST_WITHOUT_FEED_MS`, or when the
 *   feed fails, the list is read all the same (and again when the feed opens).
 */
import { ApiFailure, SignedOut, followChanges } from './api.js'
import type { Book } from './book-list.js'

/** No byte for this long (three keep-alives missed): the connection is taken for dead. */
const SILENCE_MS = 15_000
/** The reconnection delay until the service sends its own (`retry`). */
const RETRY_MS = 2000
/** The list waits this long at most for the feed's first answer, then is read without it. */
const LIST_WITHOUT_FEED_MS = 1000

export type Change = { kind: 'created' | 'updated', book: Book } | { kind: 'deleted', id: number }

/** Whether the feed is open ('live'), being opened the first time, or again after a drop. */
export type FeedState = 'connecting' | 'live' | 'reconnecting'

export interface ChangeFeedEvents {
  change: (change: Change) => void
  /** Changes may have been missed: read the list again */
  reload: () => void
  state: (state: FeedState) => void
}

export interface ServerSentEvent { type: string, data: string }

/**
 * The WHATWG event stream format, as it arrives in pieces: lines (CRLF, LF or CR) of `field:
 * value`, an event dispatched at each blank line, comments (`:`) ignored.
 */
class EventStreamParser {
  /** The id of the last event dispatched (`Last-Event-ID`); '' for none */
  lastEventId = ''
  /** The reconnection delay the stream asked for, in ms, if any */
  retry: number | null = null
  #pending = ''
  #id = ''
  #type = ''
  #data: string[] = []

  /** The events that `text`, the next piece of the stream, completes. */
  push (text: string): ServerSentEvent[] {
    this.#pending += text
    // A CR at the end may be the first half of a CRLF: it waits for the next piece
    const end = this.#pending.endsWith('\r') ? this.#pending.length - 1 : this.#pending.length
    const lines = this.#pending.slice(0, end).split(/\r\n|\r|\n/)
    this.#pending = lines.pop()! + this.#pending.slice(end)
    const events: ServerSentEvent[] = []
    for (const line of lines) {
      const event = this.#line(line)
      if (event !== null) events.push(event)
    }
    return events
  }

  #line (line: string): ServerSentEvent | null {
    if (line === '') return this.#dispatch()
    if (line.startsWith(':')) return null
    const colon = line.indexOf(':')
    const name = colon === -1 ? line : line.slice(0, colon)
    const value = colon === -1 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1))
    if (name === 'data') this.#data.push(value)
    else if (name === 'event') this.#type = value
    else if (name === 'id' && !value.includes('\u0000')) this.#id = value
    else if (name === 'retry' && /^[0-9]+$/.test(value)) this.retry = Number(value)
    return null
  }

  #dispatch (): ServerSentEvent | null {
    this.lastEventId = this.#id
    const event = this.#data.length === 0 ? null : { type: this.#type === '' ? 'message' : this.#type, data: this.#data.join('\n') }
    this.#type = ''
    this.#data = []
    return event
  }
}

export class ChangeFeed {
  readonly #events: ChangeFeedEvents
  /** Ends the feed (sign-out) */
  #stopped: AbortController | null = null
  /** Ends the connection open now, and the wait before the next one */
  #connection: AbortController | null = null
  #lastEventId = ''
  #retryMs = RETRY_MS
  #silence = 0
  /** When the last bytes came (`performance.now()`) */
  #heard = 0

  constructor (events: ChangeFeedEvents) {
    this.#events = events
    window.addEventListener('online', () => this.#connection?.abort())
    // Back from sleep, timers may not have run: a silence seen now is a dead connection
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible' && performance.now() - this.#heard > SILENCE_MS) this.#connection?.abort()
    })
  }

  start (): void {
    if (this.#stopped !== null) return
    const stopped = new AbortController()
    this.#stopped = stopped
    this.#lastEventId = ''
    this.#follow(stopped.signal).catch(console.error)
  }

  stop (): void {
    this.#stopped?.abort()
    this.#stopped = null
    this.#connection?.abort()
    clearTimeout(this.#silence)
  }

  async #follow (stopped: AbortSignal): Promise<void> {
    let listed = false
    const reload = () => {
      listed = true
      this.#events.reload()
    }
    this.#events.state('connecting')
    const unanswered = window.setTimeout(() => { if (!listed) reload() }, LIST_WITHOUT_FEED_MS)
    stopped.addEventListener('abort', () => clearTimeout(unanswered))
    while (!stopped.aborted) {
      const connection = new AbortController()
      this.#connection = connection
      this.#heardNow()
      let expired = false
      try {
        const resumes = this.#lastEventId !== ''
        const parser = new EventStreamParser()
        const reader = (await followChanges(this.#lastEventId, connection.signal)).getReader()
        if (stopped.aborted) return
        this.#events.state('live')
        if (!resumes) reload()
        const decoder = new TextDecoder()
        for (;;) {
          const { done, value } = await reader.read()
          if (done) break
          this.#heardNow()
          for (const event of parser.push(decoder.decode(value, { stream: true }))) {
            if (event.type === 'token-expired') expired = true
            else if (event.type === 'reset') reload()
            else this.#change(event)
          }
          if (parser.lastEventId !== '') this.#lastEventId = parser.lastEventId
          this.#retryMs = parser.retry ?? this.#retryMs
        }
      } catch (error) {
        if (stopped.aborted || error instanceof SignedOut) return
        // An id the service did not issue (another deployment's): start afresh
        if (error instanceof ApiFailure && error.status === 400) this.#lastEventId = ''
        // A network failure is a TypeError; an event it cannot read, a fault of its own
        if (error instanceof SyntaxError) console.error(error)
        // The list is shown even when the feed cannot be opened
        if (!listed) reload()
      } finally {
        clearTimeout(this.#silence)
      }
      if (stopped.aborted) return
      this.#events.state('reconnecting')
      // Dropped by `online` or the silence: at once; a token expired: at once, to sign in again
      if (!expired && !connection.signal.aborted) await pause(this.#retryMs, connection.signal)
    }
  }

  #change (event: ServerSentEvent): void {
    const data = JSON.parse(event.data) as Book
    if (event.type === 'created' || event.type === 'updated') this.#events.change({ kind: event.type, book: data })
    else if (event.type === 'deleted') this.#events.change({ kind: 'deleted', id: data.id })
  }

  /** Bytes came: the connection lives; the silence timer starts again. */
  #heardNow (): void {
    this.#heard = performance.now()
    clearTimeout(this.#silence)
    const connection = this.#connection
    this.#silence = window.setTimeout(() => connection?.abort(), SILENCE_MS)
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause (ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal.addEventListener('abort', () => {
      clearTimeout(timer)
      resolve()
    }, { once: true })
  })
}

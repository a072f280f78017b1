/**
 * Follows the feed of changes, GET /books/changes (docs/api.md, Live changes), with nothing but
 * `fetch`: Node 20+. The token goes in `Authorization`, so not the browser's EventSource, which
 * cannot send it. It resumes where it stopped, with nothing missed and nothing twice:
 * - after a dropped connection or a restart of the service, it waits the `retry` the feed gave
 *   and reconnects with `Last-Event-ID`, the id of the last event it received;
 * - on `token-expired`, or a `401` (the token expired meanwhile), it logs in again and resumes;
 * - on `reset`, or a `400` (an id the service does not know, e.g. another deployment's, or one
 *   made with a secret no longer accepted), what it holds may be stale: it must reload the list
 *   (`onReset`), then the feed goes on; after a `400`, once the feed opened without an id has
 *   answered, so that what changes during the reload comes through the feed.
 *
 * Run as a script, it prints each event as a line of JSON, `{"id":..,"event":..,"data":..}`:
 *   BOOKKEEPING_URL=http://localhost:8080 BOOKKEEPING_USERNAME=admin BOOKKEEPING_PASSWORD=change-me \
 *     node docs/examples/feed.mjs
 * `BOOKKEEPING_LAST_EVENT_ID` resumes after that event; `BOOKKEEPING_TOKEN` starts with that token.
 */

/**
 * Calls `onEvent({ id, event, data })` for each change (`data` parsed), and `onReset()` when the
 * client must reload, until `signal` aborts. Resolves then; rejects on a failed login.
 */
export async function followChanges ({ baseUrl, username, password, token = null, lastEventId = null, onEvent, onReset = () => {}, signal, log = () => {} }) {
  let retryMs = 2000
  const login = async () => {
    const answer = await fetch(`${baseUrl}/token`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }), signal
    })
    if (!answer.ok) throw new Error(`login failed: ${answer.status}`)
    token = (await answer.json()).data.token
  }
  if (token === null) await login()
  // After a 400, the list is reloaded once the new feed has answered: what changes meanwhile comes through it
  let reload = false
  while (!signal?.aborted) {
    try {
      const headers = { authorization: token, accept: 'text/event-stream' }
      if (lastEventId !== null) headers['last-event-id'] = lastEventId
      const answer = await fetch(`${baseUrl}/books/changes`, { headers, signal })
      if (answer.status === 401) {
        await answer.body?.cancel()
        await login()
        continue
      }
      if (answer.status === 400) {
        await answer.body?.cancel()
        log('the service does not know the last event id: starting over')
        lastEventId = null
        reload = true
        continue
      }
      if (!answer.ok) throw new Error(`the feed answered ${answer.status}`)
      if (reload) {
        reload = false
        await onReset()
      }
      // The event stream format: fields up to a blank line; lines starting with ':' are comments
      let fields = { data: [] }
      let pending = ''
      for await (const chunk of answer.body.pipeThrough(new TextDecoderStream())) {
        const lines = (pending + chunk).split(/\r\n|\r|\n/)
        pending = lines.pop()
        for (const line of lines) {
          if (line === '') {
            if (fields.id !== undefined) lastEventId = fields.id
            if (fields.event === 'reset') await onReset()
            else if (fields.event === 'token-expired') await login()
            else if (fields.data.length > 0) await onEvent({ id: fields.id, event: fields.event ?? 'message', data: JSON.parse(fields.data.join('\n')) })
            fields = { data: [] }
          } else if (!line.startsWith(':')) {
            const colon = line.indexOf(':')
            const name = colon === -1 ? line : line.slice(0, colon)
            const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '')
            if (name === 'data') fields.data.push(value)
            else if (name === 'retry' && /^\d+$/.test(value)) retryMs = Number(value)
            else if (name === 'id' || name === 'event') fields[name] = value
          }
        }
      }
      log('the feed ended: resuming')
    } catch (err) {
      if (signal?.aborted) break
      log(`the feed failed (${err.message}): resuming`)
    }
    await new Promise((resolve) => setTimeout(resolve, retryMs))
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { BOOKKEEPING_URL: baseUrl, BOOKKEEPING_USERNAME: username, BOOKKEEPING_PASSWORD: password } = process.env
  const stop = new AbortController()
  process.once('SIGTERM', () => stop.abort())
  process.once('SIGINT', () => stop.abort())
  await followChanges({
    baseUrl,
    username,
    password,
    token: process.env.BOOKKEEPING_TOKEN ?? null,
    lastEventId: process.env.BOOKKEEPING_LAST_EVENT_ID ?? null,
    signal: stop.signal,
    onEvent: (event) => console.log(JSON.stringify(event)),
    onReset: () => console.log(JSON.stringify({ event: 'reset' })),
    log: (line) => console.error(line)
  })
}

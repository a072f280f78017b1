/**
 * The two loads of the catch-up test (test/process/alone/feed-catch-up.test.ts), each in a
 * thread of its own, so that neither times its own waiting for the other's work as the
 * service's: point reads on keep-alive connections, as many as they get answered, and feeds of
 * changes read to the end from another client address, each event's position checked.
 */
import { Worker } from 'node:worker_threads'

/** What the point reads saw between `start()` and `stop()`. */
export interface PointReads {
  /** Each answer's time in milliseconds. */
  latencies: number[]
  /** Every status other than 200, and every error. */
  unexpected: string[]
  /** Milliseconds from start to stop. */
  elapsed: number
}

const POINT_READS = `
const { parentPort, workerData: { url, token, connections, books } } = require('node:worker_threads')
const { Agent, request } = require('node:http')
let running = false
let latencies = []
let unexpected = []
let started = 0
parentPort.on('message', (message) => {
  if (message === 'start') {
    latencies = []
    unexpected = []
    started = performance.now()
    running = true
    for (let i = 0; i < connections; i++) client()
  } else {
    running = false
    setTimeout(() => parentPort.postMessage({ latencies, unexpected, elapsed: performance.now() - started }), 200)
  }
})
async function client () {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  while (running) {
    await new Promise((resolve) => {
      const sent = performance.now()
      const req = request(url + '/book/' + (1 + Math.floor(Math.random() * books)), { agent, headers: { authorization: token } }, (res) => {
        res.resume()
        res.on('end', () => {
          if (!running) return resolve()
          latencies.push(performance.now() - sent)
          if (res.statusCode !== 200) unexpected.push(String(res.statusCode))
          resolve()
        })
      })
      req.setTimeout(10000, () => req.destroy(new Error('no answer within 10 s')))
      req.on('error', (err) => { if (running) unexpected.push(err.message); resolve() })
      req.end()
    })
  }
  agent.destroy()
}
`

/**
 * Posts `message` to `worker`: its answer, or its error. Neither listener outlives the answer, so
 * a test may ask as often as it polls.
 */
function askWorker<T> (worker: Worker, message: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const answered = (answer: T) => {
      worker.off('error', failed)
      resolve(answer)
    }
    const failed = (err: Error) => {
      worker.off('message', answered)
      reject(err)
    }
    worker.once('message', answered).once('error', failed)
    worker.postMessage(message)
  })
}

/**
 * GET /book/<id> for ids 1 to `books`, on `connections` keep-alive connections at once, each
 * sending its next request as its last is answered, from the time `start()` is called until
 * `stop()`; start and stop again as often as needed.
 */
export function startPointReads (url: string, token: string, { connections, books }: { connections: number, books: number }) {
  const worker = new Worker(POINT_READS, { eval: true, workerData: { url, token, connections, books } })
  return {
    start () { worker.postMessage('start') },
    stop: () => askWorker<PointReads>(worker, 'stop'),
    close: () => worker.terminate()
  }
}

/** What one feed received: the last position in order, and whatever broke the order. */
export interface FeedProgress {
  /** The position of the last change received (0 before any). */
  last: number
  /** Changes received. */
  received: number
  /** The first position out of order (a gap, a repeat), a reset, an error, an end: empty when all is well. */
  broken: string[]
}

const FEEDS = `
const { parentPort, workerData: { url, token, lastEventId, feeds, localAddress } } = require('node:worker_threads')
const { request } = require('node:http')
const progress = Array.from({ length: feeds }, () => ({ last: 0, received: 0, broken: [] }))
const requests = []
const ID = /^id: ([0-9]{16})\\./gm
for (let i = 0; i < feeds; i++) {
  const feed = progress[i]
  // The first id is the feed's start (no event); each event after it is the next position
  let expected = null
  let carry = ''
  const req = request(url + '/books/changes', { localAddress, agent: false, headers: { authorization: token, 'last-event-id': lastEventId } }, (res) => {
    if (res.statusCode !== 200) feed.broken.push('status ' + res.statusCode)
    res.setEncoding('latin1')
    res.on('data', (chunk) => {
      // Only whole lines: an id may be cut between two chunks
      const text = carry + chunk
      const end = text.lastIndexOf('\\n')
      carry = text.slice(end + 1)
      const lines = text.slice(0, end + 1)
      if (lines.includes('event: reset')) feed.broken.push('reset')
      ID.lastIndex = 0
      for (let match = ID.exec(lines); match !== null; match = ID.exec(lines)) {
        const position = Number(match[1])
        if (expected === null) {
          expected = position + 1
          continue
        }
        if (position !== expected && feed.broken.length < 5) feed.broken.push('expected ' + expected + ', received ' + position)
        expected = position + 1
        feed.last = position
        feed.received++
      }
    })
    res.on('end', () => feed.broken.push('ended'))
  })
  req.on('error', (err) => feed.broken.push(err.message))
  req.end()
  requests.push(req)
}
parentPort.on('message', (message) => {
  if (message === 'stop') for (const req of requests) req.destroy()
  parentPort.postMessage(progress)
})
`

/**
 * `feeds` feeds of changes from `localAddress`, each resuming after `lastEventId` and read as fast
 * as they come; `progress()` says what each has received so far.
 */
export function startFeeds (url: string, token: string, { feeds, lastEventId, localAddress }: { feeds: number, lastEventId: string, localAddress: string }) {
  const worker = new Worker(FEEDS, { eval: true, workerData: { url, token, lastEventId, feeds, localAddress } })
  const ask = (message: string) => askWorker<FeedProgress[]>(worker, message)
  let closed: Promise<void> | undefined
  return {
    progress: () => ask('progress'),
    /** Stops the feeds; once, whoever asks again. */
    close () {
      closed ??= ask('stop').then(async () => { await worker.terminate() })
      return closed
    }
  }
}

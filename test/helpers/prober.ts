import { Worker } from 'node:worker_threads'

/** What a prober saw: each request's time in milliseconds and every status other than the expected. */
export interface Probes {
  latencies: number[]
  unexpected: string[]
}

/**
 * The prober's own loop, in a thread of its own: a test that floods the service from its main
 * thread keeps that thread busy, and a prober there would time its own waiting for the event loop
 * as the service's latency. Each probe is a new connection (no agent), so accepting one counts.
 */
const PROBER = `
const { parentPort, workerData: { url, headers, status, pauseMs, localAddress } } = require('node:worker_threads')
const { request } = require('node:http')
let stopping = false
const latencies = []
const unexpected = []
parentPort.once('message', () => { stopping = true })
function probe () {
  return new Promise((resolve) => {
    const started = performance.now()
    const req = request(url, { headers, agent: false, localAddress }, (res) => {
      res.resume()
      res.on('end', () => {
        latencies.push(performance.now() - started)
        if (res.statusCode !== status) unexpected.push(String(res.statusCode))
        resolve()
      })
    })
    req.setTimeout(5000, () => req.destroy(new Error('no answer within 5 s')))
    req.on('error', (err) => { unexpected.push(err.message); resolve() })
    req.end()
  })
}
;(async () => {
  while (!stopping) {
    await probe()
    await new Promise((resolve) => setTimeout(resolve, pauseMs))
  }
  parentPort.postMessage({ latencies, unexpected })
})()
`

/**
 * Requests `url` over and over from a worker thread until stopped, `pauseMs` apart, and says how
 * long each took and what was not the `status` expected; from `localAddress` when given (another
 * loopback address, 127.0.0.3, is another client).
 */
export function startProber (url: string, { headers = {}, status = 200, pauseMs = 10, localAddress }: { headers?: Record<string, string>, status?: number, pauseMs?: number, localAddress?: string } = {}) {
  const worker = new Worker(PROBER, { eval: true, workerData: { url, headers, status, pauseMs, localAddress } })
  const result = new Promise<Probes>((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  return {
    async stop (): Promise<Probes> {
      worker.postMessage('stop')
      const probes = await result
      await worker.terminate()
      return probes
    }
  }
}

/** The `fraction` quantile of `values` (0.99: the p99), by the nearest rank. */
export function quantile (values: number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * fraction) - 1)] ?? Infinity
}

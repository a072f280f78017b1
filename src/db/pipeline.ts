import pg from 'pg'
import type { FastifyBaseLogger } from 'fastify'

/**
 * A few long-lived connections in pg's pipeline mode, shared by all requests: each query is
 * written at once, without waiting for the answers before it. For the single-statement queries
 * of the book routes this beats a pool that gives each query a connection of its own (measured
 * here: about twice the throughput on 2 cores), because PostgreSQL serves a stream of queries on
 * one backend instead of switching between many.
 *
 * Only for independent single statements: no transactions, no cursors (pg refuses those in
 * pipeline mode). A connection that fails, times out or is terminated is dropped; the queries
 * on it fail (503), and the next query opens a new one.
 */
export class Pipeline {
  readonly #config: pg.ClientConfig
  readonly #log: FastifyBaseLogger
  readonly #slots: Array<Promise<pg.Client> | undefined>
  #next = 0
  #closed = false

  constructor (config: pg.ClientConfig, connections: number, log: FastifyBaseLogger) {
    this.#config = { ...config, pipeline: true }
    this.#log = log
    this.#slots = new Array(connections).fill(undefined)
  }

  async query<R extends pg.QueryResultRow> (query: pg.QueryConfig): Promise<pg.QueryResult<R>> {
    const client = await this.#client(this.#next++ % this.#slots.length)
    return client.query<R>(query)
  }

  async close () {
    this.#closed = true
    const slots = this.#slots.splice(0)
    await Promise.all(slots.map((slot) => slot?.then((client) => client.end(), () => {})))
  }

  #client (slot: number): Promise<pg.Client> {
    if (this.#closed) return Promise.reject(new Error('Client was closed and is not queryable'))
    const existing = this.#slots[slot]
    if (existing !== undefined) return existing
    const client = new pg.Client(this.#config)
    const connecting: Promise<pg.Client> = client.connect().then(() => client)
    const forget = () => {
      if (this.#slots[slot] === connecting) this.#slots[slot] = undefined
    }
    // Without a listener a dropped connection would end the process
    client.on('error', (err) => {
      this.#log.warn({ err }, 'pipelined database connection lost')
      forget()
    })
    client.on('end', forget)
    connecting.catch(forget)
    this.#slots[slot] = connecting
    return connecting
  }
}

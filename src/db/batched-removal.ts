import type { FastifyInstance } from 'fastify'

/** Rows removed per transaction: its locks last milliseconds. */
export const REMOVAL_BATCH = 1000
/** Between two full batches, so a backlog is worked off as a trickle, not at once. */
export const REMOVAL_PAUSE_MS = 100
/** How often an instance looks for rows to remove; every instance does, sharing the work. */
const REMOVAL_EVERY_MS = 5 * 60_000

/**
 * Removes what `removeBatch` removes (up to REMOVAL_BATCH rows, in one short transaction,
 * answering how many) at start, then every few minutes, a full batch followed by the next after
 * a pause, so there is never a long lock or a burst of deletes. A failed batch is logged and
 * tried again next time: a row kept longer does no harm. Adds an `onReady` hook, so the first
 * batch runs before the server is ready and the work never overlaps a start, and an `onClose`
 * hook that stops it, before the pool closes (onClose hooks run last-added first).
 */
export function removeInBatches (fastify: FastifyInstance, what: string, removeBatch: (limit: number) => Promise<number>) {
  const { log } = fastify
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> = Promise.resolve()

  async function removeOneBatch () {
    let removed = 0
    try {
      removed = await removeBatch(REMOVAL_BATCH)
      if (removed > 0) log.info({ removed }, `removed ${what}`)
    } catch (err) {
      log.warn({ err }, `removing ${what} failed; trying again later`)
    }
    if (stopped) return
    timer = setTimeout(() => { running = removeOneBatch() }, removed === REMOVAL_BATCH ? REMOVAL_PAUSE_MS : REMOVAL_EVERY_MS)
    timer.unref()
  }

  fastify.addHook('onReady', async () => { await (running = removeOneBatch()) })
  fastify.addHook('onClose', async () => {
    stopped = true
    clearTimeout(timer)
    await running
  })
}

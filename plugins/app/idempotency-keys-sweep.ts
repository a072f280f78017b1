/**
 * Adds an `onReady` hook that starts removing the idempotency keys older than their retention,
 * and an `onClose` hook that stops it. In the service itself: at start, then every few minutes,
 * in batches of `SWEEP_BATCH` oldest first, each its own short transaction, a full batch
 * followed by the next after a pause, so there is never a long lock or a burst of deletes.
 * Instances sweeping together skip each other's rows (SKIP LOCKED). A failed batch is logged and
 * tried again next time: an expired key kept longer does no harm. The first batch runs before
 * the server is ready, so the work never overlaps a start.
 */
import fp from 'fastify-plugin'

/** An idempotency key answers its retries for at least this long (docs/api.md). */
export const IDEMPOTENCY_KEY_RETENTION_HOURS = 24
/** Keys removed per transaction: its locks last milliseconds. */
export const SWEEP_BATCH = 1000
/** Between two full batches, so a backlog is worked off as a trickle, not at once. */
export const SWEEP_PAUSE_MS = 100
/** How often an instance looks for expired keys; every instance does, sharing the work. */
const SWEEP_EVERY_MS = 5 * 60_000

export default fp(async function idempotencyKeysSweep (fastify) {
  const { booksRepository, log } = fastify
  const retentionSeconds = IDEMPOTENCY_KEY_RETENTION_HOURS * 3600
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> = Promise.resolve()

  async function sweepBatch () {
    let removed = 0
    try {
      removed = await booksRepository.sweepKeys(retentionSeconds, SWEEP_BATCH)
      if (removed > 0) log.info({ removed }, 'removed expired idempotency keys')
    } catch (err) {
      log.warn({ err }, 'removing expired idempotency keys failed; trying again later')
    }
    if (stopped) return
    timer = setTimeout(() => { running = sweepBatch() }, removed === SWEEP_BATCH ? SWEEP_PAUSE_MS : SWEEP_EVERY_MS)
    timer.unref()
  }

  fastify.addHook('onReady', async () => { await (running = sweepBatch()) })
  // Before the pool closes: onClose hooks run last-added first
  fastify.addHook('onClose', async () => {
    stopped = true
    clearTimeout(timer)
    await running
  })
}, { name: 'idempotency-keys-sweep', dependencies: ['books-repository'] })

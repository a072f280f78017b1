/**
 * Adds an `onReady` hook that starts removing the idempotency keys older than their retention,
 * and an `onClose` hook that stops it: in batches of `REMOVAL_BATCH` oldest first, each its own
 * short transaction, at start and then every few minutes (src/db/batched-removal.ts). Instances
 * sweeping together skip each other's rows (SKIP LOCKED).
 */
import fp from 'fastify-plugin'
import { removeInBatches } from '../../src/db/batched-removal.js'

/** An idempotency key answers its retries for at least this long (docs/api.md). */
export const IDEMPOTENCY_KEY_RETENTION_HOURS = 24

export default fp(async function idempotencyKeysSweep (fastify) {
  const retentionSeconds = IDEMPOTENCY_KEY_RETENTION_HOURS * 3600
  removeInBatches(fastify, 'expired idempotency keys', (limit) => fastify.idempotencyKeys.sweep(retentionSeconds, limit))
}, { name: 'idempotency-keys-sweep', dependencies: ['idempotency-keys'] })

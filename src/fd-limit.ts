import { readFileSync } from 'node:fs'

/** Assumed where /proc/self/limits cannot be read (not Linux): the usual soft limit there. */
export const FALLBACK_FD_LIMIT = 1024

/**
 * The process's soft limit on open file descriptors (`ulimit -n`): every client connection
 * takes one, and Node does not raise it. Read from /proc/self/limits on Linux; elsewhere
 * FALLBACK_FD_LIMIT, which errs low.
 */
export function openFileLimit (limits = readLimits()): number {
  const soft = /^Max open files\s+(\d+|unlimited)\s/m.exec(limits ?? '')?.[1]
  if (soft === undefined) return FALLBACK_FD_LIMIT
  // "unlimited" cannot be set for open files on Linux; were it so, the kernel's own cap applies
  return soft === 'unlimited' ? 1_048_576 : Number(soft)
}

function readLimits (): string | null {
  try {
    return readFileSync('/proc/self/limits', 'utf8')
  } catch {
    return null
  }
}

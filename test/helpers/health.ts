/** What the health checks answer, and the bounds their tests hold them to. */

export const LIVE = { status: 200, message: 'Service is live', data: null }
export const READY = { status: 200, message: 'Service is ready', data: { database: 'up' } }
export const UNAVAILABLE = { status: 503, message: 'Service unavailable', data: null }
/** Far below the pool's own bounds (src/db/time-bounds.ts). */
export const BOUND_SLACK = 500
/** What the database-free check may take, also while the database is gone. */
export const QUICK = 300

'use strict'

/**
 * `fastify start <args>` in several worker processes sharing one port (node:cluster), so the
 * benchmark can measure one process against several on the same machine (BENCH_WORKERS).
 * Only for measuring: `npm start` runs one process.
 */
const cluster = require('node:cluster')

const workers = Number(process.env.BENCH_WORKERS || 2)

if (cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork()
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      for (const worker of Object.values(cluster.workers)) worker.kill(signal)
    })
  }
  let exitCode = 0
  cluster.on('exit', (worker, code) => {
    if (code !== 0) exitCode = code ?? 1
    if (Object.keys(cluster.workers).length === 0) process.exit(exitCode)
  })
} else {
  require('fastify-cli/helper.js').listen(process.argv.slice(2))
}

/**
 * Preloaded by `npm start` and `npm run dev` (`fastify start -r`). fastify-cli leaves a failed
 * start-up (bad configuration, unreachable database) as an unhandled rejection, which Node
 * prints as a stack trace. An operator needs one line that says what is wrong, and a non-zero exit.
 *
 * Once the server is up, fastify-cli's close-with-grace listens for the same event and shuts
 * down gracefully; this listener then steps aside.
 */
process.once('unhandledRejection', (reason) => {
  if (process.listenerCount('unhandledRejection') > 0) return
  const message = reason instanceof Error ? reason.message : String(reason)
  console.error(`bookkeeping: start-up failed: ${message}`)
  process.exit(1)
})

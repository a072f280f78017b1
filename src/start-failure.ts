/**
 * Preloaded by `npm start` and `npm run dev` (`fastify start -r`). fastify-cli leaves a failed
 * start-up as an unhandled rejection: before the app has loaded, Node would print it as a stack
 * trace; after (a failed `listen`), fastify-cli's close-with-grace logs it as a JSON object with
 * a stack on stdout, closes the server and exits 1. An operator needs one line that says what is
 * wrong and which variable to change (src/start-up.ts), on stderr, last, and exit code 1.
 *
 * So, until the server listens: the failure's explanation is kept, and printed when the process
 * exits. While close-with-grace is not installed yet, this listener exits itself; once it is,
 * it lets close-with-grace close the server (the embedded database shuts down cleanly) and log
 * the error, with the explanation in place of the stack. After start-up, it steps aside.
 */
import { explainStartFailure, whenListening } from './start-up.js'

let explanation: string | undefined

function failed (event: 'unhandledRejection' | 'uncaughtException', reason: unknown): void {
  explanation ??= explainStartFailure(reason)
  process.exitCode = 1
  // What close-with-grace logs: the explanation, not the stacks of the error and its causes
  for (let err = reason; err instanceof Error; err = err.cause) err.stack = err === reason ? `Error: ${explanation}` : String(err)
  // close-with-grace listens for both events once the app has loaded, and exits when done
  if (process.listenerCount(event) === 1) process.exit(1)
}
const onRejection = (reason: unknown) => failed('unhandledRejection', reason)
const onException = (err: Error) => failed('uncaughtException', err)

process.prependListener('unhandledRejection', onRejection)
process.prependListener('uncaughtException', onException)
whenListening(() => {
  process.off('unhandledRejection', onRejection).off('uncaughtException', onException)
})
process.on('exit', () => {
  if (explanation !== undefined) process.stderr.write(`bookkeeping: start-up failed: ${explanation}\n`)
})

/**
 * What start-up failures look like to an operator: one line that names the cause and the
 * variable to change. src/start-failure.ts prints it; this module knows when start-up is over
 * and how to word what fastify-cli leaves unexplained.
 */

let listened = false
const onListening: Array<() => void> = []

/** Called once the server listens (src/app.ts): from then on, a failure is not a start-up's. */
export function markListening (): void {
  listened = true
  for (const callback of onListening.splice(0)) callback()
}

/** Runs `callback` once the server listens (at once if it does). */
export function whenListening (callback: () => void): void {
  if (listened) callback()
  else onListening.push(callback)
}

/**
 * A failed `listen` (the server's, or the admin listener's with `ADMIN_PORT` and `ADMIN_HOST`)
 * in words, naming the variables that set the port and the address; undefined for any other
 * error.
 */
export function describeListenError (err: unknown, portVariable: string, hostVariable: string): string | undefined {
  const { code, syscall, address, port, hostname } = err as NodeJS.ErrnoException & { address?: string, port?: number, hostname?: string }
  if (syscall === 'getaddrinfo') {
    return `${hostVariable} "${hostname}" does not resolve to an address (${code}); set ${hostVariable} to an address of this machine`
  }
  if (syscall !== 'listen') return undefined
  switch (code) {
    case 'EADDRINUSE':
      return `port ${port} on ${address} is already in use by another process; stop that process or set ${portVariable} to a free port`
    case 'EACCES':
      return `port ${port} on ${address} needs privileges this process does not have; set ${portVariable} to 1024 or above`
    case 'EADDRNOTAVAIL':
      return `${address} is not an address of this machine; set ${hostVariable} to one of its addresses (127.0.0.1, or 0.0.0.0 for every interface)`
    default:
      return `cannot listen on port ${port} on ${address} (${code}); check ${portVariable} and ${hostVariable}`
  }
}

/** The line for what stopped the start-up: a failed listen in words, else the error's own message. */
export function explainStartFailure (reason: unknown): string {
  return describeListenError(reason, 'PORT', 'HOST') ??
    (reason instanceof Error ? reason.message : String(reason))
}

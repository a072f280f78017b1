import net from 'node:net'

/**
 * A loopback port the system has just handed out, for a program that takes its port on its
 * command line or in its configuration and cannot be told to listen on port 0. Another process
 * could take it before that program binds it: callers retry when the bind fails.
 */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

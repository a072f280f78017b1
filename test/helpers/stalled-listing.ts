/**
 * A listing whose client stops reading, for the tests of what the service holds for it.
 */
import { connect, type Socket } from 'node:net'
import type { Service } from './service.js'

/**
 * A `GET /books` on a raw socket that reads the first chunk of the answer (to see its status
 * line) and then stops reading for good: the kernel's buffers fill and the service is held back.
 */
export function stalledListing (service: Service, token: string): Promise<{ socket: Socket, head: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port: service.port, host: '127.0.0.1' }, () => {
      socket.write(`GET /books HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${token}\r\n\r\n`)
    })
    socket.once('data', (chunk: Buffer) => {
      socket.pause()
      resolve({ socket, head: chunk.subarray(0, 200).toString('latin1') })
    })
    socket.on('error', () => {})
    socket.once('error', reject)
  })
}

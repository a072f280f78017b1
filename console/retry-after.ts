/**
 * `Retry-After` of an answer in whole seconds from now (RFC 9110 section 10.2.3: seconds, or an
 * HTTP date), or null without one. Shared by the console (api.ts) and the typed client example
 * (docs/examples/typed-client.ts).
 */
export function retryAfterSeconds (response: Response): number | null {
  const value = response.headers.get('Retry-After')
  if (value === null) return null
  const seconds = /^\d+$/.test(value) ? Number(value) : (Date.parse(value) - Date.now()) / 1000
  return Number.isNaN(seconds) ? null : Math.max(0, Math.ceil(seconds))
}

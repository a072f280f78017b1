import { Type } from '@sinclair/typebox'

/** The longest key accepted, in characters of the key itself (an escape counts as one). */
const IDEMPOTENCY_KEY_MAX_LENGTH = 255

// A Structured Field string (RFC 8941 §3.3.3): printable ASCII between double quotes, where only
// `"` and `\` are escaped, each with a backslash. Or the key bare: visible ASCII, not starting
// with a quote. Both say 1 to 255 characters of key.
const QUOTED = `"(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\["\\\\]){1,${IDEMPOTENCY_KEY_MAX_LENGTH}}"`
const BARE = `[\\x21\\x23-\\x7E][\\x21-\\x7E]{0,${IDEMPOTENCY_KEY_MAX_LENGTH - 1}}`

/**
 * The `Idempotency-Key` request header of POST /book (IETF draft-ietf-httpapi-idempotency-key-header).
 * A value that does not match (empty, too long, not printable ASCII, two keys) is `400 Invalid input`.
 */
export const IdempotencyKeyHeaderSchema = Type.String({
  pattern: `^(?:${QUOTED}|${BARE})$`,
  description: 'Makes the create safe to retry: a repeat with the same key and body within 24 hours ' +
    'answers the first 201 again and stores nothing. A Structured Field string of 1 to 255 printable ' +
    'ASCII characters (the bare key is accepted too).',
  examples: ['"8e03978e-40d5-43e8-bc93-6894a57f9324"']
})

/** The key a header value (already matched by the schema) names: `"a\"b"` and `a"b` name the same one. */
export function idempotencyKey (value: string): string {
  return value.startsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, '$1') : value
}

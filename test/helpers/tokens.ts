/** Tokens crafted byte for byte: any header, payload, key and algorithm, signed or not. */
import { createHmac, sign, type KeyObject } from 'node:crypto'
import { SECRET } from '../helper.js'

export type Hash = 'sha256' | 'sha384' | 'sha512'

export const HS256_HEADER = { alg: 'HS256', typ: 'JWT' }

export function b64url (input: string | Buffer): string {
  return Buffer.from(input).toString('base64url')
}

function fromB64url (segment: string): string {
  return Buffer.from(segment, 'base64url').toString('utf8')
}

const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

/**
 * A canonically spelled base64url `segment` with its last character replaced by the next one,
 * which differs only in bits that encode nothing, so it decodes to the same bytes; unchanged
 * when its length leaves no unused bits (HS384's 64 characters, an empty signature).
 */
export function base64urlTwin (segment: string): string {
  if (segment.length % 4 < 2) return segment
  return segment.slice(0, -1) + BASE64URL[BASE64URL.indexOf(segment.slice(-1)) + 1]!
}

/**
 * Every other spelling of a canonically spelled base64url `segment` that decodes to the same
 * bytes: its last character with each other value of the bits that encode nothing (15 for a
 * length of 2 modulo 4, 3 for 3 modulo 4, none otherwise).
 */
export function base64urlTwins (segment: string): string[] {
  const unused = [0, 0, 0b1111, 0b11][segment.length % 4]!
  const last = BASE64URL.indexOf(segment.slice(-1))
  return Array.from({ length: unused + 1 }, (_, bits) => segment.slice(0, -1) + BASE64URL[(last & ~unused) | bits]!)
    .filter((twin) => twin !== segment)
}

export function encodeJson (value: unknown): string {
  return b64url(JSON.stringify(value))
}

/** Unix time in whole seconds, as a JWT `exp` counts it. */
export function nowSeconds (): number {
  return Math.floor(Date.now() / 1000)
}

/** base64url HMAC of `input`. */
export function hmac (input: string, secret = SECRET, hash: Hash = 'sha256'): string {
  return createHmac(hash, secret).update(input).digest('base64url')
}

/** `input.signature` with an HMAC over exactly `input` (whatever its segments look like). */
export function signInput (input: string, secret = SECRET, hash: Hash = 'sha256'): string {
  return `${input}.${hmac(input, secret, hash)}`
}

/** A JWT whose header and payload are the JSON of the given values, HMAC-signed. */
export function mint ({ header = HS256_HEADER, payload, secret = SECRET, hash = 'sha256' }: {
  header?: unknown, payload: unknown, secret?: string, hash?: Hash
}): string {
  return signInput(`${encodeJson(header)}.${encodeJson(payload)}`, secret, hash)
}

/** A JWT signed with an asymmetric key (`options` selects padding or signature encoding). */
export function mintAsymmetric (alg: string, payload: unknown, digest: string | null,
  key: KeyObject, options: { padding?: number, saltLength?: number, dsaEncoding?: 'ieee-p1363' } = {}): string {
  const input = `${encodeJson({ alg, typ: 'JWT' })}.${encodeJson(payload)}`
  const signature = sign(digest, Buffer.from(input), { key, ...options })
  return `${input}.${b64url(signature)}`
}

/** A correctly signed HS256 token whose signature contains `-` or `_` (so it has a `+`/`/` twin). */
export function tokenWithUrlSafeSignatureChars (): string {
  for (let extra = 60; ; extra++) {
    const token = mint({ payload: { exp: nowSeconds() + extra } })
    if (/[-_]/.test(token.slice(token.lastIndexOf('.') + 1))) return token
  }
}

export function decodeToken (token: string) {
  const [header = '', payload = '', signature = ''] = token.split('.')
  return { header: JSON.parse(fromB64url(header)), payload: JSON.parse(fromB64url(payload)), signature }
}

/**
 * The bytes of an import body checked as UTF-8 as they arrive, without holding them: each chunk
 * is passed on up to the last complete character, the bytes of a character cut by the chunk's
 * end carried to the next. Counts the line feeds passed on, so that a byte that is not UTF-8 is
 * reported on its own line.
 */
import { isUtf8 } from 'node:buffer'

const LF = 0x0a

export class Utf8Bytes {
  /** The lines of the bytes passed on so far: 1 + their line feeds. */
  line = 1
  #carry: Buffer | undefined

  /**
   * The complete characters `chunk` ends, after those carried. When some byte is not UTF-8,
   * `bad` is true and `bytes` are those before it; `line` is then the line of that byte.
   */
  take (chunk: Buffer): { bytes: Buffer, bad: boolean } {
    const data = this.#carry === undefined ? chunk : Buffer.concat([this.#carry, chunk])
    const cut = completeLength(data)
    const bytes = data.subarray(0, cut)
    if (!isUtf8(bytes)) return this.#refuse(bytes)
    this.#carry = cut === data.length ? undefined : Buffer.from(data.subarray(cut))
    this.line += countLineFeeds(bytes)
    return { bytes, bad: false }
  }

  /** At the body's end: whether a character was cut off (then `line` is its line). */
  cutOff (): boolean {
    return this.#carry !== undefined
  }

  #refuse (bytes: Buffer): { bytes: Buffer, bad: boolean } {
    const valid = bytes.subarray(0, validPrefixLength(bytes))
    this.line += countLineFeeds(valid)
    this.#carry = undefined
    return { bytes: valid, bad: true }
  }
}

/** How many bytes a character takes by its first byte; 0 for a byte no character starts with. */
function sequenceLength (lead: number): number {
  if (lead < 0x80) return 1
  if (lead >= 0xc2 && lead <= 0xdf) return 2
  if (lead >= 0xe0 && lead <= 0xef) return 3
  if (lead >= 0xf0 && lead <= 0xf4) return 4
  return 0
}

/** The length of `data` without a character its end cuts (at most 3 bytes; a byte that is not UTF-8 stays in). */
function completeLength (data: Buffer): number {
  for (let back = 1; back <= 3 && back <= data.length; back++) {
    const byte = data[data.length - back]!
    if ((byte & 0xc0) !== 0x80) {
      // The first byte of the last character: cut it off if its character needs more
      return sequenceLength(byte) > back ? data.length - back : data.length
    }
  }
  return data.length
}

/**
 * How many bytes of `data` are UTF-8 before the first that is not (rare: only for a body being
 * refused, so a plain loop). Overlong forms and surrogates are refused as TextDecoder refuses them.
 */
function validPrefixLength (data: Buffer): number {
  let at = 0
  while (at < data.length) {
    const length = sequenceLength(data[at]!)
    if (length === 0 || at + length > data.length) return at
    if (length > 1 && !isUtf8(data.subarray(at, at + length))) return at
    at += length
  }
  return at
}

function countLineFeeds (bytes: Buffer): number {
  let count = 0
  let at = bytes.indexOf(LF)
  while (at !== -1) {
    count++
    at = bytes.indexOf(LF, at + 1)
  }
  return count
}

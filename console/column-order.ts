import { compareText } from './book-list.js'

/** A column of the list, in its id order: the titles or authors, or the years (or ids). */
export type Column = string[] | Float64Array

/**
 * The ascending order of a column, as indices into it, ties in index (so id) order: exactly how
 * `comparator` in book-list.ts orders the books themselves. Run in sort-worker.ts.
 */
export function columnOrder (values: Column): Uint32Array {
  const order = new Uint32Array(values.length)
  for (let index = 0; index < order.length; index++) order[index] = index
  if (values instanceof Float64Array) order.sort((a, b) => (values[a]! - values[b]!) || a - b)
  else order.sort((a, b) => compareText(values[a]!, values[b]!) || a - b)
  return order
}

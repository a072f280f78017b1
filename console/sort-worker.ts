/**
 * Sorts a column of a long list off the page's thread: a million titles take seconds with the
 * reader's collation, during which the page would not even scroll (main.ts, `inOrderOf`).
 */
import { columnOrder, type Column } from './column-order.js'

self.onmessage = ({ data }: MessageEvent<Column>) => {
  const order = columnOrder(data)
  postMessage(order, { transfer: [order.buffer] })
}

/**
 * Sorts a column of a long list off the page's thread, so that the page keeps scrolling and
 * taking keys while it sorts (main.ts, `inOrderOf`).
 */
import { columnOrder, type Column } from './column-order.js'

self.onmessage = ({ data }: MessageEvent<Column>) => {
  const order = columnOrder(data)
  postMessage(order, { transfer: [order.buffer] })
}

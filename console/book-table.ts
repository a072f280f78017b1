/**
 * The list on screen: a real `<table>` of which only the rows in sight (and a few around them)
 * are in the DOM, between two spacer rows that give the scroll bar its full length. A million
 * books are forty-odd rows of DOM. Every text from the API is written with `textContent`, never
 * as HTML.
 *
 * A very long list is taller than a browser draws well: Chromium stops laying out near 33.5
 * million px, and from a few million px on its compositor's single-precision positions make
 * text jitter by a pixel or more. Past `MAX_SCROLL_PX` (about 110,000 rows) the scroll position
 * maps to the rows in proportion instead of one to one: a million books scroll about a quarter
 * row per pixel, and the rows in sight are always drawn near the top of the content.
 */
import type { Book } from './book-list.js'

const MAX_SCROLL_PX = 4_000_000
/** Rows drawn beyond each edge of the visible ones, so fast scrolling shows no gap. */
const OVERSCAN = 8

export type RowAction = 'edit' | 'delete'

export class BookTable {
  /** Measured from the first row drawn; the style sheet gives every row the same height */
  #rowHeight = 36
  #measured = false
  #frame = 0
  #rows: Book[] = []
  readonly #topSpacer: HTMLTableRowElement
  readonly #bottomSpacer: HTMLTableRowElement

  constructor (
    readonly scroller: HTMLElement,
    readonly table: HTMLTableElement,
    onAction: (action: RowAction, book: Book) => void
  ) {
    this.#topSpacer = spacerRow()
    this.#bottomSpacer = spacerRow()
    this.#body.replaceChildren(this.#topSpacer, this.#bottomSpacer)
    scroller.addEventListener('scroll', () => this.schedule(), { passive: true })
    // A new width may change the rows' height (style.css, narrow screens): measured again
    new ResizeObserver(() => {
      this.#measured = false
      this.schedule()
    }).observe(scroller)
    // One listener for every row's buttons
    this.#body.addEventListener('click', (event) => {
      const button = (event.target as Element).closest<HTMLButtonElement>('button[data-action]')
      const row = button?.closest<HTMLTableRowElement>('tr[data-index]')
      if (!button || !row) return
      const book = this.#rows[Number(row.dataset.index)]
      if (book !== undefined) onAction(button.dataset.action as RowAction, book)
    })
  }

  get #body (): HTMLTableSectionElement {
    return this.table.tBodies[0]!
  }

  /** Shows `rows` (the view; not copied, so draw again after it changes). */
  show (rows: Book[]): void {
    this.#rows = rows
    this.schedule()
  }

  /** Draws at the next frame; calls before then are one drawing. */
  schedule (): void {
    if (this.#frame === 0) this.#frame = requestAnimationFrame(() => this.draw())
  }

  /** Scrolls so that the row at `index` of the view is in sight. */
  reveal (index: number): void {
    const { first, last } = this.#visibleRange()
    if (index >= first && index < last) return
    this.scroller.scrollTop = this.#offsetOf(index)
    this.draw()
  }

  /** Focuses the button of a drawn row (after a dialog on that book closed). */
  focusRow (id: number | string, action: RowAction, options?: FocusOptions): void {
    this.#body.querySelector<HTMLButtonElement>(`tr[data-id="${id}"] button[data-action="${action}"]`)?.focus(options)
  }

  draw (): void {
    cancelAnimationFrame(this.#frame)
    this.#frame = 0
    const total = this.#rows.length
    this.table.setAttribute('aria-rowcount', String(total + 1))
    const { first, last } = this.#visibleRange()
    const from = Math.max(0, first - OVERSCAN)
    const to = Math.min(total, last + OVERSCAN)

    // A focused row button is drawn again: focus it again, without scrolling to it
    const active = document.activeElement as HTMLElement | null
    const focused = active !== null && this.#body.contains(active)
      ? { id: active.closest('tr')?.dataset.id ?? '', action: active.dataset.action as RowAction }
      : null

    const rows: HTMLTableRowElement[] = []
    for (let index = from; index < to; index++) rows.push(bookRow(this.#rows[index]!, index))
    const height = this.#scrollHeight()
    // Scaled, row `first` is put at the top of the view, wherever the proportion put the view
    const offset = this.#scaled() ? this.scroller.scrollTop - (first - from) * this.#rowHeight : from * this.#rowHeight
    const top = Math.max(0, Math.min(offset, height - (to - from) * this.#rowHeight))
    ;(this.#topSpacer.firstElementChild as HTMLElement).style.height = `${top}px`
    ;(this.#bottomSpacer.firstElementChild as HTMLElement).style.height =
      `${Math.max(0, height - top - (to - from) * this.#rowHeight)}px`
    this.#body.replaceChildren(this.#topSpacer, ...rows, this.#bottomSpacer)

    if (focused !== null) this.focusRow(focused.id, focused.action, { preventScroll: true })
    if (!this.#measured && rows.length > 0) {
      const measured = rows[0]!.getBoundingClientRect().height
      this.#measured = true
      if (measured > 0 && Math.abs(measured - this.#rowHeight) > 0.5) {
        this.#rowHeight = measured
        this.draw()
      }
    }
  }

  /** The full height the rows would take, capped where a browser stops laying out. */
  #scrollHeight (): number {
    return Math.min(this.#rows.length * this.#rowHeight, MAX_SCROLL_PX)
  }

  #scaled (): boolean {
    return this.#rows.length * this.#rowHeight > MAX_SCROLL_PX
  }

  /** The scroll offset at which row `index` is the first in sight. */
  #offsetOf (index: number): number {
    if (!this.#scaled()) return index * this.#rowHeight
    const range = this.#scrollHeight() - this.#viewportRows() * this.#rowHeight
    return Math.round(index / Math.max(1, this.#rows.length - this.#viewportRows()) * range)
  }

  #viewportRows (): number {
    const header = this.table.tHead?.getBoundingClientRect().height ?? 0
    return Math.max(1, Math.ceil((this.scroller.clientHeight - header) / this.#rowHeight))
  }

  /** The rows in sight: from `first` up to, not including, `last`. */
  #visibleRange (): { first: number, last: number } {
    const total = this.#rows.length
    const visible = this.#viewportRows()
    const scrollTop = this.scroller.scrollTop
    let first: number
    if (this.#scaled()) {
      const range = Math.max(1, this.#scrollHeight() - visible * this.#rowHeight)
      first = Math.round(Math.min(1, scrollTop / range) * Math.max(0, total - visible))
    } else {
      first = Math.floor(scrollTop / this.#rowHeight)
    }
    first = Math.max(0, Math.min(first, total - 1))
    return { first, last: Math.min(total, first + visible) }
  }
}

function spacerRow (): HTMLTableRowElement {
  const row = document.createElement('tr')
  row.className = 'spacer'
  row.setAttribute('aria-hidden', 'true')
  const cell = row.insertCell()
  cell.colSpan = 5
  return row
}

function bookRow (book: Book, index: number): HTMLTableRowElement {
  const row = document.createElement('tr')
  row.className = 'book'
  row.dataset.index = String(index)
  row.dataset.id = String(book.id)
  // Row 1 is the header
  row.setAttribute('aria-rowindex', String(index + 2))
  row.insertCell().textContent = String(book.id)
  for (const text of [book.title, book.author]) {
    // In a span of its own: on a narrow screen it runs to two lines (style.css)
    const cell = row.insertCell()
    cell.className = 'cell-text'
    cell.appendChild(document.createElement('span')).textContent = text
  }
  row.insertCell().textContent = String(book.year)
  const actions = row.insertCell()
  actions.className = 'row-actions'
  actions.append(actionButton('Edit', 'edit'), actionButton('Delete', 'delete'))
  return row
}

function actionButton (label: string, action: RowAction): HTMLButtonElement {
  const button = document.createElement('button')
  button.type = 'button'
  button.className = 'quiet small'
  button.dataset.action = action
  button.textContent = label
  return button
}

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
 *
 * The rows are those of the list held whole (an array) or read in pages (paged-list.ts): a row
 * whose book is not read yet is drawn as a placeholder of the same height, and each drawing tells
 * `onSight` which rows are in sight, so that the pages around them are read. The rows of a
 * search have the words it matched marked in their title and author (`<mark>`, search-marks.ts),
 * built as nodes like every other text.
 */
import type { Book } from './book-list.js'
import type { Marker } from './search-marks.js'

/** What the table shows: a row per book, `at` undefined for a book not read yet. */
export interface Rows {
  readonly length: number
  at: (index: number) => Book | undefined
  /** False while the list may go on past `length` (its total is not known yet) */
  readonly complete?: boolean
}

/** Where the view is: the first row in sight, and how many px of it are scrolled past. */
export interface Position { row: number, within: number }

const MAX_SCROLL_PX = 4_000_000
/** Rows drawn beyond each edge of the visible ones, so fast scrolling shows no gap. */
const OVERSCAN = 8

export type RowAction = 'edit' | 'delete'

export class BookTable {
  /** Measured from the first row drawn; the style sheet gives every row the same height */
  #rowHeight = 36
  #measured = false
  #frame = 0
  #rows: Rows = []
  /** What is marked in the titles and authors drawn: the words a search matched; null for nothing */
  #marker: Marker | null = null
  /** The number of rows the last drawing laid out (a paged list grows between drawings) */
  #laidOut = 0
  /** The row to keep in sight at the next drawing, and how far into it the view starts */
  #anchor: Position | null = null
  /**
   * The rows drawn, by what each shows (`rowKey`) with the marker they were drawn with: a drawing
   * keeps in place every row that shows the same again, so that a press on a row's button (the
   * mouse or Space, which acts on release) is not lost when a change elsewhere draws the list anew
   */
  #drawn = new Map<string, HTMLTableRowElement>()
  #drawnMarker: Marker | null = null
  readonly #topSpacer: HTMLTableRowElement
  readonly #bottomSpacer: HTMLTableRowElement

  constructor (
    readonly scroller: HTMLElement,
    readonly table: HTMLTableElement,
    onAction: (action: RowAction, book: Book) => void,
    readonly onSight: (first: number, last: number) => void
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
      const book = this.#rows.at(Number(row.dataset.index))
      if (book !== undefined) onAction(button.dataset.action as RowAction, book)
    })
  }

  get #body (): HTMLTableSectionElement {
    return this.table.tBodies[0]!
  }

  /**
   * Shows `rows` (not copied, so show or draw again after they change). With `keep`, the rows in
   * sight stay in sight, `keep.shift` rows further down (rows came or went before them), rather
   * than the scroll offset staying: a paged list that grows past the scaled height would
   * otherwise move under the reader.
   */
  show (rows: Rows, keep?: { shift: number }): void {
    if (keep !== undefined && this.#laidOut > 0) {
      // Several changes before the next drawing: each moves the row the one before kept
      const pending = this.#anchor
      const scrollTop = this.scroller.scrollTop
      const first = pending?.row ?? this.#visibleRange(this.#laidOut, scrollTop).first
      const within = pending?.within ?? (this.#scaled(this.#laidOut) ? 0 : scrollTop - first * this.#rowHeight)
      if (pending !== null || keep.shift !== 0 || (this.#scaled(this.#laidOut) && rows.length !== this.#laidOut)) {
        this.#anchor = { row: first + keep.shift, within }
      }
    }
    this.#rows = rows
    this.schedule()
  }

  /** Where the view is now, to come back to with `showAt` (after other rows were shown meanwhile). */
  position (): Position {
    if (this.#anchor !== null) return this.#anchor
    const scrollTop = this.scroller.scrollTop
    const { first } = this.#visibleRange(this.#laidOut, scrollTop)
    return { row: first, within: this.#scaled(this.#laidOut) ? 0 : scrollTop - first * this.#rowHeight }
  }

  /** Shows `rows` from `position` at the next drawing (see `position`). */
  showAt (rows: Rows, position: Position): void {
    this.#rows = rows
    this.#anchor = position
    this.schedule()
  }

  /** Marks what `marker` finds in the titles and authors drawn from now on (null: nothing). */
  mark (marker: Marker | null): void {
    this.#marker = marker
    this.schedule()
  }

  /** Draws at the next frame; calls before then are one drawing. */
  schedule (): void {
    if (this.#frame === 0) this.#frame = requestAnimationFrame(() => this.draw())
  }

  /** Scrolls so that the row at `index` of the view is in sight. */
  reveal (index: number): void {
    const { first, last } = this.#visibleRange(this.#rows.length, this.scroller.scrollTop)
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
    this.#laidOut = total
    this.table.setAttribute('aria-rowcount', String(this.#rows.complete === false ? -1 : total + 1))
    const anchor = this.#anchor
    this.#anchor = null
    const scrollTop = anchor === null ? this.scroller.scrollTop : this.#offsetOf(anchor.row) + anchor.within
    const { first, last } = this.#visibleRange(total, scrollTop)
    const from = Math.max(0, first - OVERSCAN)
    const to = Math.min(total, last + OVERSCAN)

    // A focused row button is drawn again: focus it again, without scrolling to it
    const active = document.activeElement as HTMLElement | null
    const focused = active !== null && this.#body.contains(active)
      ? { id: active.closest('tr')?.dataset.id ?? '', action: active.dataset.action as RowAction }
      : null

    const kept = this.#drawnMarker === this.#marker ? this.#drawn : new Map<string, HTMLTableRowElement>()
    const drawn = new Map<string, HTMLTableRowElement>()
    const rows: HTMLTableRowElement[] = []
    for (let index = from; index < to; index++) {
      const book = this.#rows.at(index)
      const key = rowKey(book, index)
      const row = kept.get(key) ?? (book === undefined ? placeholderRow(index) : bookRow(book, index, this.#marker))
      drawn.set(key, row)
      rows.push(row)
    }
    this.#drawn = drawn
    this.#drawnMarker = this.#marker
    const height = this.#scrollHeight(total)
    // Scaled, row `first` is put at the top of the view, wherever the proportion put the view
    const offset = this.#scaled(total) ? scrollTop - (first - from) * this.#rowHeight : from * this.#rowHeight
    const top = Math.max(0, Math.min(offset, height - (to - from) * this.#rowHeight))
    ;(this.#topSpacer.firstElementChild as HTMLElement).style.height = `${top}px`
    ;(this.#bottomSpacer.firstElementChild as HTMLElement).style.height =
      `${Math.max(0, height - top - (to - from) * this.#rowHeight)}px`
    this.#placeBetweenSpacers(rows)
    if (anchor !== null) this.scroller.scrollTop = scrollTop

    if (focused !== null) this.focusRow(focused.id, focused.action, { preventScroll: true })
    if (!this.#measured && rows.length > 0) {
      const measured = rows[0]!.getBoundingClientRect().height
      this.#measured = true
      if (measured > 0 && Math.abs(measured - this.#rowHeight) > 0.5) {
        this.#rowHeight = measured
        this.draw()
        return
      }
    }
    this.onSight(first, last)
  }

  /**
   * Puts `rows` (in the order of their indexes) between the spacers, moving none that is there
   * already: a row taken out of the document, even to be put back, loses the press on its button.
   */
  #placeBetweenSpacers (rows: HTMLTableRowElement[]): void {
    const wanted = new Set(rows)
    for (let row = this.#topSpacer.nextElementSibling; row !== null && row !== this.#bottomSpacer;) {
      const next = row.nextElementSibling
      if (!wanted.has(row as HTMLTableRowElement)) row.remove()
      row = next
    }
    // The rows kept are in their order already; the new ones go in around them
    let next = this.#topSpacer.nextElementSibling!
    for (const row of rows) {
      if (row === next) next = row.nextElementSibling!
      else this.#body.insertBefore(row, next)
    }
  }

  /** The full height `total` rows would take, capped where a browser stops laying out. */
  #scrollHeight (total: number): number {
    return Math.min(total * this.#rowHeight, MAX_SCROLL_PX)
  }

  #scaled (total: number): boolean {
    return total * this.#rowHeight > MAX_SCROLL_PX
  }

  /** The scroll offset at which row `index` is the first in sight. */
  #offsetOf (index: number): number {
    const total = this.#rows.length
    if (!this.#scaled(total)) return index * this.#rowHeight
    const range = this.#scrollHeight(total) - this.#viewportRows() * this.#rowHeight
    return Math.round(index / Math.max(1, total - this.#viewportRows()) * range)
  }

  #viewportRows (): number {
    const header = this.table.tHead?.getBoundingClientRect().height ?? 0
    return Math.max(1, Math.ceil((this.scroller.clientHeight - header) / this.#rowHeight))
  }

  /** The rows in sight of `total` at `scrollTop`: from `first` up to, not including, `last`. */
  #visibleRange (total: number, scrollTop: number): { first: number, last: number } {
    const visible = this.#viewportRows()
    let first: number
    if (this.#scaled(total)) {
      const range = Math.max(1, this.#scrollHeight(total) - visible * this.#rowHeight)
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

/** What a row shows: a row drawn with the same key (and marker) can stay as it is. */
function rowKey (book: Book | undefined, index: number): string {
  return JSON.stringify(book === undefined ? [index] : [index, book.id, book.title, book.author, book.year])
}

/** A row whose book is being read: the same height as a book's, at its place in the list. */
function placeholderRow (index: number): HTMLTableRowElement {
  const row = document.createElement('tr')
  row.className = 'placeholder'
  row.setAttribute('aria-rowindex', String(index + 2))
  const cell = row.insertCell()
  cell.colSpan = 5
  cell.textContent = 'Loading…'
  return row
}

function bookRow (book: Book, index: number, marker: Marker | null): HTMLTableRowElement {
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
    const span = cell.appendChild(document.createElement('span'))
    const parts = marker?.(text) ?? null
    if (parts === null) span.textContent = text
    else span.append(...parts.map(({ text, marked }) => marked ? markOf(text) : document.createTextNode(text)))
  }
  row.insertCell().textContent = String(book.year)
  const actions = row.insertCell()
  actions.className = 'row-actions'
  actions.append(actionButton('Edit', 'edit'), actionButton('Delete', 'delete'))
  return row
}

/** A part of a text that a search matched. */
function markOf (text: string): HTMLElement {
  const mark = document.createElement('mark')
  mark.textContent = text
  return mark
}

function actionButton (label: string, action: RowAction): HTMLButtonElement {
  const button = document.createElement('button')
  button.type = 'button'
  button.className = 'quiet small'
  button.dataset.action = action
  button.textContent = label
  return button
}

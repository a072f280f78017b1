/**
 * The events of the changes that feeds catch up from the log (src/changes-subscription.ts), the
 * last CATCH_UP_TEXTS formatted, kept by position, one set per instance's feed
 * (src/changes-feed.ts). Signing a change's id is most of a catch-up's CPU: feeds that catch up
 * the same stretch of the log at about the same time (clients that resume after the same outage)
 * sign each change once.
 */
import type { Change } from './changes.js'

/** Events kept: about 3 MB. */
const CATCH_UP_TEXTS = 10_000

export class CatchUpTexts {
  /** Oldest first (a Map keeps its insertion order). */
  private readonly kept = new Map<number, { change: Change, text: string }>()

  constructor (private readonly format: (change: Change) => string, private readonly limit = CATCH_UP_TEXTS) {}

  /**
   * `change`'s event, formatted once while it is kept. Kept with its change and used for the same
   * change only: a database restored from a backup gives its positions to other changes.
   */
  text (change: Change): string {
    const kept = this.kept.get(change.position)
    if (kept !== undefined && kept.change.kind === change.kind && kept.change.book === change.book) return kept.text
    const text = this.format(change)
    this.kept.delete(change.position)
    this.kept.set(change.position, { change, text })
    if (this.kept.size > this.limit) this.kept.delete(this.kept.keys().next().value!)
    return text
  }
}

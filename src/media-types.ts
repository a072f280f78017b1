/**
 * The formats a listing or an import's answer comes in, chosen by the request's `Accept` (RFC
 * 9110 section 12.5.1, q-values): the envelope, as every answer always was, or the books
 * themselves as CSV or NDJSON when the client names one of those explicitly and prefers it.
 */
import Negotiator from 'negotiator'

export type AnswerFormat = 'envelope' | 'csv' | 'ndjson'

/** RFC 4180's type, with its two optional parameters: the text is UTF-8, and a header line comes first. */
export const CSV_MEDIA_TYPE = 'text/csv; charset=utf-8; header=present'
export const NDJSON_MEDIA_TYPE = 'application/x-ndjson'
/** What an NDJSON answer is sent as: Fastify gives a text body without a charset this one. */
export const NDJSON_ANSWER_TYPE = `${NDJSON_MEDIA_TYPE}; charset=utf-8`

/**
 * The envelope's type first: on a tie between it and a wildcard, the envelope wins. The types with
 * the parameters of the answers, so that a media range naming one of them (`text/csv;
 * charset=utf-8`) matches, and one naming another value (`charset=latin1`) does not.
 */
const OFFERED = ['application/json', CSV_MEDIA_TYPE, NDJSON_ANSWER_TYPE]
const FORMATS: Record<string, { type: string, format: AnswerFormat }> = {
  [CSV_MEDIA_TYPE]: { type: 'text/csv', format: 'csv' },
  [NDJSON_ANSWER_TYPE]: { type: NDJSON_MEDIA_TYPE, format: 'ndjson' }
}

/**
 * The format the client prefers. A wildcard (`*\/*`, `text/*`) only ever selects the envelope:
 * an `Accept: text/*` got the envelope before CSV existed, and still does. No `Accept`, or one
 * that accepts none of the three, is the envelope too: every failure is an envelope anyway.
 */
export function answerFormat (accept: string | undefined): AnswerFormat {
  if (accept === undefined) return 'envelope'
  const best = new Negotiator({ headers: { accept } }).mediaType(OFFERED)
  const chosen = best === undefined ? undefined : FORMATS[best]
  return chosen !== undefined && namesExplicitly(accept, chosen.type) ? chosen.format : 'envelope'
}

/** Whether a media range of `accept` is `type` itself, rather than a wildcard that covers it. */
function namesExplicitly (accept: string, type: string): boolean {
  return accept.split(',').some((range) => range.split(';', 1)[0]!.trim().toLowerCase() === type)
}

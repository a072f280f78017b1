/**
 * What the service's own code asks of tracing: a span around work that no request's span covers
 * (the feed's polls, a listing's later pages, a batched statement that answers several
 * requests), and a reference to the span a request runs in, for such work to name it.
 *
 * Tracing is off unless an OTLP endpoint is configured (docs/operations.md, Tracing): then
 * `NO_TRACING` answers, which runs the work as it is, and nothing of OpenTelemetry is loaded.
 * With it on, src/tracing-sdk.ts gives every Fastify instance a `tracing` of its own as the
 * instance is created, before the app registers; src/app.ts decorates `NO_TRACING` otherwise.
 */

declare const spanReference: unique symbol
/** The span some work ran in, as a reference the tracing that gave it understands; opaque here. */
export type SpanReference = { readonly [spanReference]: true }

interface SpanOptions {
  /**
   * The span it belongs to (`current()` where the work was asked for), or `null` for a trace of
   * its own (work that no request asked for). The span active where it is called otherwise.
   */
  parent?: SpanReference | null | undefined
  /** Spans it answers for besides its parent: each request a batched statement answers. */
  links?: ReadonlyArray<SpanReference | undefined>
  /** Attributes of its own, never a value a client sent. */
  attributes?: Record<string, string | number>
}

export interface Tracing {
  /** The span active here, to name as the parent or a link of later work; undefined when none. */
  current (): SpanReference | undefined
  /** Runs `work` in a span named `name`, ended when it settles. */
  inSpan<T> (name: string, options: SpanOptions, work: () => Promise<T>): Promise<T>
}

/** Tracing off: no span, the work as it is. */
export const NO_TRACING: Tracing = {
  current: () => undefined,
  inSpan: (_name, _options, work) => work()
}

declare module 'fastify' {
  interface FastifyInstance {
    tracing: Tracing
  }
}

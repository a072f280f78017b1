/**
 * Tracing on: the OpenTelemetry SDK, loaded by src/tracing-preload.ts only when an OTLP endpoint
 * is configured, before anything of the app. It reads the standard variables itself
 * (docs/operations.md, Tracing): the endpoint, the protocol (`http/protobuf`, the default, or
 * `http/json`), the service's name, the sampler, the batching of the export.
 *
 * - Every request: a server span by `@fastify/otel`, registered on each Fastify instance as it
 *   is created, named by its route (`GET /book/:id`), continuing an incoming `traceparent`.
 * - Every statement sent to PostgreSQL within traced work: a child span by
 *   `@opentelemetry/instrumentation-pg`, its text with `$n` placeholders and never its values.
 * - The app's own spans (src/tracing.ts): the instance's `tracing` decorator.
 * - The request's log lines carry `trace_id` and `span_id`.
 *
 * Nothing secret leaves: no header is recorded, the path is recorded without its query, the
 * statement without its values, and an error's message (which may quote a body: a JSON syntax
 * error does) never: a 4xx leaves the server span's status unset, as the HTTP conventions say,
 * a 5xx is an error without a description.
 */
import { subscribe } from 'node:diagnostics_channel'
import { setTimeout } from 'node:timers/promises'
import { FastifyOtelInstrumentation } from '@fastify/otel'
import { ROOT_CONTEXT, SpanStatusCode, context, trace, type Link, type Span, type SpanContext } from '@opentelemetry/api'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { registerInstrumentations } from '@opentelemetry/instrumentation'
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import { BatchSpanProcessor, NodeTracerProvider, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-node'
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { SpanReference, Tracing } from './tracing.js'

/** What the service is called in traces unless OTEL_SERVICE_NAME says otherwise. */
const SERVICE_NAME = 'bookkeeping'
/**
 * How long a close waits for the last spans to leave: well within fastify-cli's grace (`-g` of
 * `npm start`), so a collector that does not answer never turns a clean stop into a killed one.
 */
const FLUSH_ON_CLOSE_MS = 2000
/** The name of the tracer of the app's own spans. */
const TRACER_NAME = 'bookkeeping'

/**
 * Requests that machines make every few seconds: readiness and liveness checks, metrics scrapes.
 * Their log lines are at `debug` for the same reason (docs/operations.md, Logging of health checks).
 */
function polledByMachines ({ url }: { url?: string }): boolean {
  return url !== undefined && (url.startsWith('/health/') || url === '/metrics' || url.startsWith('/metrics?'))
}

/** The exporter OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL names; an error for one this service has no exporter for. */
function exporter (env: NodeJS.ProcessEnv) {
  const variable = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL'
  const protocol = env[variable]?.trim() || 'http/protobuf'
  if (protocol === 'http/protobuf') return new ProtobufExporter()
  if (protocol === 'http/json') return new JsonExporter()
  throw new Error(`${variable}="${protocol}" is not a protocol this service exports with; set it to http/protobuf or http/json`)
}

/**
 * The spans as `exporter` sends them, without an error's message (in a status or an exception
 * event): it may quote what a client sent. A server span of a 4xx has no error status either
 * (the client's error, not the server's, as the HTTP conventions say).
 */
function withoutErrorMessages (exporter: SpanExporter): SpanExporter {
  const scrubbed = (span: ReadableSpan): ReadableSpan => {
    const status = span.attributes['http.response.status_code']
    return {
      name: span.name,
      kind: span.kind,
      spanContext: () => span.spanContext(),
      parentSpanContext: span.parentSpanContext,
      startTime: span.startTime,
      endTime: span.endTime,
      status: typeof status === 'number' && status < 500 ? { code: SpanStatusCode.UNSET } : { code: span.status.code },
      attributes: span.attributes,
      links: span.links,
      events: span.events.filter((event) => event.name !== 'exception'),
      duration: span.duration,
      ended: span.ended,
      resource: span.resource,
      instrumentationScope: span.instrumentationScope,
      droppedAttributesCount: span.droppedAttributesCount,
      droppedEventsCount: span.droppedEventsCount,
      droppedLinksCount: span.droppedLinksCount
    }
  }
  return {
    export: (spans, done) => exporter.export(spans.map(scrubbed), done),
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve()
  }
}

/** The path of a request target: the query may hold what a client typed (a title searched for). */
function pathOf (url: string): string {
  const query = url.indexOf('?')
  return query === -1 ? url : url.slice(0, query)
}

/**
 * Fails on an endpoint that is not an http(s) URL, whose spans the exporter would drop in
 * silence; never shows it (it may hold credentials).
 */
function checkEndpoints (env: NodeJS.ProcessEnv) {
  for (const variable of ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_ENDPOINT']) {
    const value = env[variable]
    if (value && !['http:', 'https:'].includes(URL.parse(value)?.protocol ?? '')) {
      throw new Error(`${variable} is not a URL; set it to the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318`)
    }
  }
}

function startTracing (env: NodeJS.ProcessEnv = process.env) {
  checkEndpoints(env)
  const provider = new NodeTracerProvider({
    resource: defaultResource()
      .merge(resourceFromAttributes({ 'service.name': SERVICE_NAME }))
      .merge(detectResources({ detectors: [envDetector] })),
    spanProcessors: [new BatchSpanProcessor(withoutErrorMessages(exporter(env)))]
  })
  // The W3C trace context (`traceparent`) and baggage propagators, the async-hooks context
  provider.register()
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new FastifyOtelInstrumentation({
        registerOnInitialization: true,
        // The request span is the one wanted; a span per hook would cost more than it tells
        instrumentHooks: false,
        instrumentHandler: false,
        recordExceptions: false,
        ignorePaths: polledByMachines,
        requestHook (span: Span, request: FastifyRequest) {
          const route = request.routeOptions.url
          span.updateName(route === undefined ? request.method : `${request.method} ${route}`)
          span.setAttributes({ 'url.path': pathOf(request.url), 'url.scheme': request.protocol, 'network.protocol.version': request.raw.httpVersion })
        }
      }),
      new PgInstrumentation({
        // Statements outside traced work (the migration, the sweeps) make no traces of their own
        requireParentSpan: true,
        // Never the statement's values: they are book fields, idempotency keys
        enhancedDatabaseReporting: false,
        addSqlCommenterCommentToQueries: false,
        // A span per statement; taking a connection from the pool is not one, and would add two
        ignoreConnectSpans: true,
        // The stable conventions' `db.system.name`, and its older name, which backends still
        // read (Tempo's service graph among them)
        requestHook (span: Span) {
          span.setAttribute('db.system', 'postgresql')
        }
      })
    ]
  })
  const tracer = provider.getTracer(TRACER_NAME)

  // What src/tracing.ts calls a span reference is, here, the span's context
  const reference = (span: SpanContext) => span as unknown as SpanReference
  const spanContext = (span: SpanReference) => span as unknown as SpanContext
  const tracing: Tracing = {
    current () {
      const span = trace.getActiveSpan()
      return span === undefined ? undefined : reference(span.spanContext())
    },
    inSpan (name, { parent, links, attributes }, work) {
      const base = parent === null
        ? ROOT_CONTEXT
        : parent === undefined ? context.active() : trace.setSpanContext(context.active(), spanContext(parent))
      const spanLinks: Link[] = (links ?? []).flatMap((link) => link === undefined ? [] : [{ context: spanContext(link) }])
      return tracer.startActiveSpan(name, { links: spanLinks, attributes, root: parent === null }, base, async (span) => {
        try {
          return await work()
        } catch (err) {
          span.setStatus({ code: SpanStatusCode.ERROR })
          throw err
        } finally {
          span.end()
        }
      })
    }
  }

  /**
   * The request's log lines carry the ids of its span (the request span, active in its hooks from
   * here on): bound to the request's own logger, which Fastify made for it alone.
   */
  function logWithTraceIds (request: FastifyRequest, _reply: FastifyReply, done: () => void) {
    const span = trace.getActiveSpan()
    if (span !== undefined) {
      const { traceId, spanId } = span.spanContext()
      // pino's, as every logger of Fastify's is; FastifyBaseLogger's type leaves it out
      const log = request.log as FastifyBaseLogger & { setBindings (bindings: Record<string, string>): void }
      log.setBindings({ trace_id: traceId, span_id: spanId })
    }
    done()
  }
  // Registered after @fastify/otel's plugin, and so run after its `onRequest` hook, which makes the request span active
  const traceIdsInLogs = Object.assign(async function traceIdsInLogs (fastify: FastifyInstance) {
    fastify.addHook('onRequest', logWithTraceIds)
  }, { [Symbol.for('skip-override')]: true })

  // Every instance, as it is created, before the app registers anything on it (as @fastify/otel,
  // subscribed before this, registers its plugin)
  subscribe('fastify.initialization', (message) => {
    const { fastify } = message as { fastify: FastifyInstance }
    fastify.decorate('tracing', tracing)
    fastify.register(traceIdsInLogs)
    // The spans of the last requests leave before the process exits
    fastify.addHook('onClose', async () => {
      await Promise.race([provider.forceFlush(), setTimeout(FLUSH_ON_CLOSE_MS, undefined, { ref: false })])
    })
  })
}

startTracing()

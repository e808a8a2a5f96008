// The current span when tracing may be off (no exporter configured). Then no spans are made,
// and Effect's own helpers get costly or wrong: Effect.currentSpan and annotateCurrentSpan build
// an Error (stack included) when there is no recorded span, and a no-op span's ids are "noop".
// - traceparent for what the gateway calls (upstreams, webhook receivers): the nearest recorded
//   span, else the caller's own traceparent unchanged, so a client's trace still reaches the
//   upstream;
// - currentSpan / annotateCurrentSpan without the Error;
// - withCallSpan: a span on the per-call path only when tracing is on.
import { Context, Effect, FiberRef, Option, Tracer } from "effect"

/** The span whose ids a callee should see: the nearest recorded (or external) span. */
const propagated = (span: Tracer.AnySpan): Option.Option<Tracer.AnySpan> =>
  span._tag === "Span" && span.spanId === "noop" ? Option.flatMap(span.parent, propagated) : Option.some(span)

/** `traceparent` naming a span as the parent of whatever receives it. */
export const traceparentOf = (span: Tracer.AnySpan): string | null =>
  Option.match(propagated(span), {
    onNone: () => null,
    onSome: (s) => `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}`
  })

/** The nearest span of the fiber's context (one runtime operation: these run several times per call). */
const parentSpan = <A>(f: (span: Option.Option<Tracer.AnySpan>) => A): Effect.Effect<A> =>
  Effect.withFiberRuntime((fiber) => Effect.succeed(f(Context.getOption(fiber.currentContext, Tracer.ParentSpan))))

const recorded = (span: Option.Option<Tracer.AnySpan>): Option.Option<Tracer.Span> =>
  Option.filter(span, (s): s is Tracer.Span => s._tag === "Span")

/**
 * The current span, if any. Effect.currentSpan fails (an Error, stack included) when there is
 * none, the common case with tracing off; this reads the context.
 */
export const currentSpan: Effect.Effect<Option.Option<Tracer.Span>> = parentSpan(recorded)

const traceparentIn = Option.match({ onNone: () => null, onSome: traceparentOf })

/** `f` of the current span's traceparent (null outside any trace), in one runtime operation (no map after the read). */
export const withTraceparent = <A>(f: (traceparent: string | null) => A): Effect.Effect<A> =>
  parentSpan((span) => f(traceparentIn(span)))

/** The current span's traceparent; null outside any trace. */
export const currentTraceparent: Effect.Effect<string | null> = withTraceparent((traceparent) => traceparent)

/** Adds attributes to the current span; nothing when there is none or it is a no-op. */
export const annotateCurrentSpan = (attributes: Record<string, unknown>): Effect.Effect<void> =>
  parentSpan((parent) => {
    const span = recorded(parent)
    if (span._tag === "None" || span.value.spanId === "noop") return
    for (const key in attributes) span.value.attribute(key, attributes[key])
  })

/**
 * Sets a list of strings as one attribute. Effect's Span.attribute turns an array into a single
 * string; the OpenTelemetry span under @effect/opentelemetry's (its `span` field) keeps the list.
 */
export const listAttribute = (span: Tracer.Span, key: string, values: ReadonlyArray<string>): void => {
  const otel = (span as { readonly span?: { readonly setAttribute?: (key: string, value: Array<string>) => unknown } }).span
  if (typeof otel?.setAttribute === "function") otel.setAttribute(key, [...values])
  else span.attribute(key, values)
}

/**
 * Effect.withSpan for the per-call path: skipped outright when tracing is off (even a no-op span
 * copies the fiber's whole context and updates its FiberRefs), and no stack capture (a new Error
 * per span). Attributes are computed only when the span is made.
 */
export const withCallSpan = (name: string, attributes?: () => Record<string, unknown>) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime<A, E, R>((fiber) =>
    fiber.getFiberRef(FiberRef.currentTracerEnabled)
      ? Effect.withSpan(self, name, { captureStackTrace: false, ...(attributes === undefined ? {} : { attributes: attributes() }) })
      : self
  )

/** Whether this fiber makes spans (TracingLive settles it at start: an exporter or none). */
export const tracingEnabled: Effect.Effect<boolean> = FiberRef.get(FiberRef.currentTracerEnabled)

const noSpan = (_name: string, _attributes?: () => Record<string, unknown>) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => self

/**
 * The per-call span helper for a service built with tracing on or off (`tracingEnabled` read
 * when it is built): withCallSpan, or the effect as it is, without withCallSpan's check per call.
 */
export const callSpans = (tracing: boolean): typeof withCallSpan => tracing ? withCallSpan : noSpan

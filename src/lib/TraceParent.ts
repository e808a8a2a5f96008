// W3C traceparent for what the gateway calls (upstreams, webhook receivers). With tracing off
// (no exporter configured) every span is a no-op: then the caller's own traceparent, the no-op
// spans' external parent, travels on unchanged, so a client's trace still reaches the upstream.
import { Effect, Option, type Tracer } from "effect"

/** The span whose ids a callee should see: the nearest recorded (or external) span. */
const propagated = (span: Tracer.AnySpan): Option.Option<Tracer.AnySpan> =>
  span._tag === "Span" && span.spanId === "noop" ? Option.flatMap(span.parent, propagated) : Option.some(span)

/** `traceparent` naming a span as the parent of whatever receives it. */
export const traceparentOf = (span: Tracer.AnySpan): string | null =>
  Option.match(propagated(span), {
    onNone: () => null,
    onSome: (s) => `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}`
  })

/** The current span's traceparent; null outside any trace. */
export const currentTraceparent: Effect.Effect<string | null> = Effect.map(
  Effect.option(Effect.currentSpan),
  Option.match({ onNone: () => null, onSome: traceparentOf })
)

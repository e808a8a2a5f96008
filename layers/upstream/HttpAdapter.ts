// The shape every HTTP adapter shares: a JSON POST decoded into a completion, or an SSE POST whose
// events a per-provider translator turns into chunks until the provider's terminator.
import { type Either, Effect, Stream } from "effect"
import type { ChatCompletion } from "../../schemas/Chat.js"
import { type PostRequest, postJson, postStream } from "./Http.js"
import { initialMeta, parseSse, type SseEvent, type Step, type StreamMeta, untilDone } from "./Sse.js"
import type { UpstreamAdapter, UpstreamCall, UpstreamError } from "./Upstream.js"
import { withCallSpan } from "../../src/lib/CurrentSpan.js"

export interface HttpAdapterSpec<W> {
  /** Span name part: `Upstream.<kind>.complete|stream`. */
  readonly kind: string
  readonly post: (call: UpstreamCall, stream: boolean) => PostRequest
  readonly decode: (text: string) => Either.Either<W, UpstreamError>
  readonly toCompletion: (wire: W, call: UpstreamCall) => Effect.Effect<ChatCompletion, UpstreamError>
  /** A stateful translator per stream: one SSE event in, the chunks it yields (and whether it ended). */
  readonly translator: (meta: StreamMeta) => (event: SseEvent) => Effect.Effect<Step, UpstreamError>
}

/**
 * Translates the events a network read delivered as one batch (Stream.mapEffect would split
 * every batch into single events, and each later stage, up to the socket write, would then run
 * once per event). A failing event still comes after the steps before it, as with mapEffect.
 */
const translateBatches = (translate: (event: SseEvent) => Effect.Effect<Step, UpstreamError>) =>
(events: Stream.Stream<SseEvent, UpstreamError>): Stream.Stream<Step, UpstreamError> =>
  events.pipe(
    Stream.chunks,
    Stream.flatMap((batch) =>
      Stream.unwrap(Effect.gen(function*() {
        const steps: Array<Step> = []
        for (const event of batch) {
          const step = yield* Effect.either(translate(event))
          if (step._tag === "Left") return Stream.concat(Stream.fromIterable(steps), Stream.fail(step.left))
          steps.push(step.right)
        }
        return Stream.fromIterable(steps)
      }))
    )
  )

export const httpAdapter = <W>(spec: HttpAdapterSpec<W>): UpstreamAdapter => {
  const span = (name: string, call: UpstreamCall) =>
    withCallSpan(`Upstream.${spec.kind}.${name}`, () => ({ "upstream.model": call.providerModelId }))
  return {
    complete: (call) =>
      postJson(spec.post(call, false)).pipe(
        Effect.flatMap(spec.decode),
        Effect.flatMap((wire) => spec.toCompletion(wire, call)),
        span("complete", call)
      ),
    stream: (call) =>
      Effect.gen(function*() {
        const bytes = yield* postStream(spec.post(call, true))
        const meta = yield* initialMeta(call.providerModelId)
        return parseSse(bytes).pipe(translateBatches(spec.translator(meta)), untilDone)
      }).pipe(span("stream", call))
  }
}

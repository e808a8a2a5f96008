// The shape every HTTP adapter shares: a JSON POST decoded into a completion, or an SSE POST whose
// events a per-provider translator turns into chunks until the provider's terminator; both within
// the answer limits (Limits.ts).
import { type Either, Effect } from "effect"
import type { ChatCompletion } from "../../../schemas/Chat.js"
import { type PostRequest, postJson, postStream } from "./Http.js"
import { defaultUpstreamLimits, type UpstreamLimits } from "./Limits.js"
import { initialMeta, type SseEvent, sseChunks, type Step, type StreamMeta } from "./Sse.js"
import type { UpstreamAdapter, UpstreamCall, UpstreamError } from "./Upstream.js"
import { withCallSpan } from "../../lib/CurrentSpan.js"

export interface HttpAdapterSpec<W> {
  /** Span name part: `Upstream.<kind>.complete|stream`. */
  readonly kind: string
  readonly post: (call: UpstreamCall, stream: boolean) => PostRequest
  readonly decode: (text: string) => Either.Either<W, UpstreamError>
  readonly toCompletion: (wire: W, call: UpstreamCall) => Effect.Effect<ChatCompletion, UpstreamError>
  /** A stateful translator per stream: one SSE event in, the chunks it yields (and whether it ended). */
  readonly translator: (meta: StreamMeta) => (event: SseEvent) => Either.Either<Step, UpstreamError>
}

export const httpAdapter = <W>(spec: HttpAdapterSpec<W>, limits: UpstreamLimits = defaultUpstreamLimits): UpstreamAdapter => {
  const span = (name: string, call: UpstreamCall) =>
    withCallSpan(`Upstream.${spec.kind}.${name}`, () => ({ "upstream.model": call.providerModelId }))
  const open = Effect.fnUntraced(function*(call: UpstreamCall) {
    const meta = yield* initialMeta(call.providerModelId)
    // Nothing between the exchange and the stream that closes its body.
    return yield* sseChunks(yield* postStream(spec.post(call, true)), spec.translator(meta), call, limits.maxSseLineLength)
  })
  return {
    complete: (call) =>
      postJson(spec.post(call, false), limits.maxBodyBytes).pipe(
        Effect.flatMap(spec.decode),
        Effect.flatMap((wire) => spec.toCompletion(wire, call)),
        span("complete", call)
      ),
    stream: (call) => open(call).pipe(span("stream", call))
  }
}

// POST /v1/chat/completions as both of its fronts serve it (the HttpApi handler in Http.ts and
// the front route in ChatRoute.ts): the tools check, the five pre-flight checks, then the answer
// or its stream of chunks, with the rate-limit headers the answer carries.
import { Effect, type Stream } from "effect"
import { type Caller, Inference } from "../../layers/pipeline/Inference.js"
import type { ChatChunk, ChatCompletion, ChatRequest, ChatRequestBody } from "../../schemas/Chat.js"
import { ValidationError } from "../../schemas/Errors.js"
import { rateLimitHeaders } from "./Answers.js"

/**
 * A chat answer: the completion, or the chunks to send as SSE, ended by `data: [DONE]` unless
 * the upstream dropped (a client detects a drop by its absence).
 */
export type ChatAnswer =
  | { readonly headers: Record<string, string>; readonly completion: ChatCompletion }
  | {
    readonly headers: Record<string, string>
    readonly chunks: Stream.Stream<ChatChunk>
    readonly dropped: () => boolean
    /** The upstream's terminator was read: the batch in hand is the last one. */
    readonly terminated: () => boolean
  }

/** One chunk as an SSE event. */
export const chatEvent = (chunk: ChatChunk) => `data: ${JSON.stringify(chunk)}\n\n`

export const SSE_DONE = "data: [DONE]\n\n"

export const makeChat = Effect.gen(function*() {
  const inference = yield* Inference
  // Made once (hot-path rule "no hidden class per call", docs/performance.md).
  return Effect.fnUntraced(function*(caller: Caller, payload: ChatRequestBody) {
    const hosted = (payload.tools ?? []).findIndex((t) => t.type === "mcp")
    if (hosted >= 0) {
      return yield* new ValidationError({
        code: "unsupported_tool_type",
        param: `tools.${hosted}.type`,
        message: "Tools of type mcp are only supported on /v1/responses"
      })
    }
    const admitted = yield* inference.admit(caller, payload as ChatRequest)
    const headers = rateLimitHeaders(admitted.rateLimit)
    if (payload.stream !== true) return { headers, completion: yield* inference.complete(admitted) } satisfies ChatAnswer
    const { chunks, dropped, terminated } = yield* inference.stream(admitted)
    return { headers, chunks, dropped, terminated } satisfies ChatAnswer
  })
})

// The `openai` adapter: Chat Completions passthrough (POST {baseUrl}/chat/completions), and
// embeddings (OpenAiEmbeddings.ts). The request is already OpenAI-shaped, so only the model, the
// stream flags and auth change; the answer is decoded leniently (OpenAI-compatible servers vary)
// and re-shaped to the contract.
import { Effect, Either, Schema } from "effect"
import type { ChatChunk, ChatCompletion, Usage } from "../../../schemas/Chat.js"
import { joinUrl, jsonDecoder, mergeHeaders, protocolError } from "./Http.js"
import { completionId, emit, finished, nowSeconds, type SseEvent, type Step, type StreamMeta } from "./Sse.js"
import { httpAdapter } from "./HttpAdapter.js"
import { makeOpenAiEmbed } from "./OpenAiEmbeddings.js"
import type { UpstreamLimits } from "./Limits.js"
import { type UpstreamAdapter, type UpstreamCall, UpstreamError } from "./Upstream.js"

// Counts are any JSON number here: whether the gateway believes them is Inference's rule
// (usageInBounds), which bills a call with absurd usage on its own count instead of losing it.
const UsageWire = Schema.Struct({
  prompt_tokens: Schema.Number,
  completion_tokens: Schema.Number,
  total_tokens: Schema.optional(Schema.Number)
})

const ToolCallWire = Schema.Struct({
  id: Schema.String,
  type: Schema.optional(Schema.String),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

export const CompletionWire = Schema.Struct({
  id: Schema.optional(Schema.String),
  created: Schema.optional(Schema.Number),
  model: Schema.optional(Schema.String),
  choices: Schema.Array(Schema.Struct({
    index: Schema.optional(Schema.Int),
    message: Schema.Struct({
      content: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCallWire)))
    }),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String))
  })),
  usage: Schema.optional(Schema.NullOr(UsageWire))
})

const ToolCallDeltaWire = Schema.Struct({
  index: Schema.Int,
  id: Schema.optional(Schema.NullOr(Schema.String)),
  type: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.optional(Schema.NullOr(Schema.Struct({
    name: Schema.optional(Schema.NullOr(Schema.String)),
    arguments: Schema.optional(Schema.NullOr(Schema.String))
  })))
})

export const ChunkWire = Schema.Struct({
  id: Schema.optional(Schema.String),
  created: Schema.optional(Schema.Number),
  model: Schema.optional(Schema.String),
  choices: Schema.optional(Schema.Array(Schema.Struct({
    index: Schema.optional(Schema.Int),
    delta: Schema.optional(Schema.NullOr(Schema.Struct({
      role: Schema.optional(Schema.NullOr(Schema.String)),
      content: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCallDeltaWire)))
    }))),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String))
  }))),
  usage: Schema.optional(Schema.NullOr(UsageWire)),
  // Some servers report a failure inside a 200 stream.
  error: Schema.optional(Schema.Struct({ message: Schema.optional(Schema.String) }))
})
type ChunkWire = typeof ChunkWire.Type

const decodeCompletion = jsonDecoder(CompletionWire, "chat completion")
const decodeChunk = jsonDecoder(ChunkWire, "chat completion chunk")

const usage = (u: typeof UsageWire.Type): Usage => ({
  prompt_tokens: u.prompt_tokens,
  completion_tokens: u.completion_tokens,
  total_tokens: u.total_tokens ?? u.prompt_tokens + u.completion_tokens
})

// stream_options is only legal with stream: true, so a non-stream call drops both. Built up, not
// spread (hot-path rule "no hidden class per call", docs/performance.md).
export const upstreamRequestBody = (call: UpstreamCall, stream: boolean) => {
  const body: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(call.request)) if (key !== "stream" && key !== "stream_options") body[key] = value
  body.model = call.providerModelId
  if (stream) {
    body.stream = true
    body.stream_options = { include_usage: true }
  }
  return body
}

const post = (call: UpstreamCall, stream: boolean) => ({
  url: joinUrl(call.baseUrl, "/chat/completions"),
  headers: mergeHeaders(call.headers, { authorization: `Bearer ${call.apiKey}` }),
  body: upstreamRequestBody(call, stream),
  timeoutMs: call.timeoutMs
})

const toCompletion = Effect.fnUntraced(function*(wire: typeof CompletionWire.Type, call: UpstreamCall) {
  if (wire.usage === undefined || wire.usage === null) return yield* protocolError("completion without usage")
  const completion: ChatCompletion = {
    id: wire.id ?? completionId(),
    object: "chat.completion",
    created: wire.created === undefined ? yield* nowSeconds : Math.floor(wire.created),
    model: wire.model ?? call.providerModelId,
    choices: wire.choices.map((c, i) => ({
      index: c.index ?? i,
      message: {
        role: "assistant",
        content: c.message.content ?? null,
        ...(c.message.tool_calls && c.message.tool_calls.length > 0
          ? {
            tool_calls: c.message.tool_calls.map((t) => ({
              id: t.id,
              type: "function" as const,
              function: { name: t.function.name, arguments: t.function.arguments }
            }))
          }
          : {})
      },
      finish_reason: c.finish_reason ?? null
    })),
    usage: usage(wire.usage)
  }
  return completion
})

const toolCallDeltas = (deltas: ReadonlyArray<typeof ToolCallDeltaWire.Type>) =>
  deltas.map((d) => ({
    index: d.index,
    ...(d.id ? { id: d.id, type: "function" as const } : {}),
    ...(d.function
      ? {
        function: {
          ...(d.function.name ? { name: d.function.name } : {}),
          ...(typeof d.function.arguments === "string" ? { arguments: d.function.arguments } : {})
        }
      }
      : {})
  }))

type Delta = { -readonly [K in keyof ChatChunk["choices"][number]["delta"]]: ChatChunk["choices"][number]["delta"][K] }

/**
 * A chunk's delta with what the provider set, in the wire's key order. Assigned field by field:
 * a conditional spread builds a throwaway object per field, on every event of every stream.
 */
const deltaOf = (wire: NonNullable<ChunkWire["choices"]>[number]["delta"]): Delta => {
  const delta: Delta = {}
  if (wire == null) return delta
  if (wire.role === "assistant") delta.role = "assistant"
  if (wire.content !== undefined) delta.content = wire.content
  if (wire.tool_calls) delta.tool_calls = toolCallDeltas(wire.tool_calls)
  return delta
}

const toChunk = (wire: ChunkWire, meta: StreamMeta): ChatChunk => {
  const chunk: { -readonly [K in keyof ChatChunk]: ChatChunk[K] } = {
    id: wire.id ?? meta.id,
    object: "chat.completion.chunk",
    created: wire.created === undefined ? meta.created : Math.floor(wire.created),
    model: wire.model ?? meta.model,
    choices: (wire.choices ?? []).map((c, i) => ({ index: c.index ?? i, delta: deltaOf(c.delta), finish_reason: c.finish_reason ?? null }))
  }
  if (wire.usage) chunk.usage = usage(wire.usage)
  return chunk
}

// The contract promises the role chunk first; a compatible server that omits it gets one added.
const withRole = (c: ChatChunk): ChatChunk => {
  const first = c.choices[0]
  if (first === undefined || first.delta.role !== undefined) return c
  return { ...c, choices: [{ ...first, delta: { role: "assistant", ...first.delta } }, ...c.choices.slice(1)] }
}

const translator = (meta: StreamMeta) => {
  let sawChoices = false
  return (event: SseEvent): Either.Either<Step, UpstreamError> => {
    if (event.data === "[DONE]") return Either.right(finished())
    return Either.flatMap(decodeChunk(event.data), (wire) => {
      if (wire.error !== undefined) {
        return Either.left(
          new UpstreamError({ kind: "status", message: "upstream sent an error event", retryable: true, detail: wire.error.message ?? "unknown" })
        )
      }
      const c = toChunk(wire, meta)
      if (sawChoices || c.choices.length === 0) return Either.right(emit(c))
      sawChoices = true
      return Either.right(emit(withRole(c)))
    })
  }
}

export const makeOpenAiAdapter = (limits?: UpstreamLimits): UpstreamAdapter => ({
  ...httpAdapter({ kind: "openai", post, decode: decodeCompletion, toCompletion, translator }, limits),
  embed: makeOpenAiEmbed(limits)
})

export const OpenAiAdapter: UpstreamAdapter = makeOpenAiAdapter()

// Messages API calls passed through to an `anthropic` upstream: the client's body as it sent it
// (the provider's model id in place of the model, `stream` as asked), the answer or the SSE events
// relayed as the provider sent them. Usage is read on the way, cache tokens included; the rest of
// the body (cache_control, thinking, betas) is the provider's business.
import { Effect, Either, Schema } from "effect"
import type { StreamEvent } from "../../../schemas/Messages.js"
import { withCallSpan } from "../../lib/CurrentSpan.js"
import { MessageWire, promptTokens, streamError } from "./Anthropic.js"
import { joinUrl, jsonDecoder, mergeHeaders, postJson, postStream, protocolError } from "./Http.js"
import type { UpstreamLimits } from "./Limits.js"
import { type SseEvent, type SseHooks, sseChunks, type Step, usageOf } from "./Sse.js"
import type { UpstreamCall, UpstreamError } from "./Upstream.js"

/** One attempt: the call's provider, credentials and limits, and the client's body and beta flags. */
export interface NativeCall extends Omit<UpstreamCall, "request" | "step"> {
  /** The client's body as it sent it (parsed JSON, unknown fields kept). */
  readonly body: Readonly<Record<string, unknown>>
  /** The client's `anthropic-beta` header (features it opted into), passed on. */
  readonly beta: string | undefined
}

/** A relayed answer: the provider's message as it sent it, and what it reports. */
export interface NativeAnswer {
  readonly message: Record<string, unknown>
  readonly usage: ReturnType<typeof usageOf>
  readonly cache: { readonly read: number; readonly write: number } | undefined
  /** The answer's text and tool inputs, counted when its usage cannot be believed. */
  readonly emitted: string
}

const decodeMessage = jsonDecoder(MessageWire, "anthropic message")

const post = (call: NativeCall, stream: boolean) => ({
  url: joinUrl(call.baseUrl, "/messages"),
  headers: mergeHeaders(call.headers, {
    "x-api-key": call.apiKey,
    "anthropic-version": "2023-06-01",
    ...(call.beta !== undefined ? { "anthropic-beta": call.beta } : {})
  }),
  body: { ...call.body, model: call.providerModelId, stream },
  timeoutMs: call.timeoutMs
})

const answerOf = (text: string): Either.Either<NativeAnswer, UpstreamError> =>
  Either.map(decodeMessage(text), (wire) => {
    const usage = wire.usage
    const read = usage.cache_read_input_tokens ?? 0
    const write = usage.cache_creation_input_tokens ?? 0
    const emitted = wire.content.map((b) => b.type === "tool_use" ? JSON.stringify(b.input ?? {}) : b.text ?? "").join("")
    return {
      message: JSON.parse(text) as Record<string, unknown>,
      usage: usageOf(promptTokens(usage), usage.output_tokens ?? 0),
      cache: read > 0 || write > 0 ? { read, write } : undefined,
      emitted
    }
  })

const EventType = Schema.Struct({ type: Schema.String })
const isEvent = Schema.is(EventType)

/** One SSE event relayed as it came; the provider's error event fails the stream, message_stop ends it. */
const relayEvent = (event: SseEvent): Either.Either<Step<StreamEvent>, UpstreamError> => {
  let data: unknown
  try {
    data = JSON.parse(event.data)
  } catch {
    return Either.left(protocolError("unexpected anthropic stream event", event.data.slice(0, 200)))
  }
  if (!isEvent(data)) return Either.left(protocolError("unexpected anthropic stream event", event.data.slice(0, 200)))
  const wire = data as StreamEvent
  if (wire.type === "error") return Either.left(streamError(wire.error as Parameters<typeof streamError>[0]))
  return Either.right({ chunks: [wire], done: wire.type === "message_stop" })
}

export const makeNativeMessages = (limits: UpstreamLimits) => {
  const span = (name: string, call: NativeCall) => withCallSpan(`Upstream.anthropic.messages.${name}`, () => ({ "upstream.model": call.providerModelId }))
  const complete = (call: NativeCall): Effect.Effect<NativeAnswer, UpstreamError> =>
    postJson(post(call, false), limits.maxBodyBytes).pipe(Effect.flatMap(answerOf), span("complete", call))
  const stream = (call: NativeCall, hooks: SseHooks<StreamEvent>) =>
    Effect.flatMap(postStream(post(call, true)), (body) =>
      sseChunks(body, relayEvent, { ...hooks, apiKey: call.apiKey, providerModelId: call.providerModelId }, limits.maxSseLineLength)).pipe(span("stream", call))
  return { complete, stream } as const
}

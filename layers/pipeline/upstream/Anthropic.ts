// The `anthropic` adapter: chat requests translated to the Messages API (POST {baseUrl}/messages,
// baseUrl like https://api.anthropic.com/v1) and its answers, JSON or SSE, translated back.
import { Effect, Either, Schema } from "effect"
import type { ChatCompletion, ChatMessage, ChatRequest, ToolCall, Usage } from "../../../schemas/Chat.js"
import { joinUrl, jsonDecoder, mergeHeaders } from "./Http.js"
import { assistantChoice, chunk, completionId, emit, finished, messageText, nowSeconds, type SseEvent, type Step, type StreamMeta, usageChunk, usageOf } from "./Sse.js"
import { httpAdapter } from "./HttpAdapter.js"
import type { UpstreamLimits } from "./Limits.js"
import { type UpstreamAdapter, type UpstreamCall, UpstreamError } from "./Upstream.js"

// ---- request ------------------------------------------------------------------------------

type ImageSource =
  | { readonly type: "base64"; readonly media_type: string; readonly data: string }
  | { readonly type: "url"; readonly url: string }

type Block =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "image"; readonly source: ImageSource }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: unknown }
  | { readonly type: "tool_result"; readonly tool_use_id: string; readonly content: string }

interface Message {
  readonly role: "user" | "assistant"
  readonly content: ReadonlyArray<Block>
}

/** Anthropic has no max-tokens default; this is what a chat client gets when it sends none. */
export const DEFAULT_MAX_TOKENS = 1024

// Anthropic needs `input` to be an object; arguments a client mangled become {} rather than a 400.
const parseArguments = (args: string): unknown => {
  try {
    const value: unknown = JSON.parse(args)
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : {}
  } catch {
    return {}
  }
}

const textBlocks = (text: string): ReadonlyArray<Block> => (text === "" ? [] : [{ type: "text", text }])

/** An image URL as Anthropic's source: a data URL's bytes inline (base64), any other URL by reference. */
const imageSource = (url: string): ImageSource => {
  const data = /^data:([^;,]+);base64,(.*)$/s.exec(url)
  return data === null ? { type: "url", url } : { type: "base64", media_type: data[1]!, data: data[2]! }
}

/** A user turn's blocks: its text and images in order (files are refused before the call: Support.ts). */
const userBlocks = (content: ChatMessage["content"]): ReadonlyArray<Block> =>
  Array.isArray(content) && content.some((p) => p.image_url !== undefined)
    ? content.flatMap((p): ReadonlyArray<Block> =>
      p.image_url !== undefined ? [{ type: "image", source: imageSource(p.image_url.url) }] : textBlocks(p.text ?? "")
    )
    : textBlocks(messageText(content))

const toMessage = (m: ChatMessage): Message | undefined => {
  switch (m.role) {
    case "user":
      return { role: "user", content: userBlocks(m.content) }
    case "assistant":
      return {
        role: "assistant",
        content: [
          ...textBlocks(messageText(m.content)),
          ...(m.tool_calls ?? []).map((t): Block => ({
            type: "tool_use",
            id: t.id,
            name: t.function.name,
            input: parseArguments(t.function.arguments)
          }))
        ]
      }
    case "tool":
      return {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: m.tool_call_id ?? "", content: messageText(m.content) }]
      }
    default:
      return undefined // system/developer go to the top-level `system`
  }
}

// Anthropic rejects empty content and wants roles to alternate: drop empties, merge neighbours.
const toMessages = (messages: ReadonlyArray<ChatMessage>): ReadonlyArray<Message> =>
  messages.reduce<Array<Message>>((out, m) => {
    const next = toMessage(m)
    if (next === undefined || next.content.length === 0) return out
    const last = out[out.length - 1]
    if (last !== undefined && last.role === next.role) {
      out[out.length - 1] = { role: last.role, content: [...last.content, ...next.content] }
    } else {
      out.push(next)
    }
    return out
  }, [])

// No JSON mode on the Messages API: the closest is an instruction in the system prompt, with the
// schema when one is given (followed by the model, not enforced by the API).
const JSON_INSTRUCTION = "Respond only with a single valid JSON object, no prose and no code fences."

const formatInstruction = (format: ChatRequest["response_format"]): string | undefined => {
  if (format?.type === "json_object") return JSON_INSTRUCTION
  if (format?.type !== "json_schema") return undefined
  return `${JSON_INSTRUCTION} It must match this JSON schema: ${JSON.stringify(format.json_schema.schema ?? {})}`
}

const systemOf = (request: ChatRequest): string | undefined => {
  const parts = request.messages
    .filter((m) => m.role === "system" || m.role === "developer")
    .map((m) => messageText(m.content))
    .filter((t) => t !== "")
  const instruction = formatInstruction(request.response_format)
  if (instruction !== undefined) parts.push(instruction)
  return parts.length === 0 ? undefined : parts.join("\n\n")
}

const toolChoiceOf = (request: ChatRequest) => {
  const choice = request.tool_choice
  const noParallel = request.parallel_tool_calls === false ? { disable_parallel_tool_use: true } : {}
  if (choice === undefined) return request.parallel_tool_calls === false ? { type: "auto", ...noParallel } : undefined
  if (choice === "none") return { type: "none" }
  if (choice === "required") return { type: "any", ...noParallel }
  if (choice === "auto") return { type: "auto", ...noParallel }
  return { type: "tool", name: choice.function.name, ...noParallel }
}

const toolsOf = (request: ChatRequest) => {
  if (request.tools === undefined || request.tools.length === 0) return {}
  const toolChoice = toolChoiceOf(request)
  return {
    tools: request.tools.map((t) => ({
      name: t.function.name,
      ...(t.function.description !== undefined ? { description: t.function.description } : {}),
      input_schema: t.function.parameters ?? { type: "object", properties: {} }
    })),
    ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {})
  }
}

export const toAnthropicRequest = (call: UpstreamCall, stream: boolean) => {
  const r = call.request
  const system = systemOf(r)
  return {
    model: call.providerModelId,
    max_tokens: r.max_tokens ?? r.max_completion_tokens ?? DEFAULT_MAX_TOKENS,
    messages: toMessages(r.messages),
    ...(system !== undefined ? { system } : {}),
    // Anthropic's temperature range is 0..1 (OpenAI's is 0..2): clamp rather than get a 400.
    ...(r.temperature !== undefined ? { temperature: Math.min(r.temperature, 1) } : {}),
    ...(r.top_p !== undefined ? { top_p: r.top_p } : {}),
    ...(r.stop !== undefined ? { stop_sequences: typeof r.stop === "string" ? [r.stop] : r.stop } : {}),
    ...(r.user !== undefined ? { metadata: { user_id: r.user } } : {}),
    ...toolsOf(r),
    ...(stream ? { stream: true } : {})
  }
}

const post = (call: UpstreamCall, stream: boolean) => ({
  url: joinUrl(call.baseUrl, "/messages"),
  headers: mergeHeaders(call.headers, { "x-api-key": call.apiKey, "anthropic-version": "2023-06-01" }),
  body: toAnthropicRequest(call, stream),
  timeoutMs: call.timeoutMs
})

// ---- response -----------------------------------------------------------------------------

// Any JSON number: Inference's usageInBounds decides whether the counts are believed.
const UsageWire = Schema.Struct({
  input_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  output_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  cache_creation_input_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  cache_read_input_tokens: Schema.optional(Schema.NullOr(Schema.Number))
})
export type UsageWire = typeof UsageWire.Type

const BlockWire = Schema.Struct({
  type: Schema.String,
  text: Schema.optional(Schema.String),
  id: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  input: Schema.optional(Schema.Unknown)
})

export const MessageWire = Schema.Struct({
  id: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  content: Schema.Array(BlockWire),
  stop_reason: Schema.optional(Schema.NullOr(Schema.String)),
  usage: UsageWire
})

export const EventWire = Schema.Struct({
  type: Schema.String,
  message: Schema.optional(Schema.Struct({
    id: Schema.optional(Schema.String),
    model: Schema.optional(Schema.String),
    usage: Schema.optional(UsageWire)
  })),
  index: Schema.optional(Schema.Int),
  content_block: Schema.optional(BlockWire),
  delta: Schema.optional(Schema.Struct({
    type: Schema.optional(Schema.String),
    text: Schema.optional(Schema.String),
    partial_json: Schema.optional(Schema.String),
    stop_reason: Schema.optional(Schema.NullOr(Schema.String))
  })),
  usage: Schema.optional(UsageWire),
  error: Schema.optional(Schema.Struct({ type: Schema.optional(Schema.String), message: Schema.optional(Schema.String) }))
})
type EventWire = typeof EventWire.Type

const decodeMessage = jsonDecoder(MessageWire, "anthropic message")
const decodeEvent = jsonDecoder(EventWire, "anthropic stream event")

// Cached prompt tokens are reported apart from input_tokens; the prompt is all of them.
export const promptTokens = (u: UsageWire): number =>
  (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0)

export const finishReason = (stopReason: string | null | undefined): string => {
  switch (stopReason) {
    case "max_tokens":
      return "length"
    case "tool_use":
      return "tool_calls"
    case "refusal":
      return "content_filter"
    default:
      return "stop" // end_turn, stop_sequence, pause_turn, absent
  }
}

const toCompletion = Effect.fnUntraced(function*(wire: typeof MessageWire.Type, call: UpstreamCall) {
  const text = wire.content.filter((b) => b.type === "text").map((b) => b.text ?? "").join("")
  const toolCalls: Array<ToolCall> = wire.content
    .filter((b) => b.type === "tool_use")
    .map((b) => ({
      id: b.id ?? "",
      type: "function",
      function: { name: b.name ?? "", arguments: JSON.stringify(b.input ?? {}) }
    }))
  const usage: Usage = usageOf(promptTokens(wire.usage), wire.usage.output_tokens ?? 0)
  const completion: ChatCompletion = {
    id: wire.id ?? completionId(),
    object: "chat.completion",
    created: yield* nowSeconds,
    model: wire.model ?? call.providerModelId,
    choices: [assistantChoice(text, toolCalls, finishReason(wire.stop_reason))],
    usage
  }
  return completion
})

// Anthropic error types worth another candidate, with the HTTP status they stand for.
const retryableErrors: Record<string, number> = { overloaded_error: 529, api_error: 500, rate_limit_error: 429 }

// Anthropic's documented error types: only these are named in the message (the rest is the provider's text).
const knownErrorTypes = new Set([
  "invalid_request_error",
  "authentication_error",
  "permission_error",
  "not_found_error",
  "request_too_large",
  "rate_limit_error",
  "api_error",
  "overloaded_error"
])

export const streamError = (error: EventWire["error"]) => {
  const type = error?.type ?? "error"
  const status = retryableErrors[type]
  return new UpstreamError({
    kind: "status",
    status,
    message: `upstream sent an error event (${knownErrorTypes.has(type) ? type : "unknown type"})`,
    retryable: status !== undefined,
    detail: `${type}: ${error?.message ?? "unknown"}`
  })
}

/** Per-stream state machine: Anthropic content blocks -> OpenAI deltas, usage summed at the end. */
const translator = (meta: StreamMeta) => {
  const toolIndexByBlock = new Map<number, number>()
  let promptTokensSeen = 0
  let outputTokens = 0
  let stopReason: string | null | undefined = undefined

  const onEvent = (wire: EventWire): Step | UpstreamError => {
    switch (wire.type) {
      case "message_start": {
        if (wire.message?.id !== undefined) meta.id = wire.message.id
        if (wire.message?.model !== undefined) meta.model = wire.message.model
        if (wire.message?.usage !== undefined) {
          promptTokensSeen = promptTokens(wire.message.usage)
          outputTokens = wire.message.usage.output_tokens ?? 0
        }
        return emit(chunk(meta, { role: "assistant", content: "" }))
      }
      case "content_block_start": {
        const block = wire.content_block
        if (block?.type === "tool_use" && wire.index !== undefined) {
          const toolIndex = toolIndexByBlock.size
          toolIndexByBlock.set(wire.index, toolIndex)
          return emit(chunk(meta, {
            tool_calls: [{ index: toolIndex, id: block.id ?? "", type: "function", function: { name: block.name ?? "", arguments: "" } }]
          }))
        }
        return block?.type === "text" && block.text ? emit(chunk(meta, { content: block.text })) : emit()
      }
      case "content_block_delta": {
        const delta = wire.delta
        if (delta?.type === "text_delta" && delta.text) return emit(chunk(meta, { content: delta.text }))
        const toolIndex = wire.index === undefined ? undefined : toolIndexByBlock.get(wire.index)
        if (delta?.type === "input_json_delta" && delta.partial_json && toolIndex !== undefined) {
          return emit(chunk(meta, { tool_calls: [{ index: toolIndex, function: { arguments: delta.partial_json } }] }))
        }
        return emit() // thinking/signature deltas are not part of the chat shape
      }
      case "message_delta": {
        if (wire.delta?.stop_reason !== undefined) stopReason = wire.delta.stop_reason
        if (wire.usage?.output_tokens != null) outputTokens = wire.usage.output_tokens
        if (wire.usage?.input_tokens != null) promptTokensSeen = promptTokens(wire.usage)
        return emit()
      }
      case "message_stop":
        return finished(
          chunk(meta, {}, finishReason(stopReason)),
          usageChunk(meta, usageOf(promptTokensSeen, outputTokens))
        )
      case "error":
        return streamError(wire.error)
      default:
        return emit() // ping, content_block_stop, future events
    }
  }

  return (event: SseEvent): Either.Either<Step, UpstreamError> =>
    Either.flatMap(decodeEvent(event.data), (wire) => {
      const out = onEvent(wire)
      return out instanceof UpstreamError ? Either.left(out) : Either.right(out)
    })
}

export const makeAnthropicAdapter = (limits?: UpstreamLimits): UpstreamAdapter =>
  httpAdapter({ kind: "anthropic", post, decode: decodeMessage, toCompletion, translator }, limits)

export const AnthropicAdapter: UpstreamAdapter = makeAnthropicAdapter()

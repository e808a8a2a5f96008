// The `openai-responses` adapter: chat requests sent to an upstream Responses API
// (POST {baseUrl}/responses) as input items, and its output items or stream events translated
// back into a chat completion or chat chunks. (The 16-token floor is checked by the gateway.)
import { Effect, Either, Schema } from "effect"
import type { ChatChunk, ChatCompletion, ChatMessage, ChatRequest, ContentPart, ToolCall } from "../../../schemas/Chat.js"
import { joinUrl, jsonDecoder, mergeHeaders, protocolError } from "./Http.js"
import { assistantChoice, chunk, completionId, emit, finished, messageText, nowSeconds, type SseEvent, type Step, type StreamMeta, usageChunk, usageOf } from "./Sse.js"
import { httpAdapter } from "./HttpAdapter.js"
import type { UpstreamLimits } from "./Limits.js"
import { type UpstreamAdapter, type UpstreamCall, UpstreamError } from "./Upstream.js"

// ---- request ------------------------------------------------------------------------------

type InputPart =
  | { readonly type: "input_text"; readonly text: string }
  | { readonly type: "input_image"; readonly image_url: string; readonly detail: string }
  | { readonly type: "input_file"; readonly file_data?: string | undefined; readonly file_url?: string | undefined; readonly file_id?: string | undefined; readonly filename?: string | undefined }

type InputItem =
  | { readonly role: "user" | "assistant"; readonly content: string | ReadonlyArray<InputPart> }
  | { readonly type: "function_call"; readonly call_id: string; readonly name: string; readonly arguments: string }
  | { readonly type: "function_call_output"; readonly call_id: string; readonly output: string }

/** Chat's content parts as input parts: image_url -> input_image, file -> input_file; other kinds carry no input. */
const toInputParts = (parts: ReadonlyArray<ContentPart>): ReadonlyArray<InputPart> =>
  parts.flatMap((p): ReadonlyArray<InputPart> =>
    p.image_url !== undefined
      ? [{ type: "input_image", image_url: p.image_url.url, detail: p.image_url.detail ?? "auto" }]
      : p.file !== undefined
      ? [{ type: "input_file", ...p.file }]
      : p.text !== undefined && p.text !== ""
      ? [{ type: "input_text", text: p.text }]
      : []
  )

/** A user turn: a string when it is text only (the common case), else input parts. */
const userContent = (content: ChatMessage["content"]): string | ReadonlyArray<InputPart> =>
  Array.isArray(content) && content.some((p) => p.image_url !== undefined || p.file !== undefined)
    ? toInputParts(content)
    : messageText(content)

const toItems = (m: ChatMessage): ReadonlyArray<InputItem> => {
  const text = messageText(m.content)
  switch (m.role) {
    case "user":
      return [{ role: "user", content: userContent(m.content) }]
    case "assistant":
      return [
        ...(text === "" ? [] : [{ role: "assistant" as const, content: text }]),
        ...(m.tool_calls ?? []).map((t): InputItem => ({
          type: "function_call",
          call_id: t.id,
          name: t.function.name,
          arguments: t.function.arguments
        }))
      ]
    case "tool":
      return [{ type: "function_call_output", call_id: m.tool_call_id ?? "", output: text }]
    default:
      return [] // system/developer become `instructions`
  }
}

const instructionsOf = (request: ChatRequest): string | undefined => {
  const parts = request.messages
    .filter((m) => m.role === "system" || m.role === "developer")
    .map((m) => messageText(m.content))
    .filter((t) => t !== "")
  return parts.length === 0 ? undefined : parts.join("\n\n")
}

const toolChoiceOf = (choice: NonNullable<ChatRequest["tool_choice"]>) =>
  typeof choice === "string" ? choice : { type: "function", name: choice.function.name }

const formatOf = (format: NonNullable<ChatRequest["response_format"]>) =>
  format.type === "json_schema" ? { ...format.json_schema, type: "json_schema" } : { type: format.type }

export const toResponsesRequest = (call: UpstreamCall, stream: boolean) => {
  const r = call.request
  const instructions = instructionsOf(r)
  const maxOutput = r.max_completion_tokens ?? r.max_tokens
  return {
    model: call.providerModelId,
    input: r.messages.flatMap(toItems),
    ...(instructions !== undefined ? { instructions } : {}),
    ...(r.tools !== undefined && r.tools.length > 0
      ? {
        tools: r.tools.map((t) => ({
          type: "function",
          name: t.function.name,
          ...(t.function.description !== undefined ? { description: t.function.description } : {}),
          parameters: t.function.parameters ?? { type: "object", properties: {} },
          // Responses defaults `strict` to true (chat defaults to false): keep chat semantics.
          strict: t.function.strict ?? false
        }))
      }
      : {}),
    ...(r.tool_choice !== undefined ? { tool_choice: toolChoiceOf(r.tool_choice) } : {}),
    ...(r.parallel_tool_calls !== undefined ? { parallel_tool_calls: r.parallel_tool_calls } : {}),
    ...(r.temperature !== undefined ? { temperature: r.temperature } : {}),
    ...(r.top_p !== undefined ? { top_p: r.top_p } : {}),
    ...(maxOutput !== undefined ? { max_output_tokens: maxOutput } : {}),
    ...(r.response_format !== undefined && r.response_format.type !== "text"
      ? { text: { format: formatOf(r.response_format) } }
      : {}),
    // A chat completion is stateless: do not leave a stored response at the provider.
    store: false,
    ...(stream ? { stream: true } : {})
  }
}

const post = (call: UpstreamCall, stream: boolean) => ({
  url: joinUrl(call.baseUrl, "/responses"),
  headers: mergeHeaders(call.headers, { authorization: `Bearer ${call.apiKey}` }),
  body: toResponsesRequest(call, stream),
  timeoutMs: call.timeoutMs
})

// ---- response -----------------------------------------------------------------------------

const OutputItemWire = Schema.Struct({
  type: Schema.String,
  id: Schema.optional(Schema.String),
  call_id: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  arguments: Schema.optional(Schema.String),
  content: Schema.optional(Schema.Array(Schema.Struct({
    type: Schema.String,
    text: Schema.optional(Schema.String),
    refusal: Schema.optional(Schema.String)
  })))
})
type OutputItemWire = typeof OutputItemWire.Type

export const ResponseWire = Schema.Struct({
  id: Schema.optional(Schema.String),
  created_at: Schema.optional(Schema.Number),
  model: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  output: Schema.optional(Schema.Array(OutputItemWire)),
  // Any JSON number: Inference's usageInBounds decides whether it is believed.
  usage: Schema.optional(Schema.NullOr(Schema.Struct({ input_tokens: Schema.Number, output_tokens: Schema.Number }))),
  incomplete_details: Schema.optional(Schema.NullOr(Schema.Struct({ reason: Schema.optional(Schema.String) }))),
  error: Schema.optional(Schema.NullOr(Schema.Struct({ message: Schema.optional(Schema.String) })))
})
type ResponseWire = typeof ResponseWire.Type

export const EventWire = Schema.Struct({
  type: Schema.String,
  delta: Schema.optional(Schema.String),
  output_index: Schema.optional(Schema.Int),
  item_id: Schema.optional(Schema.String),
  item: Schema.optional(OutputItemWire),
  response: Schema.optional(ResponseWire),
  message: Schema.optional(Schema.String)
})
type EventWire = typeof EventWire.Type

const decodeResponse = jsonDecoder(ResponseWire, "responses object")
const decodeEvent = jsonDecoder(EventWire, "responses stream event")

/** The provider's own words about the failure are its detail (UpstreamError). */
const failedError = (message: string | undefined) =>
  new UpstreamError({ kind: "status", message: "upstream response failed", retryable: true, detail: message ?? "unknown" })

const finishReason = (response: ResponseWire | undefined, sawToolCall: boolean): string => {
  if (sawToolCall) return "tool_calls"
  const reason = response?.incomplete_details?.reason
  if (response?.status === "incomplete" && reason === "max_output_tokens") return "length"
  if (response?.status === "incomplete" && reason === "content_filter") return "content_filter"
  return "stop"
}

const textOf = (items: ReadonlyArray<OutputItemWire>): string =>
  items
    .filter((i) => i.type === "message")
    .flatMap((i) => i.content ?? [])
    .map((p) => (p.type === "output_text" ? p.text ?? "" : p.type === "refusal" ? p.refusal ?? "" : ""))
    .join("")

const toolCallsOf = (items: ReadonlyArray<OutputItemWire>): Array<ToolCall> =>
  items
    .filter((i) => i.type === "function_call")
    .map((i) => ({
      id: i.call_id ?? i.id ?? "",
      type: "function",
      function: { name: i.name ?? "", arguments: i.arguments ?? "" }
    }))

const toCompletion = Effect.fnUntraced(function*(wire: ResponseWire, call: UpstreamCall) {
  if (wire.status === "failed") return yield* failedError(wire.error?.message)
  if (wire.usage === undefined || wire.usage === null) return yield* protocolError("response without usage")
  const output = wire.output ?? []
  const toolCalls = toolCallsOf(output)
  const text = textOf(output)
  const completion: ChatCompletion = {
    id: wire.id ?? completionId(),
    object: "chat.completion",
    created: wire.created_at === undefined ? yield* nowSeconds : Math.floor(wire.created_at),
    model: wire.model ?? call.providerModelId,
    choices: [assistantChoice(text, toolCalls, finishReason(wire, toolCalls.length > 0))],
    usage: usageOf(wire.usage.input_tokens, wire.usage.output_tokens)
  }
  return completion
})

/** Per-stream state machine: Responses events -> chat deltas; the role chunk always comes first. */
const translator = (meta: StreamMeta) => {
  let started = false
  // Tool-call index (chat) by the Responses item id and by output_index (deltas carry both).
  const toolByItem = new Map<string, number>()
  const toolByOutput = new Map<number, number>()

  const withRole = (...chunks: ReadonlyArray<ChatChunk>): ReadonlyArray<ChatChunk> => {
    if (started) return chunks
    started = true
    return [chunk(meta, { role: "assistant", content: "" }), ...chunks]
  }
  const learn = (response: ResponseWire | undefined) => {
    if (response?.id !== undefined) meta.id = response.id
    if (response?.model !== undefined) meta.model = response.model
    if (response?.created_at !== undefined) meta.created = Math.floor(response.created_at)
  }
  const toolIndexOf = (wire: EventWire) =>
    (wire.item_id !== undefined ? toolByItem.get(wire.item_id) : undefined) ??
      (wire.output_index !== undefined ? toolByOutput.get(wire.output_index) : undefined)

  const addTool = (wire: EventWire, item: OutputItemWire): Step => {
    const index = toolByOutput.size
    if (item.id !== undefined) toolByItem.set(item.id, index)
    if (wire.output_index !== undefined) toolByOutput.set(wire.output_index, index)
    return emit(...withRole(chunk(meta, {
      tool_calls: [{
        index,
        id: item.call_id ?? item.id ?? "",
        type: "function",
        function: { name: item.name ?? "", arguments: item.arguments ?? "" }
      }]
    })))
  }

  const end = (response: ResponseWire | undefined): Step => {
    learn(response)
    const usage = response?.usage
    return finished(
      ...withRole(chunk(meta, {}, finishReason(response, toolByOutput.size > 0))),
      ...(usage ? [usageChunk(meta, usageOf(usage.input_tokens, usage.output_tokens))] : [])
    )
  }

  const onEvent = (wire: EventWire): Step | UpstreamError => {
    switch (wire.type) {
      case "response.created":
      case "response.in_progress":
        learn(wire.response)
        return emit(...withRole())
      case "response.output_item.added":
        return wire.item?.type === "function_call" ? addTool(wire, wire.item) : emit()
      case "response.function_call_arguments.delta": {
        const index = toolIndexOf(wire)
        return index !== undefined && wire.delta
          ? emit(...withRole(chunk(meta, { tool_calls: [{ index, function: { arguments: wire.delta } }] })))
          : emit()
      }
      case "response.output_text.delta":
      case "response.refusal.delta":
        return wire.delta ? emit(...withRole(chunk(meta, { content: wire.delta }))) : emit()
      case "response.completed":
      case "response.incomplete":
        return end(wire.response)
      case "response.failed":
        return failedError(wire.response?.error?.message)
      case "error":
        return failedError(wire.message)
      default:
        return emit() // content_part/*.done/reasoning events add nothing to the chat shape
    }
  }

  return (event: SseEvent): Either.Either<Step, UpstreamError> =>
    Either.flatMap(decodeEvent(event.data), (wire) => {
      const out = onEvent(wire)
      return out instanceof UpstreamError ? Either.left(out) : Either.right(out)
    })
}

export const makeOpenAiResponsesAdapter = (limits?: UpstreamLimits): UpstreamAdapter =>
  httpAdapter({ kind: "openai-responses", post, decode: decodeResponse, toCompletion, translator }, limits)

export const OpenAiResponsesAdapter: UpstreamAdapter = makeOpenAiResponsesAdapter()

// The `mock` adapter: deterministic and offline, for the demo and the benchmarks. It echoes
// the last user message and counts usage with a fixed rule, so results can be asserted exactly.
//
// Output formats: json_object answers `{"echo":"<text>"}`; json_schema answers the object its
// schema asks for, made as tool arguments are (below).
//
// Provider model ids starting with `mock-tools` (the demo's model `mock-tools`) also call tools:
//  - function tools offered and tool_choice not "none", and the last message is not a tool result:
//    ONE tool call (finish_reason `tool_calls`, content null, id `call_<32 hex>`) to the tool that
//    tool_choice names, else the first offered tool whose name appears in the last user message
//    (case-insensitive), else the first tool. Its arguments follow the tool's JSON-schema
//    parameters, over the `required` properties when the schema lists them, else all: an `enum`
//    gives its first value, a `const` its value, a string the last user message's text (cut to
//    `maxLength`), an integer or number its `minimum` (else 1), a boolean true, an array [], an
//    object {}, anything else null;
//  - the last message is a tool result (role `tool`): the text
//    `echo: <tool name, or the call id when no earlier assistant turn names it> returned <the
//    tool's text, cut to 200 characters>`;
//  - otherwise: as mock-echo.
// Usage follows mockUsage for every answer; a tool call's reply text is `<name> <arguments>`.
// Streams: the role chunk, then the call as two tool_calls deltas (index, id, type, name and
// empty arguments; then the arguments), the finish chunk and the usage chunk.
// Embeddings: deterministic vectors hashed from each text (MockEmbeddings.ts).
import { Duration, Effect, Option, Stream } from "effect"
import type { ChatChunk, ChatCompletion, ChatMessage, ChatRequest, FunctionTool, ToolCall, Usage } from "../../../schemas/Chat.js"
import { objectId } from "../../lib/Ids.js"
import { chunk, completionId, initialMeta, messageText, nowSeconds, type StreamMeta, usageChunk, usageOf } from "./Sse.js"
import { mockEmbed } from "./MockEmbeddings.js"
import type { UpstreamAdapter, UpstreamCall } from "./Upstream.js"

export interface MockOptions {
  /** Pause before the answer and between streamed chunks (benchmarks simulate latency with it). */
  readonly delay?: Duration.DurationInput | undefined
}

const lastUserText = (request: ChatRequest): string => {
  const user = [...request.messages].reverse().find((m) => m.role === "user")
  return user === undefined ? "" : messageText(user.content)
}

/**
 * `echo: <text>`; `{"echo":"<text>"}` in JSON mode so the answer stays valid JSON; with a JSON
 * schema, the object mockArguments makes for it (its properties filled from the text).
 */
export const mockReply = (request: ChatRequest): string => {
  const text = lastUserText(request)
  const format = request.response_format
  if (format?.type === "json_schema") return JSON.stringify(mockArguments(format.json_schema.schema, text))
  return format?.type === "json_object" ? JSON.stringify({ echo: text }) : `echo: ${text}`
}

const words = (text: string): ReadonlyArray<string> => text.split(/\s+/).filter((w) => w.length > 0)

/**
 * The usage rule: prompt tokens = ceil(total characters of all message texts / 4), at least 1;
 * completion tokens = number of whitespace-separated words of the reply (= streamed content chunks).
 */
export const mockUsage = (request: ChatRequest, reply: string): Usage => {
  const chars = request.messages.reduce((n, m) => n + messageText(m.content).length, 0)
  return usageOf(Math.max(1, Math.ceil(chars / 4)), words(reply).length)
}

// --- mock-tools ---------------------------------------------------------------------------------

/** The provider model ids that answer with tool calls. */
export const isMockToolsModel = (providerModelId: string): boolean => providerModelId.startsWith("mock-tools")

/** The first `max` characters (code points, so no surrogate pair is split). */
const cut = (text: string, max: number): string => {
  const chars = Array.from(text)
  return chars.length <= max ? text : chars.slice(0, max).join("")
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A value for one JSON-schema property (see the header). */
const valueFor = (schema: unknown, text: string): unknown => {
  if (!isRecord(schema)) return null
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  if ("const" in schema) return schema.const
  const types = Array.isArray(schema.type) ? schema.type : [schema.type]
  const type = types.find((t) => t !== "null") ?? (isRecord(schema.properties) ? "object" : undefined)
  switch (type) {
    case "string":
      return typeof schema.maxLength === "number" && schema.maxLength >= 0 ? cut(text, schema.maxLength) : text
    case "integer":
    case "number":
      return typeof schema.minimum === "number" && Number.isFinite(schema.minimum) ? schema.minimum : 1
    case "boolean":
      return true
    case "array":
      return []
    case "object":
      return {}
    default:
      return null
  }
}

/** The arguments object for a tool's parameters schema: the required properties, else all. */
export const mockArguments = (parameters: unknown, text: string): Record<string, unknown> => {
  const properties = isRecord(parameters) && isRecord(parameters.properties) ? parameters.properties : {}
  const required = isRecord(parameters) && Array.isArray(parameters.required)
    ? parameters.required.filter((name): name is string => typeof name === "string" && name in properties)
    : Object.keys(properties)
  const args: Record<string, unknown> = {}
  for (const name of required) args[name] = valueFor(properties[name], text)
  return args
}

/** The tool to call: the one tool_choice names, else the first named in the user's text, else the first. */
const chooseTool = (request: ChatRequest, tools: ReadonlyArray<FunctionTool>): FunctionTool => {
  const choice = request.tool_choice
  if (typeof choice === "object") {
    const named = tools.find((t) => t.function.name === choice.function.name)
    if (named !== undefined) return named
  }
  const text = lastUserText(request).toLowerCase()
  return tools.find((t) => text.includes(t.function.name.toLowerCase())) ?? tools[0]!
}

/** What mock-tools answers: one tool call, or a text reply. */
type ToolsAnswer =
  | { readonly _tag: "Call"; readonly call: ToolCall; readonly reply: string }
  | { readonly _tag: "Text"; readonly reply: string }

const TOOL_OUTPUT_CHARS = 200

/** `echo: <tool> returned <output>` for a trailing tool result. */
const toolResultReply = (messages: ReadonlyArray<ChatMessage>, result: ChatMessage): string => {
  const id = result.tool_call_id ?? ""
  const name = messages.flatMap((m) => m.tool_calls ?? []).find((c) => c.id === id)?.function.name
  return `echo: ${name ?? (id === "" ? "tool" : id)} returned ${cut(messageText(result.content), TOOL_OUTPUT_CHARS)}`
}

export const mockToolsAnswer = (request: ChatRequest): ToolsAnswer => {
  const last = request.messages[request.messages.length - 1]!
  if (last.role === "tool") return { _tag: "Text", reply: toolResultReply(request.messages, last) }
  const tools = request.tools ?? []
  if (tools.length === 0 || request.tool_choice === "none") return { _tag: "Text", reply: mockReply(request) }
  const tool = chooseTool(request, tools)
  const args = JSON.stringify(mockArguments(tool.function.parameters, lastUserText(request)))
  const call: ToolCall = { id: objectId("call_"), type: "function", function: { name: tool.function.name, arguments: args } }
  return { _tag: "Call", call, reply: `${call.function.name} ${args}` }
}

// --- the adapter --------------------------------------------------------------------------------

const pause = (options: MockOptions) => options.delay === undefined ? Effect.void : Effect.sleep(options.delay)

/** The chunks of a text reply: each word chunk carries the whitespace before it, so deltas concatenate to the reply. */
const textChunks = (meta: StreamMeta, request: ChatRequest, reply: string): Array<ChatChunk> => [
  chunk(meta, { role: "assistant", content: "" }),
  ...(reply.match(/\s*\S+(\s+$)?/g) ?? []).map((p) => chunk(meta, { content: p })),
  chunk(meta, {}, "stop"),
  usageChunk(meta, mockUsage(request, reply))
]

const callChunks = (meta: StreamMeta, request: ChatRequest, call: ToolCall, reply: string): Array<ChatChunk> => [
  chunk(meta, { role: "assistant", content: null }),
  chunk(meta, { tool_calls: [{ index: 0, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }] }),
  chunk(meta, { tool_calls: [{ index: 0, function: { arguments: call.function.arguments } }] }),
  chunk(meta, {}, "tool_calls"),
  usageChunk(meta, mockUsage(request, reply))
]

export const makeMockAdapter = (options: MockOptions = {}): UpstreamAdapter => ({
  complete: Effect.fnUntraced(function*(call: UpstreamCall) {
    yield* pause(options)
    const answer = isMockToolsModel(call.providerModelId)
      ? mockToolsAnswer(call.request)
      : { _tag: "Text" as const, reply: mockReply(call.request) }
    const completion: ChatCompletion = {
      id: completionId(),
      object: "chat.completion",
      created: yield* nowSeconds,
      model: call.providerModelId,
      choices: [
        answer._tag === "Call"
          ? { index: 0, message: { role: "assistant", content: null, tool_calls: [answer.call] }, finish_reason: "tool_calls" }
          : { index: 0, message: { role: "assistant", content: answer.reply }, finish_reason: "stop" }
      ],
      usage: mockUsage(call.request, answer.reply)
    }
    return completion
  }),
  stream: Effect.fnUntraced(function*(call: UpstreamCall) {
    const meta = yield* initialMeta(call.providerModelId)
    const answer = isMockToolsModel(call.providerModelId) ? mockToolsAnswer(call.request) : undefined
    const chunks = answer?._tag === "Call"
      ? callChunks(meta, call.request, answer.call, answer.reply)
      : textChunks(meta, call.request, answer?.reply ?? mockReply(call.request))
    const step = call.step
    const body = step === undefined ? Stream.fromIterable(chunks) : Stream.fromIterable(chunks).pipe(Stream.filterMap((c) => Option.fromNullable(step(c))))
    const paced = options.delay === undefined ? body : body.pipe(Stream.tap(() => pause(options)))
    const onEnd = call.onEnd
    return onEnd === undefined ? paced : paced.pipe(Stream.ensuringWith(onEnd))
  }),
  embed: (call) => Effect.zipRight(pause(options), mockEmbed(call))
})

export const MockAdapter: UpstreamAdapter = makeMockAdapter()

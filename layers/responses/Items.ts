// The translation between the Responses API and chat completions: input and output items to chat
// messages, a request body to a chat request, a completion to output items and a response object.
import type { ChatMessage, ChatRequest, ContentPart as ChatPart, FunctionTool, ResponseFormat, ToolCall, Usage } from "../../schemas/Chat.js"
import type { ContentPart, InputItem, OutputItem, ResponseObject, ResponsesRequest, TextFormat } from "../../schemas/Responses.js"
import { objectId } from "../lib/Ids.js"

export const itemId = (prefix: string) => objectId(`${prefix}_`)

const partsText = (content: string | ReadonlyArray<{ readonly text: string }>) =>
  typeof content === "string" ? content : content.map((p) => p.text).join("")

/** A Responses content part as chat's: input_image -> image_url, input_file -> file. */
const toChatPart = (part: ContentPart): ChatPart => {
  switch (part.type) {
    case "input_image":
      return { type: "image_url", image_url: { url: part.image_url, ...(part.detail != null ? { detail: part.detail } : {}) } }
    case "input_file":
      return {
        type: "file",
        file: {
          ...(part.file_data != null ? { file_data: part.file_data } : {}),
          ...(part.file_url != null ? { file_url: part.file_url } : {}),
          ...(part.file_id != null ? { file_id: part.file_id } : {}),
          ...(part.filename != null ? { filename: part.filename } : {})
        }
      }
    default:
      return { type: "text", text: part.text }
  }
}

/** Text-only content stays a string (what every upstream kind takes); images and files become parts. */
const toChatContent = (content: string | ReadonlyArray<ContentPart>): ChatMessage["content"] =>
  typeof content === "string" || content.every((p) => "text" in p)
    ? partsText(content as string | ReadonlyArray<{ readonly text: string }>)
    : content.map(toChatPart)

/** `text.format` as chat's response_format: json_schema's flat fields go under `json_schema`. */
export const toResponseFormat = (format: TextFormat): ResponseFormat =>
  format.type === "json_schema"
    ? {
      type: "json_schema",
      json_schema: {
        name: format.name,
        schema: format.schema,
        ...(format.strict != null ? { strict: format.strict } : {}),
        ...(format.description != null ? { description: format.description } : {})
      }
    }
    : { type: format.type }

/** Chat's response_format in the Responses API's flat `text.format` shape (echoed on the response). */
export const toTextFormat = (format: ResponseFormat | undefined): TextFormat => {
  if (format === undefined) return { type: "text" }
  if (format.type !== "json_schema") return { type: format.type }
  const { name, schema, strict, description } = format.json_schema
  return {
    type: "json_schema",
    name: typeof name === "string" ? name : "response",
    schema: typeof schema === "object" && schema !== null ? schema as Record<string, unknown> : {},
    ...(typeof strict === "boolean" ? { strict } : {}),
    ...(typeof description === "string" ? { description } : {})
  }
}

/** The output format a body asks for, as the response echoes it. */
export const textFormatOf = (body: ResponsesRequest): TextFormat =>
  body.response_format !== undefined ? toTextFormat(body.response_format) : body.text?.format ?? { type: "text" }

/** The output format a body asks for, as chat's response_format (the spec's field first). */
export const responseFormatOf = (body: ResponsesRequest): ResponseFormat | undefined =>
  body.response_format ?? (body.text?.format === undefined ? undefined : toResponseFormat(body.text.format))

/** Input and output items, oldest first, as chat messages (function calls merge into one turn). */
export const toMessages = (items: ReadonlyArray<InputItem | OutputItem>): Array<ChatMessage> => {
  const messages: Array<ChatMessage> = []
  const pushCall = (call: ToolCall) => {
    const last = messages.at(-1)
    if (last !== undefined && last.role === "assistant") {
      messages[messages.length - 1] = { ...last, tool_calls: [...(last.tool_calls ?? []), call] }
    } else {
      messages.push({ role: "assistant", content: null, tool_calls: [call] })
    }
  }
  for (const item of items) {
    if (item.type === "function_call_output") {
      messages.push({ role: "tool", tool_call_id: item.call_id, content: item.output })
    } else if (item.type === "function_call") {
      pushCall({ id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } })
    } else if (item.type === "mcp_call") {
      pushCall({ id: item.id, type: "function", function: { name: item.name, arguments: item.arguments } })
      messages.push({ role: "tool", tool_call_id: item.id, content: item.output ?? item.error ?? "" })
    } else if ("id" in item && item.type === "message") {
      messages.push({ role: "assistant", content: partsText(item.content) })
    } else if ("role" in item) {
      messages.push({ role: item.role, content: toChatContent(item.content) })
    }
  }
  return messages
}

/** A completion's message as output items: text first, then one item per function call. */
export const toOutput = (content: string | null, toolCalls: ReadonlyArray<ToolCall>, status: "completed" | "incomplete"): Array<OutputItem> => [
  ...(content !== null && content !== ""
    ? [{ id: itemId("msg"), type: "message" as const, role: "assistant" as const, status, content: [{ type: "output_text" as const, text: content, annotations: [] }] }]
    : []),
  ...toolCalls.map((c) => ({
    id: itemId("fc"),
    type: "function_call" as const,
    call_id: c.id,
    name: c.function.name,
    arguments: c.function.arguments,
    status
  }))
]

export const toUsage = (usage: Usage | null) =>
  usage === null ? null : { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens, total_tokens: usage.total_tokens }

/**
 * The request's tools as answers show them and responses are stored: a hosted tool's
 * `authorization` (an end-user key) is write-only, neither echoed nor kept at rest.
 */
export const withoutCredentials = (tools: ResponsesRequest["tools"]) =>
  (tools ?? []).map((tool) => {
    if (tool.type !== "mcp" || tool.authorization === undefined) return tool
    const { authorization: _authorization, ...rest } = tool
    return rest
  })

/** The names of the request's function tools (the client runs them). */
export const functionToolNames = (body: ResponsesRequest): ReadonlySet<string> =>
  new Set((body.tools ?? []).flatMap((t) => t.type === "function" ? [t.name] : []))

/** The chat request a Responses body asks for: its function tools and the hosted ones offered with them. */
export const toChatRequest = (
  body: ResponsesRequest,
  messages: ReadonlyArray<ChatMessage>,
  hostedChatTools: ReadonlyArray<FunctionTool>
): ChatRequest => {
  const toolChoice = body.tool_choice === undefined
    ? undefined
    : typeof body.tool_choice === "string" ? body.tool_choice
    : "name" in body.tool_choice ? { type: "function" as const, function: { name: body.tool_choice.name } }
    : body.tool_choice
  const responseFormat = responseFormatOf(body)
  // The request's function tools, then the hosted ones (an agent model's too, sent or not).
  const tools: Array<FunctionTool> = [
    ...(body.tools ?? []).flatMap((t) =>
      t.type === "function"
        ? [{
          type: "function" as const,
          function: {
            name: t.name,
            ...(t.description != null ? { description: t.description } : {}),
            ...(t.parameters != null ? { parameters: t.parameters } : {})
          }
        }]
        : []
    ),
    ...hostedChatTools
  ]
  const chat: ChatRequest = {
    model: body.model,
    messages: messages as [ChatMessage, ...Array<ChatMessage>],
    stream: body.stream === true,
    // Usage is needed to store the response, whatever the client asked.
    ...(body.stream === true ? { stream_options: { include_usage: true } } : {}),
    ...(body.temperature !== undefined ? { temperature: body.temperature } : {}),
    ...(body.top_p !== undefined ? { top_p: body.top_p } : {}),
    ...(body.max_output_tokens !== undefined ? { max_tokens: body.max_output_tokens } : {}),
    ...(responseFormat !== undefined ? { response_format: responseFormat } : {}),
    ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
    ...(tools.length > 0 ? { tools } : {})
  }
  return chat
}

/** The response object as answered and as sent in the stream events. */
export const responseObject = (
  id: string,
  body: ResponsesRequest,
  createdAt: Date,
  status: ResponseObject["status"],
  output: ReadonlyArray<OutputItem>,
  usage: Usage | null,
  threadId: string | null,
  /** Why an incomplete response stopped (Hosted.IncompleteReason). */
  incompleteReason: string | null = null
): ResponseObject => ({
  id,
  object: "response",
  created_at: Math.floor(createdAt.getTime() / 1000),
  status,
  model: body.model,
  output,
  usage: toUsage(usage),
  previous_response_id: body.previous_response_id ?? null,
  thread_id: threadId,
  instructions: body.instructions ?? null,
  error: null,
  incomplete_details: status === "incomplete" && incompleteReason !== null ? { reason: incompleteReason } : null,
  tools: withoutCredentials(body.tools),
  parallel_tool_calls: true,
  tool_choice: body.tool_choice ?? "auto",
  temperature: body.temperature ?? null,
  top_p: body.top_p ?? null,
  max_output_tokens: body.max_output_tokens ?? null,
  text: { format: textFormatOf(body) },
  metadata: {}
})

/**
 * A refused content part's place in the body (`input.N.content.M.file_url`), from the place in
 * the chat request it became (`messages.I.content.J.file.file_url`, upstream/Support.ts): the
 * first input part of that kind; `input` when the part came from the stored chain.
 */
export const inputParamOf = (input: ResponsesRequest["input"], chatParam: string): string => {
  const field = /^messages\.\d+\.content\.\d+\.(.+)$/.exec(chatParam)?.[1]
  if (typeof input === "string" || field === undefined) return "input"
  const [kind, sub] = field.split(".") as [string, string | undefined]
  const partType = kind === "file" ? "input_file" : kind === "image_url" ? "input_image" : undefined
  for (const [i, item] of input.entries()) {
    if (!("role" in item) || typeof item.content === "string") continue
    for (const [j, part] of item.content.entries()) {
      if (part.type !== partType) continue
      if (sub !== undefined && kind === "file" && (part as Record<string, unknown>)[sub] == null) continue
      return `input.${i}.content.${j}${sub !== undefined ? `.${sub}` : ""}`
    }
  }
  return "input"
}

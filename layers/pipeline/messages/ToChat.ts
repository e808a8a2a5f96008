// A Messages API request as the gateway's chat request: what admission counts and checks, and
// what `openai`, `openai-responses` and `mock` upstreams get (docs/decisions.md, "Messages API").
// What chat cannot carry (server tools, images inside tool results, unknown block types) is named
// in `nativeOnly`: only an `anthropic` upstream can serve such a request.
import type { ChatMessage, ChatRequest, ContentPart, FunctionTool, ToolCall } from "../../../schemas/Chat.js"
import type { ContentBlock, CountTokensRequest, InputMessage, MessagesRequest } from "../../../schemas/Messages.js"

export interface ChatTranslation {
  readonly request: ChatRequest
  /** The first part of the request chat cannot carry (a param path and what it is); undefined: none. */
  readonly nativeOnly: string | undefined
}

type Source = NonNullable<ContentBlock["source"]>

/** An image source as a chat image URL: inline bytes as a data URL, a URL as it is. */
const imageUrl = (source: Source): string | undefined =>
  source.type === "base64" && source.data !== undefined
    ? `data:${source.media_type ?? "image/png"};base64,${source.data}`
    : source.type === "url"
    ? source.url
    : undefined

/** A document source as a chat file part (PDF bytes or URL; plain text as text). */
const documentPart = (block: ContentBlock): ContentPart | undefined => {
  const source = block.source
  const filename = block.title ?? undefined
  if (source?.type === "base64" && source.data !== undefined) {
    return { type: "file", file: { file_data: `data:${source.media_type ?? "application/pdf"};base64,${source.data}`, ...(filename !== undefined ? { filename } : {}) } }
  }
  if (source?.type === "url" && source.url !== undefined) return { type: "file", file: { file_url: source.url } }
  if (source?.type === "text" && source.data !== undefined) return { type: "text", text: source.data }
  return undefined
}

/** A tool_result's content as text: its text blocks joined; other blocks cannot go into a chat tool message. */
const toolResultText = (block: ContentBlock, at: string, note: (what: string) => void): string => {
  const content = block.content
  if (content === undefined) return ""
  if (typeof content === "string") return content
  const texts: Array<string> = []
  for (const [k, nested] of content.entries()) {
    if (nested.type === "text") texts.push(nested.text ?? "")
    else note(`${at}.content.${k}: ${nested.type} blocks inside a tool result`)
  }
  return texts.join("\n")
}

const toolArguments = (input: unknown): string => JSON.stringify(input ?? {})

/** One Anthropic message as chat messages: tool results become tool messages, ahead of the user's other content. */
const toChatMessages = (message: InputMessage, i: number, note: (what: string) => void): Array<ChatMessage> => {
  const content = message.content
  if (typeof content === "string") return [{ role: message.role, content }]
  if (message.role === "assistant") {
    let text = ""
    const calls: Array<ToolCall> = []
    for (const [j, block] of content.entries()) {
      if (block.type === "text") text += block.text ?? ""
      else if (block.type === "tool_use") {
        calls.push({ id: block.id ?? "", type: "function", function: { name: block.name ?? "", arguments: toolArguments(block.input) } })
      } else if (block.type !== "thinking" && block.type !== "redacted_thinking") {
        // The model's reasoning stays with the provider that made it; any other block is native only.
        note(`messages.${i}.content.${j}: ${block.type} blocks`)
      }
    }
    return [{ role: "assistant", content: text === "" && calls.length > 0 ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) }]
  }
  const tools: Array<ChatMessage> = []
  const parts: Array<ContentPart> = []
  for (const [j, block] of content.entries()) {
    const at = `messages.${i}.content.${j}`
    switch (block.type) {
      case "text":
        parts.push({ type: "text", text: block.text ?? "" })
        break
      case "image": {
        const url = block.source === undefined ? undefined : imageUrl(block.source)
        if (url === undefined) note(`${at}: images by ${block.source?.type ?? "unknown"} source`)
        else parts.push({ type: "image_url", image_url: { url } })
        break
      }
      case "document": {
        const part = documentPart(block)
        if (part === undefined) note(`${at}: documents by ${block.source?.type ?? "unknown"} source`)
        else parts.push(part)
        break
      }
      case "tool_result": {
        const text = toolResultText(block, at, note)
        tools.push({ role: "tool", tool_call_id: block.tool_use_id ?? "", content: block.is_error === true ? `Error: ${text}` : text })
        break
      }
      default:
        note(`${at}: ${block.type} blocks`)
    }
  }
  if (parts.length === 0) return tools
  const user: ChatMessage = parts.every((p) => p.type === "text")
    ? { role: "user", content: parts.map((p) => p.text ?? "").join("\n") }
    : { role: "user", content: parts }
  return [...tools, user]
}

const systemText = (system: CountTokensRequest["system"]): string =>
  system === undefined ? "" : typeof system === "string" ? system : system.map((b) => b.text).join("\n")

const toolsOf = (tools: CountTokensRequest["tools"], note: (what: string) => void): Array<FunctionTool> | undefined => {
  if (tools === undefined || tools.length === 0) return undefined
  const out: Array<FunctionTool> = []
  for (const [i, tool] of tools.entries()) {
    if (tool.type !== undefined && tool.type !== "custom") {
      note(`tools.${i}: the server tool ${tool.type}`)
      continue
    }
    out.push({
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description !== undefined ? { description: tool.description } : {}),
        parameters: tool.input_schema ?? { type: "object", properties: {} }
      }
    })
  }
  return out.length === 0 ? undefined : out
}

const toolChoiceOf = (choice: CountTokensRequest["tool_choice"]): Pick<ChatRequest, "tool_choice" | "parallel_tool_calls"> => {
  if (choice === undefined) return {}
  const parallel = choice.disable_parallel_tool_use === true ? { parallel_tool_calls: false } : {}
  switch (choice.type) {
    case "auto":
      return { tool_choice: "auto", ...parallel }
    case "any":
      return { tool_choice: "required", ...parallel }
    case "none":
      return { tool_choice: "none" }
    case "tool":
      return { tool_choice: { type: "function", function: { name: choice.name ?? "" } }, ...parallel }
  }
}

/** The messages and tools of a request as chat (count_tokens reads these too). */
export const chatConversation = (request: CountTokensRequest) => {
  let nativeOnly: string | undefined
  const note = (what: string) => {
    nativeOnly ??= what
  }
  const system = systemText(request.system)
  const messages: Array<ChatMessage> = system === "" ? [] : [{ role: "system", content: system }]
  for (const [i, message] of request.messages.entries()) messages.push(...toChatMessages(message, i, note))
  const tools = toolsOf(request.tools, note)
  return { messages, tools, nativeOnly: nativeOnly as string | undefined }
}

/** The chat request a Messages request stands for; streams ask for usage (the final message_delta carries it). */
export const toChatRequest = (request: MessagesRequest): ChatTranslation => {
  const { messages, tools, nativeOnly } = chatConversation(request)
  const chat: ChatRequest = {
    model: request.model,
    // An empty conversation cannot pass the Messages schema (at least one message); a conversation of
    // native-only blocks still needs one chat message to be admitted.
    messages: messages.length === 0 ? [{ role: "user", content: "" }] : messages as unknown as ChatRequest["messages"],
    max_tokens: request.max_tokens,
    ...(request.stream === true ? { stream: true, stream_options: { include_usage: true } } : {}),
    ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    ...(request.top_p !== undefined ? { top_p: request.top_p } : {}),
    ...(request.stop_sequences !== undefined && request.stop_sequences.length > 0 ? { stop: request.stop_sequences } : {}),
    ...(typeof request.metadata?.user_id === "string" ? { user: request.metadata.user_id } : {}),
    ...(tools !== undefined ? { tools } : {}),
    ...(tools !== undefined ? toolChoiceOf(request.tool_choice) : {})
  }
  return { request: chat, nativeOnly }
}

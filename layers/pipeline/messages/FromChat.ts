// Chat answers as Messages API answers, for upstreams the gateway translates (`openai`,
// `openai-responses`, `mock`): a completion as a message, and a stream of chat chunks as
// Anthropic's event sequence (message_start, content blocks with text_delta and input_json_delta,
// message_delta with the stop reason and usage, message_stop). Mapping tables: docs/decisions.md.
import type { ChatChunk, ChatCompletion, Usage } from "../../../schemas/Chat.js"
import type { Message, MessageUsage, OutputBlock, StreamEvent } from "../../../schemas/Messages.js"

/** A chat finish reason as Anthropic's stop reason. */
export const stopReasonOf = (finishReason: string | null | undefined): string => {
  switch (finishReason) {
    case "length":
      return "max_tokens"
    case "tool_calls":
    case "function_call":
      return "tool_use"
    case "content_filter":
      return "refusal"
    default:
      return "end_turn"
  }
}

/** Tool arguments as the tool_use block's input: an object (arguments that are no JSON object give {}). */
const inputOf = (args: string): unknown => {
  try {
    const value: unknown = JSON.parse(args)
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : {}
  } catch {
    return {}
  }
}

export const usageOf = (usage: Usage): MessageUsage => ({
  input_tokens: usage.prompt_tokens,
  output_tokens: usage.completion_tokens,
  cache_creation_input_tokens: null,
  cache_read_input_tokens: null
})

/** A completion as a message (the first choice: chat calls of the gateway ask for one). */
export const messageOf = (completion: ChatCompletion, id: string, model: string): Message => {
  const choice = completion.choices[0]
  const content: Array<OutputBlock> = []
  const text = choice?.message.content ?? ""
  if (text !== "") content.push({ type: "text", text })
  for (const call of choice?.message.tool_calls ?? []) {
    content.push({ type: "tool_use", id: call.id, name: call.function.name, input: inputOf(call.function.arguments) })
  }
  return {
    id,
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: stopReasonOf(choice?.finish_reason),
    stop_sequence: null,
    usage: usageOf(completion.usage)
  }
}

/**
 * A stream's translator: `push` turns each chat chunk into the events it makes, `finish` gives
 * the closing events once the chunks have ended. Tool calls arrive one after another in chat
 * streams: a tool call's first delta (with its id and name) opens a tool_use block, closing the
 * block before it.
 */
export const chatStreamTranslator = (id: string, model: string, promptEstimate: number) => {
  let started = false
  /** The open block's index and kind; -1: none open. */
  let open = -1
  let openKind: "text" | "tool" | undefined
  let blocks = 0
  /** Block index of each chat tool call index. */
  const toolBlocks = new Map<number, number>()
  let finishReason: string | null = null
  let usage: Usage | undefined

  const start = (out: Array<StreamEvent>) => {
    if (started) return
    started = true
    out.push({
      type: "message_start",
      message: {
        id,
        type: "message",
        role: "assistant",
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // Chat streams tell the prompt's size at their end: this is the gateway's estimate; message_delta has the count.
        usage: { input_tokens: promptEstimate, output_tokens: 0 }
      }
    })
    out.push({ type: "ping" })
  }
  const close = (out: Array<StreamEvent>) => {
    if (open === -1) return
    out.push({ type: "content_block_stop", index: open })
    open = -1
    openKind = undefined
  }
  const openBlock = (out: Array<StreamEvent>, block: Record<string, unknown>, kind: "text" | "tool") => {
    close(out)
    open = blocks++
    openKind = kind
    out.push({ type: "content_block_start", index: open, content_block: block })
    return open
  }

  const push = (chunk: ChatChunk): Array<StreamEvent> => {
    const out: Array<StreamEvent> = []
    start(out)
    if (chunk.usage != null) usage = chunk.usage
    for (const choice of chunk.choices) {
      const text = choice.delta.content
      if (text !== undefined && text !== null && text !== "") {
        if (openKind !== "text") openBlock(out, { type: "text", text: "" }, "text")
        out.push({ type: "content_block_delta", index: open, delta: { type: "text_delta", text } })
      }
      for (const call of choice.delta.tool_calls ?? []) {
        let index = toolBlocks.get(call.index)
        if (index === undefined) {
          index = openBlock(out, { type: "tool_use", id: call.id ?? "", name: call.function?.name ?? "", input: {} }, "tool")
          toolBlocks.set(call.index, index)
        }
        const args = call.function?.arguments
        if (args !== undefined && args !== "") {
          out.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: args } })
        }
      }
      if (choice.finish_reason !== null) finishReason = choice.finish_reason
    }
    return out
  }

  /**
   * The closing events: the open block's stop, message_delta (stop reason, usage) and
   * message_stop. `billed`: the usage the call is billed on, when the upstream reported none.
   */
  const finish = (billed: () => Usage): Array<StreamEvent> => {
    const out: Array<StreamEvent> = []
    start(out)
    close(out)
    out.push({
      type: "message_delta",
      delta: { stop_reason: stopReasonOf(finishReason), stop_sequence: null },
      usage: usageOf(usage ?? billed())
    })
    out.push({ type: "message_stop" })
    return out
  }

  return { push, finish }
}

// A fake Anthropic Messages upstream (POST {url}/messages): real Anthropic JSON and SSE events
// (message_start, content blocks, message_delta, message_stop), with the shared fake behaviours.
import { type FakeProtocol, type FakeUpstream, type FakeUsage, type Plan, sse, startFake } from "./FakeOpenAi.js"

const blockText = (content: any): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.map((b: any) => (typeof b?.text === "string" ? b.text : "")).join("")
    : ""

/** A tool call is preceded by a short text block, as Claude usually does: block indexes 0 and 1. */
export const PREAMBLE = "Let me check."

/** Anthropic's usage: input tokens apart from the prompt cache's, when the fake is told to report a cache. */
const usageOf = (usage: FakeUsage, output: number) => ({
  input_tokens: usage.prompt,
  output_tokens: output,
  ...(usage.cacheRead !== undefined ? { cache_read_input_tokens: usage.cacheRead } : {}),
  ...(usage.cacheWrite !== undefined ? { cache_creation_input_tokens: usage.cacheWrite } : {})
})

const errorType = (status: number) =>
  status === 529
    ? "overloaded_error"
    : status === 429
    ? "rate_limit_error"
    : status >= 500
    ? "api_error"
    : status === 401
    ? "authentication_error"
    : status === 404
    ? "not_found_error"
    : "invalid_request_error"

const contentBlocks = (plan: Plan) =>
  plan.kind === "text"
    ? [{ type: "text", text: plan.text }]
    : [{ type: "text", text: PREAMBLE }, { type: "tool_use", id: plan.callId, name: plan.name, input: JSON.parse(plan.arguments) }]

const stopReason = (plan: Plan) => (plan.kind === "text" ? "end_turn" : "tool_use")

const anthropicProtocol: FakeProtocol = {
  path: "/v1/messages",
  conversation: (body) => {
    const messages: Array<any> = body?.messages ?? []
    const last = messages[messages.length - 1]
    const toolResult = last?.role === "user" && Array.isArray(last.content)
      ? last.content.find((b: any) => b?.type === "tool_result")
      : undefined
    const system = typeof body?.system === "string" ? body.system : blockText(body?.system)
    return {
      messageCount: messages.length + (system === "" ? 0 : 1),
      toolResult: toolResult === undefined ? undefined : blockText(toolResult.content),
      lastIsUser: last?.role === "user",
      firstToolName: body?.tools?.[0]?.name,
      // No JSON mode on the Messages API: the adapter asks for JSON in the system prompt.
      json: system.includes("JSON"),
      stream: body?.stream === true,
      model: String(body?.model)
    }
  },
  json: (plan, usage, c, n) => ({
    id: `msg_fake_${n}`,
    type: "message",
    role: "assistant",
    model: c.model,
    content: contentBlocks(plan),
    stop_reason: stopReason(plan),
    stop_sequence: null,
    usage: usageOf(usage, usage.completion)
  }),
  frames: (plan, usage, c, n) => {
    const ev = (type: string, data: object) => sse({ type, ...data }, type)
    const head = [
      ev("message_start", {
        message: {
          id: `msg_fake_${n}`,
          type: "message",
          role: "assistant",
          model: c.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: usageOf(usage, 1)
        }
      })
    ]
    let index = 0
    if (plan.kind === "tool") {
      head.push(
        ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
        ev("content_block_delta", { index: 0, delta: { type: "text_delta", text: PREAMBLE } }),
        ev("content_block_stop", { index: 0 }),
        ev("content_block_start", { index: 1, content_block: { type: "tool_use", id: plan.callId, name: plan.name, input: {} } })
      )
      index = 1
    } else {
      head.push(ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } }))
    }
    head.push(ev("ping", {}))
    const content = plan.pieces.map((p) =>
      ev("content_block_delta", {
        index,
        delta: plan.kind === "text" ? { type: "text_delta", text: p } : { type: "input_json_delta", partial_json: p }
      })
    )
    const tail = [
      ev("content_block_stop", { index }),
      ev("message_delta", { delta: { stop_reason: stopReason(plan), stop_sequence: null }, usage: { output_tokens: usage.completion } }),
      ev("message_stop", {})
    ]
    return { head, content, tail }
  },
  errorBody: (status, message) => ({ type: "error", error: { type: errorType(status), message } }),
  streamError: (message) => sse({ type: "error", error: { type: "overloaded_error", message } }, "error")
}

/** Starts a fake Anthropic upstream: POST {url}/messages, JSON or SSE. */
export const startFakeAnthropic = (): Promise<FakeUpstream> => startFake(anthropicProtocol)

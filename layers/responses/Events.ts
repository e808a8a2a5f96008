// The streaming event sequence of a response: each event numbered in order; a chat stream's chunks
// turned into item events as they come, or a finished hybrid loop's output replayed as events.
import type { ChatChunk, Usage } from "../../schemas/Chat.js"
import type { OutputItem, ResponseObject } from "../../schemas/Responses.js"
import type { ToolListing } from "../tools/ToolHost.js"
import { itemId } from "./Items.js"

/** An SSE message: `event:` + `data:` whose `type` is the event name. */
export interface ResponseEvent {
  readonly type: string
  readonly [key: string]: unknown
}

export type EventOf = (type: string, fields: Record<string, unknown>) => ResponseEvent

/** The event constructor of one stream: sequence numbers count from 0 in the order events are made. */
export const eventSequence = (): EventOf => {
  let sequence = 0
  return (type, fields) => ({ type, sequence_number: sequence++, ...fields })
}

/**
 * Text opens a message item (output_item.added, content_part.added, output_text.delta...), tool
 * calls open function_call items; `close` closes the open ones. `state.output` is the output so far.
 */
export const chunkEvents = (event: EventOf) => {
  const state = {
    output: [] as Array<OutputItem>,
    message: null as null | { id: string; index: number; text: string },
    calls: new Map<number, { id: string; index: number; callId: string; name: string; args: string }>(),
    usage: null as Usage | null
  }
  const closeMessage = (): Array<ResponseEvent> => {
    const m = state.message
    if (m === null) return []
    state.message = null
    const part = { type: "output_text", text: m.text, annotations: [] }
    const item: OutputItem = { id: m.id, type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: m.text, annotations: [] }] }
    state.output[m.index] = item
    return [
      event("response.output_text.done", { item_id: m.id, output_index: m.index, content_index: 0, text: m.text, logprobs: [] }),
      event("response.content_part.done", { item_id: m.id, output_index: m.index, content_index: 0, part }),
      event("response.output_item.done", { output_index: m.index, item })
    ]
  }
  const closeCalls = (): Array<ResponseEvent> =>
    [...state.calls.values()].flatMap((c) => {
      const item: OutputItem = { id: c.id, type: "function_call", call_id: c.callId, name: c.name, arguments: c.args, status: "completed" }
      state.output[c.index] = item
      return [
        event("response.function_call_arguments.done", { item_id: c.id, output_index: c.index, arguments: c.args }),
        event("response.output_item.done", { output_index: c.index, item })
      ]
    })
  const onChunk = (chunk: ChatChunk): Array<ResponseEvent> => {
    if (chunk.usage) state.usage = chunk.usage
    const events: Array<ResponseEvent> = []
    for (const choice of chunk.choices) {
      const text = choice.delta.content ?? ""
      if (text !== "") {
        if (state.message === null) {
          const index = state.output.length
          state.message = { id: itemId("msg"), index, text: "" }
          state.output.push({ id: state.message.id, type: "message", role: "assistant", status: "incomplete", content: [] })
          events.push(
            event("response.output_item.added", {
              output_index: index,
              item: { id: state.message.id, type: "message", role: "assistant", status: "in_progress", content: [] }
            }),
            event("response.content_part.added", {
              item_id: state.message.id,
              output_index: index,
              content_index: 0,
              part: { type: "output_text", text: "", annotations: [] }
            })
          )
        }
        state.message.text += text
        events.push(event("response.output_text.delta", {
          item_id: state.message.id,
          output_index: state.message.index,
          content_index: 0,
          delta: text,
          logprobs: []
        }))
      }
      for (const delta of choice.delta.tool_calls ?? []) {
        let call = state.calls.get(delta.index)
        if (call === undefined) {
          events.push(...closeMessage())
          const index = state.output.length
          call = { id: itemId("fc"), index, callId: delta.id ?? itemId("call"), name: delta.function?.name ?? "", args: "" }
          state.calls.set(delta.index, call)
          state.output.push({ id: call.id, type: "function_call", call_id: call.callId, name: call.name, arguments: "", status: "incomplete" })
          events.push(event("response.output_item.added", {
            output_index: index,
            item: { id: call.id, type: "function_call", call_id: call.callId, name: call.name, arguments: "", status: "in_progress" }
          }))
        }
        const piece = delta.function?.arguments ?? ""
        if (piece !== "") {
          call.args += piece
          events.push(event("response.function_call_arguments.delta", { item_id: call.id, output_index: call.index, delta: piece }))
        }
      }
    }
    return events
  }
  const close = (): Array<ResponseEvent> => [...closeMessage(), ...closeCalls()]
  return { state, onChunk, close } as const
}

/**
 * A finished hybrid loop's events in the spec's order: tool discovery, each mcp_call (arguments,
 * progress, completion), then the answer's items and response.completed (or response.incomplete).
 */
export const hostedEvents = (
  event: EventOf,
  servers: ReadonlyArray<{ readonly label: string; readonly tools: ReadonlyArray<ToolListing> }>,
  result: { readonly output: ReadonlyArray<OutputItem>; readonly status: "completed" | "incomplete" },
  created: ResponseObject,
  done: ResponseObject
): Array<ResponseEvent> => {
  // Made in the order they are sent: `event` numbers them as it is called.
  const opening = [event("response.created", { response: created }), event("response.in_progress", { response: created })]
  const discovery = servers.flatMap((server) => [
    event("response.mcp_list_tools.in_progress", { server_label: server.label }),
    event("response.mcp_list_tools.completed", { server_label: server.label, tools: server.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema })) })
  ])
  const items = result.output.flatMap((item, index): Array<ResponseEvent> => {
    if (item.type === "mcp_call") {
      return [
        event("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", output: null, error: null } }),
        event("response.mcp_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments }),
        event("response.mcp_call_arguments.done", { item_id: item.id, output_index: index, arguments: item.arguments }),
        event("response.mcp_call.in_progress", { item_id: item.id, output_index: index }),
        event(item.status === "failed" ? "response.mcp_call.failed" : "response.mcp_call.completed", { item_id: item.id, output_index: index }),
        event("response.output_item.done", { output_index: index, item })
      ]
    }
    if (item.type === "function_call") {
      return [
        event("response.output_item.added", { output_index: index, item: { ...item, arguments: "", status: "in_progress" } }),
        event("response.function_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments }),
        event("response.function_call_arguments.done", { item_id: item.id, output_index: index, arguments: item.arguments }),
        event("response.output_item.done", { output_index: index, item })
      ]
    }
    const text = item.content.map((c) => c.text).join("")
    const part = { type: "output_text", text, annotations: [] }
    return [
      event("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", content: [] } }),
      event("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part: { ...part, text: "" } }),
      event("response.output_text.delta", { item_id: item.id, output_index: index, content_index: 0, delta: text, logprobs: [] }),
      event("response.output_text.done", { item_id: item.id, output_index: index, content_index: 0, text, logprobs: [] }),
      event("response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part }),
      event("response.output_item.done", { output_index: index, item })
    ]
  })
  return [
    ...opening,
    ...discovery,
    ...items,
    event(result.status === "completed" ? "response.completed" : "response.incomplete", { response: done })
  ]
}

// A fake OpenAI Responses upstream (POST {url}/responses): real response objects and the
// `event:` + `data:` stream (created, output items, text/argument deltas, completed).
import { type FakeProtocol, type FakeUpstream, type FakeUsage, type Plan, sse, startFake } from "./FakeOpenAi.js"

const outputItem = (plan: Plan, n: number) =>
  plan.kind === "text"
    ? {
      id: `msg_fake_${n}`,
      type: "message",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: plan.text, annotations: [] }]
    }
    : { id: `fc_fake_${n}`, type: "function_call", status: "completed", call_id: plan.callId, name: plan.name, arguments: plan.arguments }

const responseObject = (plan: Plan | undefined, usage: FakeUsage | undefined, model: string, n: number) => ({
  id: `resp_fake_${n}`,
  object: "response",
  created_at: Math.floor(Date.now() / 1000),
  status: plan === undefined ? "in_progress" : "completed",
  model,
  output: plan === undefined ? [] : [outputItem(plan, n)],
  usage: usage === undefined
    ? null
    : { input_tokens: usage.prompt, output_tokens: usage.completion, total_tokens: usage.prompt + usage.completion }
})

const responsesProtocol: FakeProtocol = {
  path: "/v1/responses",
  conversation: (body) => {
    const input: Array<any> = typeof body?.input === "string" ? [{ role: "user", content: body.input }] : body?.input ?? []
    const last = input[input.length - 1]
    const hasInstructions = typeof body?.instructions === "string" && body.instructions !== ""
    return {
      messageCount: input.length + (hasInstructions ? 1 : 0),
      toolResult: last?.type === "function_call_output" ? String(last.output) : undefined,
      lastIsUser: last?.role === "user",
      firstToolName: body?.tools?.[0]?.name,
      json: body?.text?.format?.type === "json_object",
      ...(body?.text?.format?.type === "json_schema" ? { schema: body.text.format.schema } : {}),
      stream: body?.stream === true,
      model: String(body?.model)
    }
  },
  json: (plan, usage, c, n) => responseObject(plan, usage, c.model, n),
  frames: (plan, usage, c, n) => {
    let seq = 0
    const ev = (type: string, data: object) => sse({ type, sequence_number: seq++, ...data }, type)
    const item = outputItem(plan, n)
    const head = [
      ev("response.created", { response: responseObject(undefined, undefined, c.model, n) }),
      ev("response.in_progress", { response: responseObject(undefined, undefined, c.model, n) })
    ]
    if (plan.kind === "text") {
      head.push(
        ev("response.output_item.added", { output_index: 0, item: { ...item, status: "in_progress", content: [] } }),
        ev("response.content_part.added", { item_id: item.id, output_index: 0, content_index: 0, part: { type: "output_text", text: "", annotations: [] } })
      )
    } else {
      head.push(ev("response.output_item.added", { output_index: 0, item: { ...item, status: "in_progress", arguments: "" } }))
    }
    const content = plan.pieces.map((delta) =>
      plan.kind === "text"
        ? ev("response.output_text.delta", { item_id: item.id, output_index: 0, content_index: 0, delta })
        : ev("response.function_call_arguments.delta", { item_id: item.id, output_index: 0, delta })
    )
    const tail = plan.kind === "text"
      ? [
        ev("response.output_text.done", { item_id: item.id, output_index: 0, content_index: 0, text: plan.text }),
        ev("response.content_part.done", { item_id: item.id, output_index: 0, content_index: 0, part: { type: "output_text", text: plan.text, annotations: [] } })
      ]
      : [ev("response.function_call_arguments.done", { item_id: item.id, output_index: 0, arguments: plan.arguments })]
    tail.push(
      ev("response.output_item.done", { output_index: 0, item }),
      ev("response.completed", { response: responseObject(plan, usage, c.model, n) })
    )
    return { head, content, tail }
  },
  errorBody: (status, message) => ({
    error: { message, type: status >= 500 ? "server_error" : "invalid_request_error", param: null, code: null }
  }),
  streamError: (message) => sse({ type: "error", code: "server_error", message, param: null, sequence_number: 99 }, "error")
}

/** Starts a fake OpenAI Responses upstream: POST {url}/responses, JSON or SSE events. */
export const startFakeOpenAiResponses = (): Promise<FakeUpstream> => startFake(responsesProtocol)

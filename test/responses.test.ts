// The Responses API with the official openai SDK: create (JSON and streamed, events checked one
// by one), stored chains through previous_response_id, the function-call round trip, the same
// pre-flight checks and settlement as chat (log rows of type `response`), tenant isolation.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream } from "./fakes/FakeOpenAi.js"
import { createEndUser, type Gateway } from "./support/Gateway.js"
import { type ResponsesTenant, responsesTenant, type ResponsesWorld, startResponsesWorld } from "./support/ResponsesWorld.js"

let world: ResponsesWorld
let gw: Gateway
let oa: FakeUpstream
let resp: FakeUpstream
type Tenant = ResponsesTenant

beforeAll(async () => {
  world = await startResponsesWorld()
  ;({ gw, oa, resp } = world)
})
afterAll(async () => {
  await world?.close()
})

const tenant = (budget: Record<string, unknown> = { max_usd: 5 }) => responsesTenant(gw, "resp-user", budget)

const logRows = async (t: Tenant) =>
  (await gw.db.pool.query("SELECT * FROM inference_logs WHERE platform_id = $1 ORDER BY created_at", [t.platformId])).rows

const tools = [{ type: "function" as const, name: "get_weather", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }]

describe("responses.create", () => {
  it("non-stream: the response object per spec, stored, billed and logged as `response`", async () => {
    const t = await tenant()
    const res = await t.client.responses.create({ model: "mock-echo", input: "hello there", instructions: "be nice" })
    expect(res).toMatchObject({ object: "response", status: "completed", model: "mock-echo" })
    expect(res.id).toMatch(/^resp_/)
    expect(typeof res.created_at).toBe("number")
    expect(res.output).toHaveLength(1)
    expect(res.output[0]).toMatchObject({ type: "message", role: "assistant", content: [{ type: "output_text", text: "echo: hello there" }] })
    expect(res.output_text).toBe("echo: hello there")
    // mock usage: ceil(("be nice" + "hello there") 18 chars / 4) = 5 in, 3 out
    expect(res.usage).toMatchObject({ input_tokens: 5, output_tokens: 3, total_tokens: 8 })
    const [log] = await logRows(t)
    expect(log).toMatchObject({ request_type: "response", billing_status: "billed", prompt_tokens: 5, completion_tokens: 3 })
    const stored = (await gw.db.pool.query("SELECT * FROM responses WHERE id = $1", [res.id])).rows[0]
    expect(stored).toMatchObject({ end_user_id: t.endUserId, status: "completed", instructions: "be nice" })
    const used = (await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1", [t.endUserId])).rows[0]
    expect(used.used_usd).toBe("0.000011")
  })

  it("streams the spec's events in order, each `event:` equal to data.type, usage on completed", async () => {
    const t = await tenant()
    const raw = await fetch(`${gw.baseUrl}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.endUserKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "mock-echo", input: "one two", stream: true })
    })
    expect(raw.headers.get("content-type")).toContain("text/event-stream")
    const messages = (await raw.text()).split("\n\n").filter((m) => m.trim() !== "")
    const events = messages.map((m) => {
      const [eventLine, dataLine] = m.split("\n")
      const name = eventLine!.replace(/^event: /, "")
      const data = JSON.parse(dataLine!.replace(/^data: /, ""))
      expect(data.type).toBe(name)
      return data
    })
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed"
    ])
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    expect(events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("")).toBe("echo: one two")
    expect(events.at(-1).response).toMatchObject({ status: "completed", usage: { input_tokens: 2, output_tokens: 3, total_tokens: 5 } })

    // The SDK's stream helper accepts the same events.
    const stream = t.client.responses.stream({ model: "mock-echo", input: "via sdk" })
    let text = ""
    for await (const e of stream) if (e.type === "response.output_text.delta") text += e.delta
    const final = await stream.finalResponse()
    expect(text).toBe("echo: via sdk")
    expect(final.output_text).toBe("echo: via sdk")
    await expect.poll(async () => (await logRows(t)).length).toBe(2)
  })

  it("a function-call round trip through previous_response_id and function_call_output", async () => {
    const t = await tenant()
    oa.reset()
    const first = await t.client.responses.create({ model: "gpt-fake", input: "weather in Paris?", tools })
    const call = first.output.find((o) => o.type === "function_call")
    expect(call).toMatchObject({ type: "function_call", name: "get_weather", arguments: "{\"city\":\"Paris\"}" })
    if (call?.type !== "function_call") throw new Error("no call")
    const second = await t.client.responses.create({
      model: "gpt-fake",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }],
      tools
    })
    expect(second.output_text).toBe("done: sunny")
    const sent = oa.requests[1]!.body.messages
    expect(sent.map((m: any) => m.role)).toEqual(["user", "assistant", "tool"])
    expect(sent[1].tool_calls[0]).toMatchObject({ id: call.call_id, function: { name: "get_weather" } })
    expect(sent[2]).toMatchObject({ tool_call_id: call.call_id, content: "sunny" })
  })

  it("a three-turn chain: the whole context reaches the upstream", async () => {
    const t = await tenant()
    oa.reset()
    const r1 = await t.client.responses.create({ model: "gpt-fake", input: "first", instructions: "sys" })
    const r2 = await t.client.responses.create({ model: "gpt-fake", input: "second", previous_response_id: r1.id })
    const r3 = await t.client.responses.create({ model: "gpt-fake", input: "third", previous_response_id: r2.id, instructions: "sys3" })
    expect(r3.status).toBe("completed")
    const third = oa.requests[2]!.body.messages
    expect(third.map((m: any) => `${m.role}:${typeof m.content === "string" ? m.content : ""}`)).toEqual([
      "system:sys3",
      "user:first",
      "assistant:Hello from the fake upstream",
      "user:second",
      "assistant:Hello from the fake upstream",
      "user:third"
    ])
  })

  it("anthropic and openai-responses upstreams are reached by translation; a function call comes back", async () => {
    const t = await tenant()
    const viaClaude = await t.client.responses.create({ model: "claude-fake", input: "weather?", tools })
    expect(viaClaude.output.some((o) => o.type === "function_call" && o.name === "get_weather")).toBe(true)
    const viaResponses = await t.client.responses.create({ model: "resp-fake", input: "hi", max_output_tokens: 32 })
    expect(viaResponses.output_text).toBe("Hello from the fake upstream")
  })
})

describe("checks and isolation", () => {
  it("another user's or platform's previous_response_id is 404", async () => {
    const t = await tenant()
    const mine = await t.client.responses.create({ model: "mock-echo", input: "secret" })
    const sibling = await createEndUser(gw, t.platformId, t.platformKey, "sibling")
    const asSibling = await gw.call("POST", "/v1/responses", {
      key: sibling.endUserKey,
      body: { model: "mock-echo", input: "x", previous_response_id: mine.id }
    })
    expect(asSibling.status).toBe(404)
    expect(asSibling.body.error).toMatchObject({ code: "not_found", param: "previous_response_id" })
    const other = await tenant()
    const cross = await gw.call("POST", "/v1/responses", { key: other.endUserKey, body: { model: "mock-echo", input: "x", previous_response_id: mine.id } })
    expect(cross.status).toBe(404)
  })

  it("the same pre-flight codes as chat; refusals reach no upstream and bill nothing", async () => {
    const t = await tenant()
    oa.reset()
    resp.reset()
    const ask = (body: Record<string, unknown>) => gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "gpt-fake", input: "x", ...body } })
    expect((await ask({ model: "nope" })).body.error.code).toBe("model_not_found")
    const small = await ask({ model: "resp-fake", max_output_tokens: 8 })
    expect(small.status).toBe(422)
    expect(small.body.error).toMatchObject({ code: "max_tokens_too_small", param: "max_output_tokens" })
    const mcp = await ask({ tools: [{ type: "mcp", server_label: "github", server_url: "http://x/mcp/github", authorization: `Bearer ${t.endUserKey}` }] })
    expect(mcp.status).toBe(422)
    expect(mcp.body.error.param).toBe("tools.0.server_url")
    expect((await ask({ temperature: 3 })).status).toBe(422)
    await gw.call("PATCH", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey, body: { is_suspended: true } })
    const suspended = await ask({})
    expect(suspended.status).toBe(402)
    expect(suspended.body.error.code).toBe("budget_suspended")
    await gw.call("PATCH", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey, body: { is_suspended: false } })
    await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/debit`, { key: t.platformKey, body: { amount_usd: 5 } })
    expect((await ask({})).body.error.code).toBe("budget_exhausted")
    expect(oa.requests).toHaveLength(0)
    expect(resp.requests).toHaveLength(0)
    expect(await logRows(t)).toHaveLength(0)
  })

  it("an interrupted stream sends no response.completed, is billed for emitted tokens and stored incomplete", async () => {
    const t = await tenant()
    oa.reset()
    oa.setBehavior({ reply: "a b c d e f", dropAfterChunks: 2 })
    const raw = await fetch(`${gw.baseUrl}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.endUserKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-fake", input: "go", stream: true })
    })
    const text = await raw.text()
    expect(text).toContain("response.output_text.delta")
    expect(text).not.toContain("response.completed")
    await expect.poll(async () => (await logRows(t)).length).toBe(1)
    expect((await logRows(t))[0]).toMatchObject({ request_type: "response", status: "error", billing_status: "billed" })
    const stored = (await gw.db.pool.query("SELECT status FROM responses WHERE platform_id = $1", [t.platformId])).rows
    expect(stored).toEqual([{ status: "incomplete" }])
    oa.reset()
  })
})

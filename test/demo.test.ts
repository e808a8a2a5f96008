// The offline demo end to end, as a newcomer runs it: the demo seed (src/Demo.ts), `mock-tools`
// over chat and /v1/responses with the official openai SDK (function calling and MCP tools run
// by the gateway), and a billed run of the in-process capability provider `demo-search`. Outside
// demo mode no `mock://` provider can be written or answers.
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { seedDemo } from "../src/Demo.js"
import { type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
let plain: Gateway
let demo: { platform_id: string; platform_key: string; end_user_key: string }
let endUserId: string
let client: OpenAI

beforeAll(async () => {
  ;[gw, plain] = await Promise.all([startGateway({ env: { GATEWAY_DEMO: "true" } }), startGateway()])
  demo = await gw.run(seedDemo)
  const users = ok(await gw.call("GET", `/v1/platforms/${demo.platform_id}/end-users?external_id=demo-user`, { key: demo.platform_key }))
  endUserId = users.body.data[0].id
  client = new OpenAI({ apiKey: demo.end_user_key, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
}, 60_000)
afterAll(async () => {
  await Promise.all([gw?.close(), plain?.close()])
})

const weather = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string" },
        days: { type: "integer", minimum: 2 },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        detailed: { type: "boolean" },
        hours: { type: "array", items: { type: "integer" } }
      },
      required: ["city", "days", "unit", "detailed"]
    }
  }
}
const lookup = { type: "function" as const, function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" }, n: { type: "number" } } } } }

const enableCapabilities = () =>
  gw.call("PATCH", `/v1/platforms/${demo.platform_id}`, {
    key: demo.platform_key,
    body: { settings: { capabilities: { enabled: true, max_price_usd: 0.05, denylist: [] } } }
  })

describe("demo seed", () => {
  it("lists mock-echo, mock-tools and mock-embed; seeding again keeps the same keys", async () => {
    const models = ok(await gw.call("GET", "/v1/models", { key: demo.end_user_key }))
    expect(models.body.data.map((m: { id: string }) => m.id).sort()).toEqual(["mock-echo", "mock-embed", "mock-tools"])
    expect(await gw.run(seedDemo)).toEqual(demo)
  })
})

describe("mock-tools over chat completions", () => {
  it("calls the tool named in the message, with arguments from its schema", async () => {
    const answer = await client.chat.completions.create({
      model: "mock-tools",
      messages: [{ role: "user", content: "What does get_weather say for Paris?" }],
      tools: [lookup, weather]
    })
    const choice = answer.choices[0]!
    expect(choice.finish_reason).toBe("tool_calls")
    expect(choice.message.content).toBeNull()
    expect(choice.message.tool_calls).toHaveLength(1)
    const call = choice.message.tool_calls![0]!
    expect(call.id).toMatch(/^call_[0-9a-f]{32}$/)
    expect(call.type).toBe("function")
    if (call.type !== "function") throw new Error("not a function call")
    expect(call.function.name).toBe("get_weather")
    // Only the required properties: the string gets the message, the integer its minimum, the enum its first value.
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "What does get_weather say for Paris?", days: 2, unit: "celsius", detailed: true })
    // mockUsage: 36 characters -> 9 prompt tokens; the reply `get_weather <arguments>` has 7 words
    // (the message's 5 words sit inside the arguments, the name and the JSON's first key add 2).
    expect(answer.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 })
  })

  it("without a named tool calls the first one (all properties when none are required); tool_choice names one", async () => {
    const first = await client.chat.completions.create({ model: "mock-tools", messages: [{ role: "user", content: "hi" }], tools: [lookup, weather] })
    const call = first.choices[0]!.message.tool_calls![0]!
    if (call.type !== "function") throw new Error("not a function call")
    expect(call.function).toEqual({ name: "lookup", arguments: JSON.stringify({ q: "hi", n: 1 }) })
    const chosen = await client.chat.completions.create({
      model: "mock-tools",
      messages: [{ role: "user", content: "hi" }],
      tools: [lookup, weather],
      tool_choice: { type: "function", function: { name: "get_weather" } }
    })
    const named = chosen.choices[0]!.message.tool_calls![0]!
    expect(named.type === "function" && named.function.name).toBe("get_weather")
    const none = await client.chat.completions.create({ model: "mock-tools", messages: [{ role: "user", content: "hi" }], tools: [lookup], tool_choice: "none" })
    expect(none.choices[0]!.message).toMatchObject({ content: "echo: hi" })
  })

  it("answers a tool result with the tool's name and output, and echoes without tools", async () => {
    const long = "x".repeat(250)
    const answer = await client.chat.completions.create({
      model: "mock-tools",
      tools: [weather],
      messages: [
        { role: "user", content: "weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_1", content: long }
      ]
    })
    expect(answer.choices[0]!.finish_reason).toBe("stop")
    expect(answer.choices[0]!.message.content).toBe(`echo: get_weather returned ${"x".repeat(200)}`)
    const unknownCall = await client.chat.completions.create({
      model: "mock-tools",
      messages: [{ role: "user", content: "q" }, { role: "tool", tool_call_id: "call_zz", content: "{\"sky\":\"sunny\"}" }]
    })
    expect(unknownCall.choices[0]!.message.content).toBe("echo: call_zz returned {\"sky\":\"sunny\"}")
    const echo = await client.chat.completions.create({ model: "mock-tools", messages: [{ role: "user", content: "hello there" }] })
    expect(echo.choices[0]!.message.content).toBe("echo: hello there")
  })

  it("streams the call as OpenAI chunks: role, tool_calls deltas, finish, usage", async () => {
    const stream = await client.chat.completions.create({
      model: "mock-tools",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "get_weather for Oslo" }],
      tools: [weather]
    })
    const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
    for await (const chunk of stream) chunks.push(chunk)
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant")
    const deltas = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []))
    expect(deltas[0]).toMatchObject({ index: 0, id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather" } })
    const args = deltas.map((d) => d.function?.arguments ?? "").join("")
    expect(JSON.parse(args)).toEqual({ city: "get_weather for Oslo", days: 2, unit: "celsius", detailed: true })
    expect(chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter((f) => f !== null)).toEqual(["tool_calls"])
    // 20 characters -> 5 prompt tokens; `get_weather {"city":"get_weather for Oslo",...}` has 4 words.
    expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 })
    // The SDK's own accumulator agrees.
    const again = client.chat.completions.stream({ model: "mock-tools", messages: [{ role: "user", content: "get_weather for Oslo" }], tools: [weather] })
    const final = await again.finalChatCompletion()
    const call = final.choices[0]!.message.tool_calls![0]!
    expect(call.type === "function" && JSON.parse(call.function.arguments).city).toBe("get_weather for Oslo")
  })
})

describe("mock-tools on /v1/responses", () => {
  const tools = [{
    type: "function" as const,
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    strict: false
  }]

  it("a function-calling round trip: function_call, then function_call_output on previous_response_id, then the echo", async () => {
    const asked = await client.responses.create({ model: "mock-tools", input: "Weather in Paris?", tools })
    expect(asked.output.map((o) => o.type)).toEqual(["function_call"])
    const call = asked.output[0]!
    if (call.type !== "function_call") throw new Error("no function call")
    expect(call).toMatchObject({ name: "get_weather", arguments: JSON.stringify({ city: "Weather in Paris?" }), status: "completed" })
    expect(call.call_id).toMatch(/^call_/)
    const answered = await client.responses.create({
      model: "mock-tools",
      tools,
      previous_response_id: asked.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ sky: "sunny" }) }]
    })
    expect(answered.output_text).toBe("echo: get_weather returned {\"sky\":\"sunny\"}")
    expect(answered.previous_response_id).toBe(asked.id)
  })

  it("streams the function call events and the answer on the chain", async () => {
    const stream = client.responses.stream({ model: "mock-tools", input: "Weather in Rome?", tools })
    const types: Array<string> = []
    for await (const event of stream) types.push(event.type)
    const asked = await stream.finalResponse()
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed"
    ])
    const call = asked.output[0]!
    if (call.type !== "function_call") throw new Error("no function call")
    expect(JSON.parse(call.arguments)).toEqual({ city: "Weather in Rome?" })
    const next = client.responses.stream({
      model: "mock-tools",
      tools,
      previous_response_id: asked.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "22C" }]
    })
    let text = ""
    for await (const event of next) if (event.type === "response.output_text.delta") text += event.delta
    expect(text).toBe("echo: get_weather returned 22C")
  })
})

describe("MCP tools in /v1/responses (the per-user tool URL, capabilities enabled)", () => {
  it("mcp-config lists no server while nothing is enabled, then the per-user URL as `gateway`", async () => {
    await gw.call("PATCH", `/v1/platforms/${demo.platform_id}`, { key: demo.platform_key, body: { settings: { capabilities: { enabled: false } } } })
    const before = ok(await gw.call("GET", "/v1/me/mcp-config", { key: demo.end_user_key }))
    expect(before.body).toEqual({ standard: {}, openai: [] })
    ok(await enableCapabilities())
    const after = ok(await gw.call("GET", "/v1/me/mcp-config", { key: demo.end_user_key }))
    const authorization = `Bearer ${demo.end_user_key}`
    expect(after.body).toEqual({
      standard: { gateway: { transport: "streamable_http", url: `${gw.toolsUrl}/mcp`, headers: { Authorization: authorization } } },
      openai: [{ type: "mcp", server_label: "gateway", server_url: `${gw.toolsUrl}/mcp`, authorization }]
    })
  })

  it("the gateway runs the tool mock-tools calls: an mcp_call item, then the answer, one `response` row per turn", async () => {
    ok(await enableCapabilities())
    const config = ok(await gw.call("GET", "/v1/me/mcp-config", { key: demo.end_user_key })).body
    const before = (await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1 AND request_type = 'response'", [demo.platform_id])).rows[0].n
    const res = await client.responses.create({ model: "mock-tools", input: "capability_search: web search", tools: config.openai })
    expect(res.status).toBe("completed")
    expect(res.output.map((o) => o.type)).toEqual(["mcp_call", "message"])
    const call = res.output[0] as any
    expect(call).toMatchObject({ type: "mcp_call", server_label: "gateway", name: "capability_search", status: "completed", error: null })
    expect(JSON.parse(call.arguments)).toEqual({ query: "capability_search: web search" })
    const found = JSON.parse(call.output)
    expect(found.candidates.map((c: { slug: string }) => c.slug)).toContain("demo-search")
    expect(res.output_text).toBe(`echo: capability_search returned ${call.output.slice(0, 200)}`)
    const after = (await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1 AND request_type = 'response'", [demo.platform_id])).rows[0].n
    expect(after - before).toBe(2)
  })

  it("streams the mcp events; list_capabilities by name; a wrong server_url is refused", async () => {
    ok(await enableCapabilities())
    const config = ok(await gw.call("GET", "/v1/me/mcp-config", { key: demo.end_user_key })).body
    const stream = client.responses.stream({ model: "mock-tools", input: "list_capabilities please", tools: config.openai })
    const types: Array<string> = []
    for await (const event of stream) types.push(event.type)
    const final = await stream.finalResponse()
    expect(types.slice(0, 5)).toEqual([
      "response.created",
      "response.in_progress",
      "response.mcp_list_tools.in_progress",
      "response.mcp_list_tools.completed",
      "response.output_item.added"
    ])
    expect(types).toContain("response.mcp_call.completed")
    expect(types.at(-1)).toBe("response.completed")
    const call = final.output[0] as any
    expect(call).toMatchObject({ type: "mcp_call", name: "list_capabilities", arguments: "{}" })
    expect(JSON.parse(call.output).enabled).toBe(true)
    const wrong = await gw.call("POST", "/v1/responses", {
      key: demo.end_user_key,
      body: { model: "mock-tools", input: "x", tools: [{ ...config.openai[0], server_url: `${gw.toolsUrl}/mcp/gateway` }] }
    })
    expect(wrong.status).toBe(422)
    expect(wrong.body.error).toMatchObject({ param: "tools.0.server_url", message: `server_url must be ${gw.toolsUrl}/mcp` })
  })
})

describe("demo-search: the in-process capability provider", () => {
  it("search, then run by the uid from GET /v1/capabilities/web-search: billed 0.002 USD, in the budget ledger", async () => {
    ok(await enableCapabilities())
    const shelf = ok(await gw.call("GET", "/v1/capabilities/web-search", { key: demo.end_user_key }))
    const provider = shelf.body.providers.find((p: { slug: string }) => p.slug === "demo-search")
    expect(provider).toMatchObject({ url: "mock://demo-search", median_price_usd: 0.002, policy_state: "in_policy", availability: "healthy" })
    const found = ok(await gw.call("POST", "/v1/capabilities/search", { key: demo.end_user_key, body: { query: "search the web for recent news", limit: 8 } }))
    expect(found.body.candidates.map((c: { uid: string }) => c.uid)).toContain(provider.uid)

    const run = ok(await gw.call("POST", "/v1/capabilities/run", {
      key: demo.end_user_key,
      body: { capability: provider.uid, input: { query: "model gateways", num_results: 2 }, max_pay: 0.01 }
    }))
    expect(run.body).toMatchObject({ capability: "web-search", ok: true, final_state: "billed", status: 200, cost_usd: 0.002, charged_end_user: true })
    expect(run.body.result).toEqual({
      ok: true,
      query: "model gateways",
      results: [1, 2].map((i) => ({
        title: `Demo result ${i} for "model gateways"`,
        url: `https://example.com/demo-search/${i}?q=model%20gateways`,
        snippet: `Offline demo result ${i} of 2 for "model gateways", answered inside the gateway (demo mode); no web page was fetched.`
      }))
    })
    // The same input gives the same results.
    const again = ok(await gw.call("POST", "/v1/capabilities/run", { key: demo.end_user_key, body: { capability: provider.uid, input: { query: "model gateways", num_results: 2 } } }))
    expect(again.body.result).toEqual(run.body.result)

    const ledger = ok(await gw.call("GET", `/v1/platforms/${demo.platform_id}/end-users/${endUserId}/budget/transactions?limit=50`, { key: demo.platform_key }))
    const debit = ledger.body.data.find((t: any) => t.type === "debit" && t.metadata?.run_id === run.body.run_id)
    expect(debit).toMatchObject({ type: "debit", amount_usd: 0.002, reason: "capability_run" })
    expect(debit.metadata).toMatchObject({ capability: "web-search", provider: provider.uid, provider_slug: "demo-search" })
    const { rows: [row] } = await gw.db.pool.query(
      "SELECT state, trim_scale(cost_usd)::text AS cost FROM capability_runs WHERE id = $1",
      [run.body.run_id]
    )
    expect(row).toEqual({ state: "billed", cost: "0.002" })
  })

  it("a run without a query answers 422 and charges nothing", async () => {
    ok(await enableCapabilities())
    const shelf = ok(await gw.call("GET", "/v1/capabilities/web-search", { key: demo.end_user_key }))
    const uid = shelf.body.providers.find((p: { slug: string }) => p.slug === "demo-search").uid
    const run = ok(await gw.call("POST", "/v1/capabilities/run", { key: demo.end_user_key, body: { capability: uid, input: { q: "wrong field" } } }))
    expect(run.body).toMatchObject({ final_state: "failed", status: 422, cost_usd: 0, charged_end_user: false })
  })
})

describe("outside demo mode", () => {
  it("no mock:// provider is listed, and the operator API refuses one", async () => {
    const shelf = ok(await plain.call("GET", "/v1/capabilities/web-search", { key: (await platformOf(plain)).platformKey }))
    expect(shelf.body.providers.map((p: { slug: string }) => p.slug)).not.toContain("demo-search")
    const refused = await plain.call("POST", "/v1/admin/capabilities/providers", {
      key: plain.adminKey,
      body: {
        capability: { slug: "web-search", name: "Web search" },
        providers: [{ slug: "sneaky", url: "mock://demo-search", median_price_usd: 0.002 }]
      }
    })
    expect(refused.status).toBe(422)
    expect(refused.body.error.param).toBe("providers.0.url")
  })

  it("a mock:// row that reached the database anyway is never answered: released, nothing charged", async () => {
    const { platformId, platformKey } = await platformOf(plain)
    await plain.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body: { settings: { capabilities: { enabled: true } } } })
    await plain.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: plain.adminKey, body: { amount_usd: 1 } })
    const eu = ok(await plain.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: "u" } }), 201).body
    ok(await plain.call("POST", `/v1/platforms/${platformId}/end-users/${eu.id}/budget`, { key: platformKey, body: { max_usd: 1 } }), 201)
    const { rows: [inserted] } = await plain.db.pool.query(
      `INSERT INTO capability_providers (capability_id, slug, url, protocol, median_price_usd, availability)
        SELECT id, 'demo-search', 'mock://demo-search', 'mock', 0.002, 'healthy' FROM capabilities WHERE slug = 'web-search'
        RETURNING id`
    )
    const run = ok(await plain.call("POST", "/v1/capabilities/run", { key: eu.api_key.raw_key, body: { capability: `cap_${inserted.id}`, input: { query: "x" } } }))
    expect(run.body).toMatchObject({ final_state: "released", status: null, cost_usd: 0, charged_end_user: false })
    expect(run.body.result.error).toMatchObject({ type: "url_refused", message: expect.stringContaining("demo mode") })
  })
})

const platforms = new Map<Gateway, { platformId: string; platformKey: string }>()
/** One platform per gateway for the checks that need any platform key. */
const platformOf = async (g: Gateway) => {
  const known = platforms.get(g)
  if (known !== undefined) return known
  const res = ok(await g.call("POST", "/v1/admin/platforms", { key: g.adminKey, body: { name: "Plain" } }), 201)
  const made = { platformId: res.body.platform.id as string, platformKey: res.body.api_key.raw_key as string }
  platforms.set(g, made)
  return made
}

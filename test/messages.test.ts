// POST /v1/messages and /v1/messages/count_tokens driven by the official Anthropic SDK: the same
// pipeline as chat (checks, routing, settlement, logs of type `messages`), passed through to an
// `anthropic` upstream (cache tokens priced) and translated for an `openai` one, with Anthropic-
// shaped errors that carry the gateway's code. One gateway for the file.
import Anthropic, { APIError } from "@anthropic-ai/sdk"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { PREAMBLE, startFakeAnthropic } from "./fakes/FakeAnthropic.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { startFakeOpenAiResponses } from "./fakes/FakeOpenAiResponses.js"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"
import { until } from "./support/Polling.js"

let gw: Gateway
let anth: FakeUpstream
let oa: FakeUpstream
let resp: FakeUpstream
let tenant: { platformId: string; platformKey: string; endUserId: string; endUserKey: string }

const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body }).then((res) => ok(res))

/** An SDK client of the gateway; the key goes as x-api-key (apiKey) or as a Bearer token (authToken). */
const sdk = (key: string, as: "apiKey" | "authToken" = "apiKey") =>
  new Anthropic({ baseURL: gw.baseUrl, maxRetries: 0, ...(as === "apiKey" ? { apiKey: key } : { apiKey: null, authToken: key }) })

const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "The weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

/** The end user's log rows, newest first (after the gateway's queued settlements). */
const logsOf = async (endUserId: string) =>
  (await gw.db.pool.query(
    `SELECT request_type, model_slug, prompt_tokens, completion_tokens, estimated_cost_usd::text AS cost, status, token_count_method, metadata
       FROM inference_logs WHERE end_user_id = $1 ORDER BY created_at DESC`,
    [endUserId]
  )).rows

const usedUsd = async (endUserId: string) =>
  (await gw.db.pool.query(`SELECT used_usd::text AS used FROM budgets WHERE end_user_id = $1`, [endUserId])).rows[0]?.used as string

/** The sum of the end user's logged costs, added by Postgres (exact). */
const loggedUsd = async (endUserId: string) =>
  (await gw.db.pool.query(`SELECT sum(estimated_cost_usd)::text AS total FROM inference_logs WHERE end_user_id = $1`, [endUserId])).rows[0]?.total as string

/** A fresh end user of the tenant's platform with its own budget. */
const endUser = async (externalId: string, budget: Record<string, unknown> = { max_usd: 5 }) => {
  const eu = await createEndUser(gw, tenant.platformId, tenant.platformKey, externalId)
  ok(await gw.call("POST", `/v1/platforms/${tenant.platformId}/end-users/${eu.endUserId}/budget`, { key: tenant.platformKey, body: budget }), 201)
  return eu
}

beforeAll(async () => {
  ;[anth, oa, resp] = await Promise.all([startFakeAnthropic(), startFakeOpenAi(), startFakeOpenAiResponses()])
  gw = await startGateway()
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 2 }
  await admin("/v1/admin/providers", { slug: "anth", kind: "anthropic", base_url: anth.url })
  await admin("/v1/admin/providers", { slug: "oa", kind: "openai", base_url: oa.url })
  await admin("/v1/admin/providers", { slug: "resp", kind: "openai-responses", base_url: resp.url })
  await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  await admin("/v1/admin/providers", { slug: "elsewhere", kind: "anthropic", base_url: anth.url })
  await admin("/v1/admin/models", {
    slug: "claude-native",
    aliases: ["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"],
    providers: [{ provider: "anth", provider_model_id: "claude-x", ...price, cache_read_usd_per_mtok: 0.1, cache_write_usd_per_mtok: 1.25 }]
  })
  await admin("/v1/admin/models", { slug: "claude-translated", aliases: ["claude-haiku-4-5"], providers: [{ provider: "oa", provider_model_id: "gpt-x", ...price }] })
  await admin("/v1/admin/models", { slug: "claude-responses", providers: [{ provider: "resp", provider_model_id: "r-x", ...price }] })
  await admin("/v1/admin/models", { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo", ...price }] })
  // A model on a provider the tenant has no key for: its alias must not reach it.
  await admin("/v1/admin/models", { slug: "claude-hidden", aliases: ["claude-opus-4-1"], providers: [{ provider: "elsewhere", provider_model_id: "claude-y", ...price }] })
  const { platformId, platformKey } = await createPlatform(gw)
  for (const slug of ["anth", "oa", "resp", "mock"]) {
    ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/${slug}`, { key: platformKey, body: { api_key: `k-${slug}` } }))
  }
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  tenant = { platformId, platformKey, endUserId: "", endUserKey: "" }
  const eu = await endUser("alice")
  tenant = { ...tenant, endUserId: eu.endUserId, endUserKey: eu.endUserKey }
}, 60_000)

afterAll(async () => {
  await gw?.close()
  await Promise.all([anth?.close(), oa?.close(), resp?.close()])
})

describe("POST /v1/messages", () => {
  it("passes a call through to an anthropic upstream and settles it as a `messages` call", async () => {
    anth.reset()
    const user = await endUser("native-create")
    const message = await sdk(user.endUserKey).messages.create({
      model: "claude-native",
      max_tokens: 100,
      system: "Be brief.",
      messages: [{ role: "user", content: "Hi" }]
    })
    expect(message.type).toBe("message")
    expect(message.id).toMatch(/^msg_/)
    expect(message.model).toBe("claude-native")
    expect(message.content).toEqual([{ type: "text", text: "Hello from the fake upstream" }])
    expect(message.stop_reason).toBe("end_turn")
    // The fake counts 10 tokens per message (system included) and one per word.
    expect(message.usage).toMatchObject({ input_tokens: 20, output_tokens: 5 })
    const sent = anth.requests[0]!
    expect(sent.body.model).toBe("claude-x")
    expect(sent.body.system).toBe("Be brief.")
    expect(sent.headers["x-api-key"]).toBe("k-anth")
    // The platform's log listing shows it too.
    const listed = ok(await gw.call("GET", `/v1/platforms/${tenant.platformId}/logs?end_user_id=${user.endUserId}`, { key: tenant.platformKey })).body
    expect(listed.data[0]).toMatchObject({ request_type: "messages", estimated_cost_usd: "0.00003", billing_status: "billed" })
    const [log] = await logsOf(user.endUserId)
    // 20 x 1 + 5 x 2 per million tokens.
    expect(log).toMatchObject({ request_type: "messages", model_slug: "claude-native", prompt_tokens: 20, completion_tokens: 5, cost: "0.00003", status: "success" })
    expect(await usedUsd(user.endUserId)).toBe("0.00003")
  })

  it("passes what it does not read on to an anthropic upstream (Claude Code's request shape)", async () => {
    anth.reset()
    const res = await fetch(`${gw.baseUrl}/v1/messages?beta=true`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${tenant.endUserKey}`,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "interleaved-thinking-2025-05-14",
        "content-type": "application/json"
      },
      body: JSON.stringify({
        model: "claude-sonnet-4-5-20250929",
        max_tokens: 200,
        system: [{ type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } }],
        messages: [{ role: "user", content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral" } }] }],
        thinking: { type: "enabled", budget_tokens: 100 },
        metadata: { user_id: "user_abc" },
        top_k: 5
      })
    })
    expect(res.status).toBe(200)
    expect(res.headers.get("request-id")).toBe(res.headers.get("x-request-id"))
    const sent = anth.requests[0]!
    expect(sent.headers["anthropic-beta"]).toBe("interleaved-thinking-2025-05-14")
    expect(sent.body).toMatchObject({
      model: "claude-x",
      stream: false,
      system: [{ type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } }],
      messages: [{ role: "user", content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral" } }] }],
      thinking: { type: "enabled", budget_tokens: 100 },
      metadata: { user_id: "user_abc" },
      top_k: 5
    })
  })

  it("translates a call for an openai upstream and back", async () => {
    oa.reset()
    const user = await endUser("translated-create")
    const message = await sdk(user.endUserKey).messages.create({
      model: "claude-translated",
      max_tokens: 100,
      system: "Be brief.",
      messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }]
    })
    expect(message.content).toEqual([{ type: "text", text: "Hello from the fake upstream" }])
    expect(message.stop_reason).toBe("end_turn")
    expect(message.usage).toMatchObject({ input_tokens: 20, output_tokens: 5 })
    const sent = oa.requests[0]!
    expect(sent.body.model).toBe("gpt-x")
    expect(sent.body.max_tokens).toBe(100)
    expect(sent.body.messages).toEqual([{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }])
    const [log] = await logsOf(user.endUserId)
    expect(log).toMatchObject({ request_type: "messages", model_slug: "claude-translated", cost: "0.00003" })
    expect(await usedUsd(user.endUserId)).toBe("0.00003")
  })

  it("translates for an openai-responses upstream too", async () => {
    resp.reset()
    const message = await sdk(tenant.endUserKey).messages.create({ model: "claude-responses", max_tokens: 100, messages: [{ role: "user", content: "Hi" }] })
    expect(message.content).toEqual([{ type: "text", text: "Hello from the fake upstream" }])
    expect(message.usage).toMatchObject({ input_tokens: 10, output_tokens: 5 })
    expect(resp.requests[0]!.body).toMatchObject({ model: "r-x", max_output_tokens: 100 })
  })

  it("serves the mock provider (the demo's models)", async () => {
    const message = await sdk(tenant.endUserKey).messages.create({ model: "mock-echo", max_tokens: 50, messages: [{ role: "user", content: "ping pong" }] })
    expect(message.content).toEqual([{ type: "text", text: "echo: ping pong" }])
  })

  it("streams text with Anthropic's event sequence, natively and translated", async () => {
    for (const model of ["claude-native", "claude-translated", "claude-responses"]) {
      const user = await endUser(`stream-${model}`)
      const stream = sdk(user.endUserKey).messages.stream({ model, max_tokens: 100, messages: [{ role: "user", content: "Hi" }] })
      const types: Array<string> = []
      stream.on("streamEvent", (event) => types.push(event.type))
      const message = await stream.finalMessage()
      expect(message.content).toEqual([{ type: "text", text: "Hello from the fake upstream" }])
      expect(message.id).toMatch(/^msg_/)
      expect(message.stop_reason).toBe("end_turn")
      expect(message.usage).toMatchObject({ input_tokens: 10, output_tokens: 5 })
      expect(types[0]).toBe("message_start")
      expect(types.slice(-2)).toEqual(["message_delta", "message_stop"])
      expect(types.filter((t) => t === "content_block_delta").length).toBe(5)
      const [log] = await logsOf(user.endUserId)
      expect(log).toMatchObject({ request_type: "messages", model_slug: model, prompt_tokens: 10, completion_tokens: 5, cost: "0.00002", status: "success" })
      expect(log.metadata.stream).toBe(true)
      expect(await usedUsd(user.endUserId)).toBe("0.00002")
    }
  })

  it("sends each event with its `event:` line, pings included", async () => {
    for (const model of ["claude-native", "claude-translated"]) {
      const res = await fetch(`${gw.baseUrl}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": tenant.endUserKey, "anthropic-version": "2023-06-01", "content-type": "application/json" },
        body: JSON.stringify({ model, max_tokens: 50, stream: true, messages: [{ role: "user", content: "Hi" }] })
      })
      expect(res.headers.get("content-type")).toBe("text/event-stream")
      const frames = (await res.text()).split("\n\n").filter((f) => f !== "")
      for (const frame of frames) {
        const [event, data] = frame.split("\n")
        expect(JSON.parse(data!.slice("data: ".length)).type).toBe(event!.slice("event: ".length))
      }
      expect(frames.map((f) => f.split("\n")[0])).toContain("event: ping")
    }
  })

  it("streams a tool-use conversation with the same content natively and translated", async () => {
    // The same model output from both fakes: a short text, then the tool call.
    oa.setBehavior({ toolPreamble: PREAMBLE })
    anth.reset()
    const turns = async (model: string) => {
      const client = sdk(tenant.endUserKey)
      const question: Anthropic.MessageParam = { role: "user", content: "What is the weather in Paris?" }
      const deltas: Array<string> = []
      const first = client.messages.stream({ model, max_tokens: 100, tools: [weather], messages: [question] })
      first.on("streamEvent", (event) => {
        if (event.type === "content_block_delta") deltas.push(event.delta.type)
      })
      const call = await first.finalMessage()
      const toolUse = call.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use")!
      const answer = await client.messages.stream({
        model,
        max_tokens: 100,
        tools: [weather],
        messages: [question, { role: "assistant", content: call.content }, {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: toolUse.id, content: "sunny" }]
        }]
      }).finalMessage()
      return { call, deltas, answer }
    }
    const native = await turns("claude-native")
    const translated = await turns("claude-translated")
    const toolTurn = oa.requests[oa.requests.length - 1]!.body.messages
    oa.reset()
    const withoutIds = (content: ReadonlyArray<Anthropic.ContentBlock>) =>
      content.map((b) => b.type === "tool_use" ? { type: b.type, name: b.name, input: b.input } : b)
    expect(withoutIds(native.call.content)).toEqual([
      { type: "text", text: PREAMBLE },
      { type: "tool_use", name: "get_weather", input: { city: "Paris" } }
    ])
    const callId = (translated.call.content[1] as Anthropic.ToolUseBlock).id
    expect(withoutIds(translated.call.content)).toEqual(withoutIds(native.call.content))
    expect(translated.call.stop_reason).toBe("tool_use")
    expect(native.call.stop_reason).toBe("tool_use")
    expect(translated.deltas).toEqual(native.deltas)
    expect(native.deltas).toContain("input_json_delta")
    expect(native.answer.content).toEqual([{ type: "text", text: "done: sunny" }])
    expect(translated.answer.content).toEqual(native.answer.content)
    // The translated tool result went upstream as a tool message answering the call.
    expect(toolTurn.slice(-2)).toEqual([
      {
        role: "assistant",
        content: PREAMBLE,
        tool_calls: [{ id: callId, type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }]
      },
      { role: "tool", tool_call_id: callId, content: "sunny" }
    ])
  })

  it("settles a stream the upstream drops (an error event ends it) or the client leaves, natively and translated", async () => {
    for (const [model, fake] of [["claude-native", anth], ["claude-translated", oa]] as const) {
      const user = await endUser(`cut-${model}`)
      const client = sdk(user.endUserKey)
      fake.setBehavior({ dropAfterChunks: 2 })
      const texts: Array<string> = []
      const dropped = client.messages.stream({ model, max_tokens: 100, messages: [{ role: "user", content: "Hi" }] })
      dropped.on("text", (text) => texts.push(text))
      const error = await dropped.finalMessage().then(() => undefined, (e: unknown) => e)
      expect(error).toBeInstanceOf(APIError)
      expect((error as APIError).error).toMatchObject({ type: "error", error: { type: "api_error", code: "upstream_error" } })
      expect(texts.join("")).toBe("Hello from")
      fake.setBehavior({ chunkDelayMs: 200 })
      const left = client.messages.stream({ model, max_tokens: 100, messages: [{ role: "user", content: "Hi" }] })
      const ended = left.done().catch(() => undefined)
      await new Promise<void>((resolve) => left.on("text", () => resolve()))
      left.abort()
      await ended
      const logs = await until(() => logsOf(user.endUserId), (rows) => rows.length === 2)
      fake.reset()
      expect(logs.map((l) => l.status).sort()).toEqual(["error", "interrupted"])
      for (const log of logs) {
        expect(log).toMatchObject({ request_type: "messages", token_count_method: "estimated" })
        expect(log.completion_tokens).toBeGreaterThan(0)
      }
      expect(await usedUsd(user.endUserId)).toBe(await loggedUsd(user.endUserId))
    }
  })

  it("prices prompt-cache tokens at the model's cache prices", async () => {
    anth.setBehavior({ usage: { prompt: 100, completion: 10, cacheRead: 1000, cacheWrite: 200 } })
    try {
      const user = await endUser("cache")
      const message = await sdk(user.endUserKey).messages.create({ model: "claude-native", max_tokens: 100, messages: [{ role: "user", content: "Hi" }] })
      expect(message.usage).toMatchObject({ input_tokens: 100, output_tokens: 10, cache_read_input_tokens: 1000, cache_creation_input_tokens: 200 })
      const streamed = await sdk(user.endUserKey).messages.stream({ model: "claude-native", max_tokens: 100, messages: [{ role: "user", content: "Hi" }] }).finalMessage()
      expect(streamed.usage).toMatchObject({ cache_read_input_tokens: 1000, cache_creation_input_tokens: 200 })
      const logs = await logsOf(user.endUserId)
      // 100 x 1 + 1000 x 0.1 + 200 x 1.25 + 10 x 2 per million tokens.
      for (const log of logs) {
        expect(log).toMatchObject({ prompt_tokens: 1300, completion_tokens: 10, cost: "0.00047", token_count_method: "reported" })
        expect(log.metadata).toMatchObject({ cache_read_input_tokens: 1000, cache_creation_input_tokens: 200 })
      }
      expect(logs.length).toBe(2)
      expect(await usedUsd(user.endUserId)).toBe("0.00094")
    } finally {
      anth.reset()
    }
  })

  it("takes the key as x-api-key or as a Bearer token", async () => {
    for (const as of ["apiKey", "authToken"] as const) {
      const message = await sdk(tenant.endUserKey, as).messages.create({ model: "mock-echo", max_tokens: 20, messages: [{ role: "user", content: as }] })
      expect(message.content).toEqual([{ type: "text", text: `echo: ${as}` }])
    }
  })

  it("resolves a model alias to its model, and refuses an alias of a model the platform cannot use", async () => {
    anth.reset()
    const user = await endUser("alias")
    const message = await sdk(user.endUserKey).messages.create({ model: "claude-sonnet-4-5", max_tokens: 50, messages: [{ role: "user", content: "Hi" }] })
    expect(message.model).toBe("claude-native")
    expect(anth.requests[0]!.body.model).toBe("claude-x")
    const [log] = await logsOf(user.endUserId)
    expect(log.model_slug).toBe("claude-native")
    const error = await sdk(user.endUserKey).messages.create({ model: "claude-opus-4-1", max_tokens: 50, messages: [{ role: "user", content: "Hi" }] })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.NotFoundError)
    expect((error as APIError).error).toMatchObject({ type: "error", error: { type: "not_found_error", code: "model_not_found" } })
  })
})

describe("model aliases (POST /v1/admin/models)", () => {
  it("are listed with the model and name one model only", async () => {
    const models = ok(await gw.call("GET", "/v1/admin/models", { key: gw.adminKey })).body.data
    expect(models.find((m: any) => m.slug === "claude-native").aliases).toEqual(["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"])
    const providers = [{ provider: "mock", provider_model_id: "echo" }]
    // Another model's alias, another model's slug, and a slug that is another model's alias: 422 on aliases.
    for (const body of [
      { slug: "claude-other", aliases: ["claude-sonnet-4-5"], providers },
      { slug: "claude-other", aliases: ["mock-echo"], providers },
      { slug: "claude-haiku-4-5", providers }
    ]) {
      const res = await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body })
      expect(res.status).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param: "aliases" })
    }
    // Upserting a model again with its own aliases is fine.
    ok(await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "claude-translated", aliases: ["claude-haiku-4-5"], providers: [{ provider: "oa", provider_model_id: "gpt-x", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] } }))
    // GET /v1/models/{alias} answers the model.
    const model = ok(await gw.call("GET", "/v1/models/claude-haiku-4-5", { key: tenant.endUserKey })).body
    expect(model.id).toBe("claude-translated")
  })
})

describe("errors in Anthropic's shape", () => {
  const ask = (client: Anthropic, model = "claude-native") =>
    client.messages.create({ model, max_tokens: 50, messages: [{ role: "user", content: "Hi" }] }).then(
      () => expect.fail("the call was expected to fail"),
      (e: unknown) => e as APIError
    )

  it("401 for a bad key, 404 for an unknown model", async () => {
    const bad = await ask(sdk("sk-eu_not-a-real-key"))
    expect(bad).toBeInstanceOf(Anthropic.AuthenticationError)
    expect(bad.error).toMatchObject({ type: "error", error: { type: "authentication_error", code: "invalid_api_key" } })
    const unknown = await ask(sdk(tenant.endUserKey), "no-such-model")
    expect(unknown.status).toBe(404)
    expect(unknown.error).toMatchObject({ error: { type: "not_found_error", code: "model_not_found", param: "model" } })
  })

  it("402 with the gateway's code once the budget is exhausted; nothing more is logged", async () => {
    const user = await endUser("exhausted", { max_usd: 0.00001 })
    const client = sdk(user.endUserKey)
    // The first call is admitted (remaining > 0) and costs more than the budget.
    await client.messages.create({ model: "claude-native", max_tokens: 50, messages: [{ role: "user", content: "Hi" }] })
    const refused = await ask(client)
    expect(refused.status).toBe(402)
    expect(refused.error).toMatchObject({ type: "error", error: { type: "billing_error", code: "budget_exhausted" } })
    expect((await logsOf(user.endUserId)).length).toBe(1)
  })

  it("429 with retry-after when the user's rate limit is reached", async () => {
    const user = await endUser("limited")
    ok(await gw.call("PUT", `/v1/platforms/${tenant.platformId}/end-users/${user.endUserId}/rate-limits`, { key: tenant.platformKey, body: { rpm_limit: 1 } }))
    const client = sdk(user.endUserKey)
    await client.messages.create({ model: "mock-echo", max_tokens: 20, messages: [{ role: "user", content: "one" }] })
    const refused = await ask(client, "mock-echo")
    expect(refused).toBeInstanceOf(Anthropic.RateLimitError)
    expect(refused.error).toMatchObject({ type: "error", error: { type: "rate_limit_error", code: "rate_limit_exceeded" } })
    expect(Number(refused.headers?.get("retry-after"))).toBeGreaterThan(0)
  })

  it("502 when only an anthropic upstream could take the request and the model has none; nothing is billed", async () => {
    const user = await endUser("native-only")
    oa.reset()
    const refused = await sdk(user.endUserKey).messages.create({
      model: "claude-translated",
      max_tokens: 50,
      tools: [{ type: "web_search_20250305", name: "web_search" }],
      messages: [{ role: "user", content: "Search the weather" }]
    }).then(() => expect.fail("the call was expected to fail"), (e: unknown) => e as APIError)
    expect(refused.status).toBe(502)
    expect(refused.error).toMatchObject({ type: "error", error: { type: "api_error", code: "upstream_error" } })
    expect(oa.requests).toEqual([])
    expect(await logsOf(user.endUserId)).toEqual([])
    expect(await usedUsd(user.endUserId)).toBe("0")
  })

  it("422 for a malformed request, naming the field", async () => {
    const res = await gw.call("POST", "/v1/messages", { key: tenant.endUserKey, body: { model: "claude-native", messages: [{ role: "user", content: "Hi" }] } })
    expect(res.status).toBe(422)
    expect(res.body).toMatchObject({ type: "error", error: { type: "invalid_request_error", code: "validation_error", param: "max_tokens" } })
  })
})

describe("POST /v1/messages/count_tokens", () => {
  it("counts with the gateway's tokenizer, bills nothing, and knows the caller's models", async () => {
    const user = await endUser("count")
    const client = sdk(user.endUserKey)
    const small = await client.messages.countTokens({ model: "claude-sonnet-4-5", messages: [{ role: "user", content: "Hi" }] })
    const large = await client.messages.countTokens({
      model: "claude-native",
      system: "You are a meteorologist.",
      tools: [weather],
      messages: [{ role: "user", content: "What is the weather in Paris today, and tomorrow?" }]
    })
    expect(small.input_tokens).toBeGreaterThan(0)
    expect(large.input_tokens).toBeGreaterThan(small.input_tokens)
    const hidden = await client.messages.countTokens({ model: "claude-opus-4-1", messages: [{ role: "user", content: "Hi" }] }).catch((e: unknown) => e)
    expect(hidden).toBeInstanceOf(Anthropic.NotFoundError)
    const bad = await sdk("sk-eu_nope").messages.countTokens({ model: "claude-native", messages: [{ role: "user", content: "Hi" }] }).catch((e: unknown) => e)
    expect(bad).toBeInstanceOf(Anthropic.AuthenticationError)
    expect(await logsOf(user.endUserId)).toEqual([])
    expect(await usedUsd(user.endUserId)).toBe("0")
  })
})

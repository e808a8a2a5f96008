// Inference through real provider fakes: failover, weights, per-attempt timeouts, anthropic and
// openai-responses translation, tool-call round trips with the SDK, upstream drops and client
// aborts billed for emitted tokens, and rate-limit overrides.
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeAnthropic } from "./fakes/FakeAnthropic.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { startFakeOpenAiResponses } from "./fakes/FakeOpenAiResponses.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let a: FakeUpstream
let b: FakeUpstream
let anth: FakeUpstream
let resp: FakeUpstream
let t: { platformId: string; platformKey: string; endUserId: string; endUserKey: string; client: OpenAI }

beforeAll(async () => {
  ;[a, b, anth, resp] = await Promise.all([startFakeOpenAi(), startFakeOpenAi(), startFakeAnthropic(), startFakeOpenAiResponses()])
  gw = await startGateway({ env: { GATEWAY_UPSTREAM_TIMEOUT: "500ms" } })
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "fa", kind: "openai", base_url: a.url })
  await admin("/v1/admin/providers", { slug: "fb", kind: "openai", base_url: b.url })
  await admin("/v1/admin/providers", { slug: "anth", kind: "anthropic", base_url: anth.url })
  await admin("/v1/admin/providers", { slug: "resp", kind: "openai-responses", base_url: resp.url })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 1 }
  await admin("/v1/admin/models", {
    slug: "failover-model",
    providers: [{ provider: "fa", provider_model_id: "a-model", priority: 0, ...price }, { provider: "fb", provider_model_id: "b-model", priority: 1, ...price }]
  })
  await admin("/v1/admin/models", {
    slug: "weighted",
    providers: [{ provider: "fa", provider_model_id: "a-w", weight: 3, ...price }, { provider: "fb", provider_model_id: "b-w", weight: 1, ...price }]
  })
  await admin("/v1/admin/models", { slug: "claude", providers: [{ provider: "anth", provider_model_id: "claude-x", ...price }] })
  await admin("/v1/admin/models", { slug: "resp-model", providers: [{ provider: "resp", provider_model_id: "gpt-r", ...price }] })
  await admin("/v1/admin/models", { slug: "a-only", providers: [{ provider: "fa", provider_model_id: "a-only", ...price }] })
  const p = await createPlatform(gw)
  for (const slug of ["fa", "fb", "anth", "resp"]) {
    await gw.call("PUT", `/v1/platforms/${p.platformId}/provider-keys/${slug}`, { key: p.platformKey, body: { api_key: `sk-${slug}-upstream` } })
  }
  await admin(`/v1/admin/platforms/${p.platformId}/platform-wallet/topup`, { amount_usd: 100 })
  const eu = await createEndUser(gw, p.platformId, p.platformKey, "router-user")
  t = { ...p, ...eu, client: new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }) }
})
afterAll(async () => {
  await gw?.close()
  await Promise.all([a, b, anth, resp].map((f) => f?.close()))
})

const reset = () => [a, b, anth, resp].forEach((f) => f.reset())
/** `go` to the a-only model as the end user, streaming or not; `signal` lets the test leave. */
const callA = (stream: boolean, signal?: AbortSignal) =>
  fetch(`${gw.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${t.endUserKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "a-only", messages: [{ role: "user", content: "go" }], ...(stream ? { stream: true } : {}) }),
    ...(signal === undefined ? {} : { signal })
  })
/** Starts a call to the a-only model and leaves it once the upstream has the request; the log count before. */
const leaveOnceUpstreamHasIt = async (stream: boolean) => {
  const before = (await logs()).length
  const controller = new AbortController()
  const pending = callA(stream, controller.signal).catch(() => "aborted")
  await a.waitFor((f) => f.requests.length === 1, 5000)
  controller.abort()
  expect(await pending).toBe("aborted")
  return before
}
const logs = async () =>
  (await gw.db.pool.query("SELECT * FROM inference_logs WHERE platform_id = $1 ORDER BY created_at", [t.platformId])).rows

describe("routing", () => {
  it("fails over to the next priority on 503, and the upstream gets the platform's own key", async () => {
    reset()
    a.setBehavior({ fail: { status: 503, times: 1 } })
    const res = await t.client.chat.completions.create({ model: "failover-model", messages: [{ role: "user", content: "hi" }] })
    expect(res.choices[0]!.message.content).toBe("Hello from the fake upstream")
    expect(a.requests).toHaveLength(1)
    expect(b.requests).toHaveLength(1)
    expect(b.requests[0]!.body.model).toBe("b-model")
    expect(b.requests[0]!.headers.authorization).toBe("Bearer sk-fb-upstream")
    const last = (await logs()).at(-1)
    expect(last).toMatchObject({ provider_model_id: "b-model", status: "success" })
  })

  it("fails over on a hang (per-attempt timeout) and answers 504 when every candidate hangs", async () => {
    reset()
    a.setBehavior({ hang: true })
    const ok = await t.client.chat.completions.create({ model: "failover-model", messages: [{ role: "user", content: "hi" }] })
    expect(ok.model).toBe("failover-model")
    b.setBehavior({ hang: true })
    const res = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: { model: "failover-model", messages: [{ role: "user", content: "hi" }] }
    })
    expect(res.status).toBe(504)
    expect(res.body.error.code).toBe("upstream_timeout")
  })

  it("a stream fails over before its first byte: after a 503 and after a hang, it comes whole from the next candidate", async () => {
    for (const behavior of [{ fail: { status: 503, times: 1 } }, { hang: true }]) {
      reset()
      a.setBehavior(behavior)
      const before = (await logs()).length
      const stream = await t.client.chat.completions.create({ model: "failover-model", messages: [{ role: "user", content: "hi" }], stream: true })
      let text = ""
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? ""
      expect(text).toBe("Hello from the fake upstream")
      expect(a.requests).toHaveLength(1)
      expect(b.requests).toHaveLength(1)
      expect(b.requests[0]!.body.stream).toBe(true)
      await expect.poll(async () => (await logs()).length).toBe(before + 1)
      expect((await logs()).at(-1)).toMatchObject({ provider_model_id: "b-model", status: "success" })
    }
  })

  it("does not fail over on a 400; answers 502 upstream_error and bills nothing", async () => {
    reset()
    const before = (await logs()).length
    a.setBehavior({ fail: { status: 400, times: 5, message: "bad thing" } })
    const res = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: { model: "failover-model", messages: [{ role: "user", content: "hi" }] }
    })
    expect(res.status).toBe(502)
    expect(res.body.error).toMatchObject({ code: "upstream_error" })
    expect(b.requests).toHaveLength(0)
    expect((await logs()).length).toBe(before)
  })

  it("honours weights within a priority (about 3:1 over 200 calls)", async () => {
    reset()
    await Promise.all(Array.from({ length: 200 }, () =>
      t.client.chat.completions.create({ model: "weighted", messages: [{ role: "user", content: "w" }] })
    ))
    const share = a.requests.length / 200
    expect(a.requests.length + b.requests.length).toBe(200)
    expect(share).toBeGreaterThan(0.62)
    expect(share).toBeLessThan(0.88)
  })
})

describe("translation through the gateway", () => {
  it("anthropic: a tool-call round trip and a stream, with the openai SDK", async () => {
    reset()
    const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }]
    const first = await t.client.chat.completions.create({
      model: "claude",
      messages: [{ role: "system", content: "be brief" }, { role: "user", content: "weather?" }],
      tools
    })
    const call = first.choices[0]!.message.tool_calls![0]!
    expect(first.choices[0]!.finish_reason).toBe("tool_calls")
    expect(call.type === "function" && call.function).toMatchObject({ name: "get_weather", arguments: "{\"city\":\"Paris\"}" })
    expect(anth.requests[0]!.body.system).toBe("be brief")
    const second = await t.client.chat.completions.create({
      model: "claude",
      messages: [
        { role: "user", content: "weather?" },
        first.choices[0]!.message,
        { role: "tool", tool_call_id: call.id, content: "sunny" }
      ],
      tools
    })
    expect(second.choices[0]!.message.content).toBe("done: sunny")
    const sent = anth.requests[1]!.body.messages
    expect(JSON.stringify(sent)).toContain("tool_result")

    const stream = await t.client.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "hi" }], stream: true })
    let text = ""
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? ""
    expect(text).toBe("Hello from the fake upstream")
  })

  it("openai: the SDK's tool-call round trip passes through", async () => {
    reset()
    const tools = [{ type: "function" as const, function: { name: "lookup", parameters: { type: "object" } } }]
    const first = await t.client.chat.completions.create({ model: "a-only", messages: [{ role: "user", content: "find" }], tools })
    expect(first.choices[0]!.finish_reason).toBe("tool_calls")
    const call = first.choices[0]!.message.tool_calls![0]!
    const second = await t.client.chat.completions.create({
      model: "a-only",
      messages: [{ role: "user", content: "find" }, first.choices[0]!.message, { role: "tool", tool_call_id: call.id, content: "42" }],
      tools
    })
    expect(second.choices[0]!.message.content).toBe("done: 42")
    expect(a.requests[1]!.body.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: call.id })
  })

  it("openai-responses: max_tokens below 16 is 422 before any upstream call; otherwise translated", async () => {
    reset()
    const small = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: { model: "resp-model", messages: [{ role: "user", content: "hi" }], max_tokens: 10 }
    })
    expect(small.status).toBe(422)
    expect(small.body.error.code).toBe("max_tokens_too_small")
    expect(resp.requests).toHaveLength(0)
    const ok = await t.client.chat.completions.create({ model: "resp-model", messages: [{ role: "user", content: "hi" }], max_tokens: 64 })
    expect(ok.choices[0]!.message.content).toBe("Hello from the fake upstream")
    expect(resp.requests[0]!.path).toContain("/responses")
    expect(resp.requests[0]!.body).toMatchObject({ model: "gpt-r", max_output_tokens: 64 })
  })
})

describe("settled streams", () => {
  // The settlement runs in each adapter's own finalizer (UpstreamCall.onEnd): every kind must run it.
  it.each([["openai", "a-only"], ["anthropic", "claude"], ["openai-responses", "resp-model"]])(
    "%s: a finished stream is settled once, with the usage the provider reported",
    async (_kind, model) => {
      reset()
      const before = (await logs()).length
      const stream = await t.client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], stream: true })
      let text = ""
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? ""
      expect(text).toBe("Hello from the fake upstream")
      await expect.poll(async () => (await logs()).length).toBe(before + 1)
      const row = (await logs()).at(-1)
      expect(row).toMatchObject({ model_slug: model, status: "success", token_count_method: "reported", billing_status: "billed" })
      expect(row.completion_tokens).toBeGreaterThan(0)
    }
  )
})

describe("interrupted streams", () => {
  it("an upstream drop ends the stream with finish_reason stop and no [DONE]; emitted tokens are billed", async () => {
    reset()
    a.setBehavior({ reply: "one two three four five six", dropAfterChunks: 2 })
    const before = (await logs()).length
    const res = await callA(true)
    const text = await res.text()
    expect(res.status).toBe(200)
    expect(text).not.toContain("[DONE]")
    const chunks = text.split("\n\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)))
    expect(chunks.at(-1).choices[0].finish_reason).toBe("stop")
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("one two")
    await expect.poll(async () => (await logs()).length).toBe(before + 1)
    const row = (await logs()).at(-1)
    expect(row).toMatchObject({ status: "error", token_count_method: "estimated", billing_status: "billed" })
    expect(row.completion_tokens).toBe(2)
  })

  it("a client disconnect interrupts the upstream call and bills the emitted tokens", async () => {
    reset()
    a.setBehavior({ reply: Array.from({ length: 40 }, (_, i) => `w${i}`).join(" "), chunkDelayMs: 50 })
    const before = (await logs()).length
    const controller = new AbortController()
    const res = await callA(true, controller.signal)
    const reader = res.body!.getReader()
    let received = ""
    while (!received.includes("w2")) received += new TextDecoder().decode((await reader.read()).value)
    controller.abort()
    await a.waitFor((f) => f.requests[0]?.clientClosed === true, 5000)
    await expect.poll(async () => (await logs()).length, { timeout: 5000 }).toBe(before + 1)
    const row = (await logs()).at(-1)
    expect(row).toMatchObject({ status: "interrupted", token_count_method: "estimated", billing_status: "billed" })
    expect(row.completion_tokens).toBeGreaterThan(0)
    expect(row.completion_tokens).toBeLessThan(40)
  })

  it("a client disconnect settles at once, even while the upstream is silent", async () => {
    reset()
    // The next chunk would come only after 3 s: the disconnect must not wait for it.
    a.setBehavior({ reply: "one two three", chunkDelayMs: 3000 })
    const before = (await logs()).length
    const controller = new AbortController()
    const res = await callA(true, controller.signal)
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    await reader.read() // the role chunk
    controller.abort()
    await a.waitFor((f) => f.requests[0]?.clientClosed === true, 1500)
    await expect.poll(async () => (await logs()).length, { timeout: 1500 }).toBe(before + 1)
    expect((await logs()).at(-1)).toMatchObject({ status: "interrupted" })
  })

  it("a stream whose client leaves before the first byte is billed its prompt, as interrupted", async () => {
    reset()
    a.setBehavior({ responseDelayMs: 3000 }) // the status line would come after 3 s
    const before = await leaveOnceUpstreamHasIt(true)
    await a.waitFor((f) => f.requests[0]?.clientClosed === true, 1500)
    await expect.poll(async () => (await logs()).length, { timeout: 1500 }).toBe(before + 1)
    const row = (await logs()).at(-1)
    expect(row).toMatchObject({ status: "interrupted", token_count_method: "estimated", billing_status: "billed", completion_tokens: 0 })
    expect(row.prompt_tokens).toBeGreaterThan(0)
  })

  it("a non-streaming call whose client leaves still gets its answer from upstream and is billed", async () => {
    reset()
    a.setBehavior({ responseDelayMs: 400 })
    const before = await leaveOnceUpstreamHasIt(false)
    await expect.poll(async () => (await logs()).length, { timeout: 5000 }).toBe(before + 1)
    expect((await logs()).at(-1)).toMatchObject({ status: "success", billing_status: "billed" })
    expect(a.requests[0]!.clientClosed).toBe(false)
  })
})

describe("rate limits", () => {
  it("override endpoints and /v1/me/rate-limits: explicit > default > none", async () => {
    const me = () => gw.call("GET", "/v1/me/rate-limits", { key: t.endUserKey })
    expect((await me()).body).toEqual({ rpm_limit: null, tpm_limit: null, rpd_limit: null, resolution: "none" })
    await gw.call("PATCH", `/v1/platforms/${t.platformId}`, { key: t.platformKey, body: { settings: { default_rate_limits: { rpm_limit: 100 } } } })
    expect((await me()).body).toEqual({ rpm_limit: 100, tpm_limit: null, rpd_limit: null, resolution: "default" })
    const put = await gw.call("PUT", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/rate-limits`, {
      key: t.platformKey,
      body: { rpm_limit: 2, tpm_limit: 100000 }
    })
    expect(put.body).toEqual({ rpm_limit: 2, tpm_limit: 100000, rpd_limit: null, resolution: "explicit" })
    expect((await me()).body.resolution).toBe("explicit")
    const ask = () => gw.call("POST", "/v1/chat/completions", { key: t.endUserKey, body: { model: "a-only", messages: [{ role: "user", content: "x" }] } })
    reset()
    expect((await ask()).status).toBe(200)
    expect((await ask()).status).toBe(200)
    const third = await ask()
    expect(third.status).toBe(429)
    expect(a.requests).toHaveLength(2)
    expect((await gw.call("DELETE", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/rate-limits`, { key: t.platformKey })).status).toBe(204)
    expect((await me()).body.resolution).toBe("default")
    expect((await gw.call("GET", "/v1/me/rate-limits", { key: t.platformKey })).status).toBe(403)
    const other = await createPlatform(gw)
    expect((await gw.call("PUT", `/v1/platforms/${other.platformId}/end-users/${t.endUserId}/rate-limits`, { key: other.platformKey, body: {} })).status).toBe(404)
    expect((await gw.call("PUT", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/rate-limits`, { key: t.platformKey, body: { rpm_limit: 0 } })).status).toBe(422)
  })
})

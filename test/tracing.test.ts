// OpenTelemetry: one server span per request with HTTP attributes and the tenant ids; W3C trace
// context continued from clients, to upstreams and to webhook receivers.
import { NodeSdk } from "@effect/opentelemetry"
import { SpanKind, SpanStatusCode } from "@opentelemetry/api"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Webhook } from "standardwebhooks"
import { afterAll, beforeAll, expect, it } from "vitest"
import { startFakeCapabilityProvider } from "./fakes/FakeCapabilityProvider.js"
import { startReceiver } from "./fakes/WebhookReceiver.js"
import { createEndUser, createPlatform, type Gateway, provisionOpenAiModel, startGateway, upsertCapability } from "./support/Gateway.js"

const exporter = new InMemorySpanExporter()
let gw: Gateway
beforeAll(async () => {
  gw = await startGateway({
    env: { GATEWAY_ALLOW_PRIVATE_URLS: "true" }, // the webhook receiver listens on 127.0.0.1
    tracing: NodeSdk.layer(() => ({ resource: { serviceName: "gateway-test" }, spanProcessor: new SimpleSpanProcessor(exporter) }))
  })
})
afterAll(async () => {
  await gw?.close()
})

const serverSpans = () => exporter.getFinishedSpans().filter((s) => s.name.startsWith("http.server"))

it("tags the request span with platform.id, end_user.id and HTTP attributes; never the key", async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  const eu = await createEndUser(gw, platformId, platformKey, "traced")
  exporter.reset()

  const res = await gw.call("GET", `/v1/platforms/${platformId}/end-users/${eu.endUserId}`, { key: platformKey })
  expect(res.status).toBe(200)
  await gw.call("GET", `/v1/platforms/${platformId}`, { key: eu.endUserKey })

  await expect.poll(() => serverSpans().length).toBeGreaterThanOrEqual(2)
  const [platformSpan, endUserSpan] = serverSpans()
  expect(platformSpan!.name).toBe("http.server GET")
  expect(platformSpan!.attributes["platform.id"]).toBe(platformId)
  expect(platformSpan!.attributes["http.request.method"]).toBe("GET")
  expect(platformSpan!.attributes["http.response.status_code"]).toBe(200)
  expect(String(platformSpan!.attributes["url.path"])).toContain(`/end-users/${eu.endUserId}`)
  expect(endUserSpan!.attributes["end_user.id"]).toBe(eu.endUserId)
  expect(endUserSpan!.attributes["http.response.status_code"]).toBe(403)

  const everything = JSON.stringify(exporter.getFinishedSpans().map((s) => s.attributes))
  expect(everything).not.toContain(platformKey)
  expect(everything).not.toContain(eu.endUserKey)
})

it("traces inference: admission with one span per pre-flight check, then the model call's GenAI span `chat {model}` over the upstream attempt and the settlement", async () => {
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] }
  })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
  const eu = await createEndUser(gw, platformId, platformKey, "traced-chat")
  exporter.reset()
  const res = await gw.call("POST", "/v1/chat/completions", {
    key: eu.endUserKey,
    body: { model: "mock-echo", messages: [{ role: "user", content: "secret prompt text" }] }
  })
  expect(res.status).toBe(200)
  await expect.poll(() => exporter.getFinishedSpans().some((s) => s.name.startsWith("http.server"))).toBe(true)
  const spans = exporter.getFinishedSpans()
  const byName = (name: string) => spans.find((s) => s.name === name)!
  const server = spans.find((s) => s.name.startsWith("http.server"))!
  const admit = byName("Inference.admit")
  const childrenOf = (parent: typeof admit) =>
    spans.filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId).map((s) => s.name)
  expect(childrenOf(admit)).toEqual(expect.arrayContaining(["preflight.model", "preflight.rate_limit", "preflight.suspension", "preflight.budget", "preflight.wallet"]))
  expect(admit.attributes).toMatchObject({ "gen_ai.operation.name": "chat", "gen_ai.request.model": "mock-echo", "end_user.id": eu.endUserId })
  // The model call, named per the OpenTelemetry GenAI conventions, a client span with their attributes.
  const call = byName("chat mock-echo")
  expect(call.kind).toBe(SpanKind.CLIENT)
  expect(call.attributes).toMatchObject({
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "mock-echo",
    "gen_ai.provider.name": "mock",
    "gen_ai.system": "mock",
    "gateway.provider": "mock",
    "gen_ai.response.model": "echo-1",
    "gen_ai.response.id": res.body.id,
    "gen_ai.usage.input_tokens": 5,
    "gen_ai.usage.output_tokens": 4,
    "gen_ai.response.finish_reasons": ["stop"],
    "server.address": "mock.invalid",
    "server.port": 80,
    "gateway.cost_usd": "0.000009",
    "gateway.request_type": "chat.completion",
    "platform.id": platformId,
    "end_user.id": eu.endUserId
  })
  expect(call.parentSpanContext?.spanId).toBe(server.spanContext().spanId)
  expect(childrenOf(call)).toEqual(expect.arrayContaining(["ProviderRouter.attempt", "Inference.settle"]))
  const attempt = byName("ProviderRouter.attempt")
  expect(attempt.attributes).toMatchObject({ "gen_ai.provider.name": "mock", "gateway.provider": "mock", "gen_ai.request.model": "echo-1" })
  // Only the model call's span is named for the conventions (tools count one span per call).
  expect(spans.filter((s) => s.attributes["gen_ai.usage.input_tokens"] !== undefined).map((s) => s.name)).toEqual(["chat mock-echo"])
  // Every span belongs to the request's trace, under the server span.
  expect(new Set(spans.filter((s) => s.spanContext().traceId === server.spanContext().traceId).map((s) => s.name)))
    .toEqual(expect.objectContaining({ size: expect.any(Number) }))
  expect(admit.spanContext().traceId).toBe(server.spanContext().traceId)
  expect(JSON.stringify(spans.map((s) => s.attributes))).not.toContain("secret prompt text")
})

it("continues the client's W3C trace, sends traceparent upstream, and gives a stream one `chat {model}` span to its end with its first token", async () => {
  const { startFakeOpenAi } = await import("./fakes/FakeOpenAi.js")
  const upstream = await startFakeOpenAi()
  try {
    const { platformId, platformKey } = await provisionOpenAiModel(gw, upstream.url, { provider: "fake", model: "fake-model" })
    const eu = await createEndUser(gw, platformId, platformKey, "traced-stream")
    exporter.reset()
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
    const res = await fetch(`${gw.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${eu.endUserKey}`,
        "content-type": "application/json",
        traceparent: `00-${traceId}-00f067aa0ba902b7-01`
      },
      body: JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "hi" }], stream: true })
    })
    await res.text()
    await expect.poll(() => exporter.getFinishedSpans().some((s) => s.name === "chat fake-model")).toBe(true)
    const spans = exporter.getFinishedSpans()
    const server = spans.find((s) => s.name.startsWith("http.server"))!
    expect(server.spanContext().traceId).toBe(traceId)
    const sent = String(upstream.requests[0]!.headers.traceparent)
    expect(sent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    const attempt = spans.find((s) => s.name === "ProviderRouter.attempt")!
    expect(sent.split("-")[2]).toBe(attempt.spanContext().spanId)
    // The stream's GenAI span: from routing to the stream's settlement, parent of both.
    const call = spans.find((s) => s.name === "chat fake-model")!
    expect(call.kind).toBe(SpanKind.CLIENT)
    expect(call.spanContext().traceId).toBe(traceId)
    expect(call.parentSpanContext?.spanId).toBe(server.spanContext().spanId)
    expect(attempt.parentSpanContext?.spanId).toBe(call.spanContext().spanId)
    const settle = spans.find((s) => s.name === "Inference.settle")!
    expect(settle.parentSpanContext?.spanId).toBe(call.spanContext().spanId)
    expect(call.attributes).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "fake-model",
      "gen_ai.provider.name": "openai",
      "gateway.provider": "fake",
      "gen_ai.response.finish_reasons": ["stop"],
      "server.address": "127.0.0.1",
      "server.port": Number(new URL(upstream.url).port)
    })
    expect(call.attributes["gen_ai.usage.output_tokens"]).toBeGreaterThan(0)
    expect(call.events.map((e) => e.name)).toContain("gen_ai.first_token")
    expect(Number(call.attributes["gen_ai.server.time_to_first_token_ms"])).toBeGreaterThanOrEqual(0)
  } finally {
    await upstream.close()
  }
})

it("a call no upstream serves ends its `chat {model}` span as an error with the conventions' error.type", async () => {
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "down", kind: "openai", base_url: "http://127.0.0.1:1" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "down-model", providers: [{ provider: "down", provider_model_id: "d-1", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] }
  })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/down`, { key: platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
  const eu = await createEndUser(gw, platformId, platformKey, "traced-down")
  exporter.reset()
  for (const stream of [false, true]) {
    const res = await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "down-model", messages: [{ role: "user", content: "hi" }], stream } })
    expect(res.status).toBe(502)
  }
  await expect.poll(() => exporter.getFinishedSpans().filter((s) => s.name === "chat down-model").length).toBe(2)
  for (const call of exporter.getFinishedSpans().filter((s) => s.name === "chat down-model")) {
    expect(call.status.code).toBe(SpanStatusCode.ERROR)
    expect(call.attributes).toMatchObject({ "error.type": "upstream_error", "gen_ai.request.model": "down-model", "platform.id": platformId })
    expect(call.attributes["gen_ai.usage.input_tokens"]).toBeUndefined()
  }
})

it("delivers a budget webhook in the trace of the request that caused it, with a traceparent naming the delivery span", async () => {
  const receiver = await startReceiver()
  try {
    const { platformId, platformKey } = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "traced-webhook")
    const registered = await gw.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, {
      key: platformKey,
      body: { url: receiver.url }
    })
    expect(registered.status).toBe(201)
    const secret = registered.body.secret as string
    receiver.secret = secret
    const budget = `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`
    expect((await gw.call("POST", budget, { key: platformKey, body: { max_usd: 10 } })).status).toBe(201)
    exporter.reset()

    const topup = await gw.call("POST", `${budget}/topup`, { key: platformKey, body: { amount_usd: 1 } })
    expect(topup.status).toBe(200)
    await receiver.waitFor((r) => r.events.length === 1)
    await expect.poll(() => exporter.getFinishedSpans().some((s) => s.name === "WebhookOutbox.deliver")).toBe(true)

    const spans = exporter.getFinishedSpans()
    const request = spans.find((s) => s.name === "http.server POST" && String(s.attributes["url.path"]).endsWith("/budget/topup"))!
    const traceId = request.spanContext().traceId
    const enqueue = spans.find((s) => s.name === "WebhookOutbox.enqueue")!
    expect(enqueue.spanContext().traceId).toBe(traceId)
    const deliver = spans.find((s) => s.name === "WebhookOutbox.deliver")!
    expect(deliver.spanContext().traceId).toBe(traceId)
    expect(deliver.parentSpanContext?.spanId).toBe(enqueue.spanContext().spanId)
    expect(deliver.attributes).toMatchObject({
      "webhook.event_type": "budget.topped_up",
      "webhook.event_id": `${topup.body.transaction.id}:budget.topped_up`,
      "webhook.attempt": 1,
      "webhook.outcome": "delivered",
      "http.response.status_code": 200
    })

    // The receiver can join the trace: the header names the delivery span.
    const [event] = receiver.events
    expect(event!.headers.traceparent).toBe(`00-${traceId}-${deliver.spanContext().spanId}-01`)
    // The signature still verifies (the fake already did; check once more with the raw headers).
    expect(receiver.invalid).toEqual([])
    expect(() => new Webhook(secret).verify(event!.rawBody, event!.headers as Record<string, string>)).not.toThrow()

    // Neither the signing secret nor the receiver's URL ends up in any span.
    const everything = JSON.stringify(exporter.getFinishedSpans().map((s) => s.attributes))
    expect(everything).not.toContain(secret)
    expect(everything).not.toContain(secret.slice("whsec_".length))
    expect(everything).not.toContain(receiver.url)
  } finally {
    await receiver.close()
  }
})

it("traces a capability run: the run span (capability.uid) with its reserve and settle, in the request's trace", async () => {
  const provider = await startFakeCapabilityProvider()
  try {
    const uid = await upsertCapability(gw, { slug: "traced-cap" }, { slug: "traced-ok", url: `${provider.url}/ok` })
    const { platformId, platformKey } = await createPlatform(gw)
    await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
    await gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body: { settings: { capabilities: { enabled: true } } } })
    const eu = await createEndUser(gw, platformId, platformKey, "traced-capability")
    await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } })
    exporter.reset()
    const res = await gw.call("POST", "/v1/capabilities/run", { key: eu.endUserKey, body: { capability: uid, input: { q: "traced" } } })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ ok: true, final_state: "billed" })
    await expect.poll(() => exporter.getFinishedSpans().some((s) => s.name.startsWith("http.server"))).toBe(true)
    const spans = exporter.getFinishedSpans()
    const run = spans.find((s) => s.name === "Capabilities.run")!
    expect(run.attributes["capability.uid"]).toBe(uid)
    const children = spans.filter((s) => s.parentSpanContext?.spanId === run.spanContext().spanId).map((s) => s.name)
    expect(children).toEqual(expect.arrayContaining(["Capabilities.reserve", "Capabilities.settle"]))
    const server = spans.find((s) => s.name.startsWith("http.server"))!
    expect(run.spanContext().traceId).toBe(server.spanContext().traceId)
  } finally {
    await provider.close()
  }
})

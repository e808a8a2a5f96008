// No secret ever reaches logs or spans: every log line (with its cause) and every span attribute
// captured while keys, provider keys, webhook secrets and OAuth-free flows are used and while
// errors are logged is scanned for the raw values.
import { NodeSdk } from "@effect/opentelemetry"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Cause, Layer, Logger } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const lines: Array<string> = []
const capture = Logger.make(({ cause, message }) => {
  lines.push(`${JSON.stringify(message)} ${Cause.isEmpty(cause) ? "" : Cause.pretty(cause, { renderErrorCause: true })}`)
})
const spans = new InMemorySpanExporter()
let gw: Gateway
let upstream: FakeUpstream

beforeAll(async () => {
  upstream = await startFakeOpenAi()
  // A config file makes the gateway log at start, proving the capture sees the gateway's logs.
  const dir = mkdtempSync(join(tmpdir(), "secret-scan-"))
  writeFileSync(join(dir, "gateway.json"), JSON.stringify({ providers: [], models: [] }))
  gw = await startGateway({
    env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_CONFIG: join(dir, "gateway.json") },
    tracing: Layer.mergeAll(
      Logger.replace(Logger.defaultLogger, capture),
      NodeSdk.layer(() => ({ resource: { serviceName: "secret-scan" }, spanProcessor: new SimpleSpanProcessor(spans) }))
    )
  })
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

it("keys, provider keys and webhook secrets appear in no log line and no span", async () => {
  const providerKey = "sk-provider-SECRET-0123456789abcdef"
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "up", kind: "openai", base_url: upstream.url } })
  await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "m", providers: [{ provider: "up", provider_model_id: "x", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] } })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/up`, { key: platformKey, body: { api_key: providerKey } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
  const eu = await createEndUser(gw, platformId, platformKey, "scanned")
  const hook = await gw.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, { key: platformKey, body: { url: "http://127.0.0.1:9/hook" } })
  const webhookSecret = hook.body.secret as string
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 1 } })
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget/topup`, { key: platformKey, body: { amount_usd: 1 } })

  // Successful and failing upstream calls, refused keys, malformed requests: all get logged or traced.
  expect((await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "m", messages: [{ role: "user", content: "hi" }] } })).status).toBe(200)
  expect(upstream.requests[0]!.headers.authorization).toBe(`Bearer ${providerKey}`) // it was really used
  upstream.setBehavior({ fail: { status: 500, times: 5, message: "boom" } })
  expect((await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "m", messages: [{ role: "user", content: "hi" }] } })).status).toBe(502)
  upstream.setBehavior({ dropAfterChunks: 1, reply: "a b c" })
  await fetch(`${gw.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${eu.endUserKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] })
  }).then((r) => r.text())
  upstream.reset()
  await gw.call("GET", `/v1/platforms/${platformId}`, { key: `${eu.endUserKey}x` })
  await gw.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, rawBody: "{", headers: { "content-type": "application/json" } })
  // The webhook dispatcher fails against the closed port and logs its attempt.
  await new Promise((r) => setTimeout(r, 800))

  expect(lines.some((l) => l.includes("upstream dropped mid-stream"))).toBe(true) // request-time logs are seen
  const everything = [
    ...lines,
    ...spans.getFinishedSpans().map((s) => JSON.stringify({ name: s.name, attributes: s.attributes, events: s.events }))
  ].join("\n")
  for (const secret of [gw.adminKey, platformKey, eu.endUserKey, providerKey, webhookSecret, webhookSecret.slice(6)]) {
    expect(everything.includes(secret), `secret ${secret.slice(0, 10)}... leaked`).toBe(false)
  }
})

// Metrics: a metric reader on the gateway's OpenTelemetry layer receives the Effect metrics:
// settled requests, tokens, cost and duration by model, pre-flight rejections by code, webhook
// delivery outcomes, and the database pool's usage.
import { NodeSdk } from "@effect/opentelemetry"
import { AggregationTemporality, DataPointType, InMemoryMetricExporter, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { afterAll, beforeAll, expect, it } from "vitest"
import { startReceiver } from "./fakes/WebhookReceiver.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 100 })
const POOL_SIZE = 6
let gw: Gateway
beforeAll(async () => {
  gw = await startGateway({
    env: { DATABASE_POOL_SIZE: String(POOL_SIZE), GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,100ms" },
    tracing: NodeSdk.layer(() => ({
      resource: { serviceName: "gateway-metrics-test" },
      spanProcessor: new SimpleSpanProcessor(new InMemorySpanExporter()),
      metricReader: reader
    }))
  })
})
afterAll(async () => {
  await gw?.close()
})

/** Data points of the latest export (cumulative, so it holds the totals). */
const points = (name: string) =>
  (metrics.getMetrics().slice(-1)).flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))
    .filter((m) => m.descriptor.name === name)
    .flatMap((m) => m.dataPoints as Array<{ attributes: Record<string, unknown>; value: unknown }>)

it("exports request, token, cost and rejection metrics", async () => {
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "metric-model", providers: [{ provider: "mock", provider_model_id: "m", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] }
  })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
  const eu = await createEndUser(gw, platformId, platformKey, "metered")
  for (let i = 0; i < 3; i++) {
    const res = await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "metric-model", messages: [{ role: "user", content: "one two three four" }] } })
    expect(res.status).toBe(200)
  }
  const refused = await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "no-such-model", messages: [{ role: "user", content: "x" }] } })
  expect(refused.status).toBe(404)

  await expect.poll(() => points("gateway.inference.requests").length, { timeout: 5000 }).toBeGreaterThan(0)
  await expect.poll(() =>
    points("gateway.inference.requests").find((p) => p.attributes.operation === "chat" && p.attributes.status === "success")?.value, { timeout: 5000 }
  ).toBeGreaterThanOrEqual(3)
  const input = points("gen_ai.client.token.usage").find((p) => p.attributes["gen_ai.token.type"] === "input" && p.attributes["gen_ai.request.model"] === "metric-model")
  expect(Number(input?.value)).toBeGreaterThanOrEqual(15) // 3 calls x ceil(18 chars / 4) = 5 prompt tokens
  await expect.poll(() => points("gateway.preflight.rejections").find((p) => p.attributes.code === "model_not_found")?.value, { timeout: 5000 })
    .toBeGreaterThanOrEqual(1)
  expect(points("gateway.cost_usd").some((p) => p.attributes["gen_ai.request.model"] === "metric-model")).toBe(true)
  expect(points("gateway.inference.duration_ms").length).toBeGreaterThan(0)
})

it("serves repeated keys from the auth cache once the invalidation channel is proven live", async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  // The first channel check ends about a second after start; wait past it so a broken probe
  // (the cache switched off) would show.
  await new Promise((resolve) => setTimeout(resolve, 2500))
  const total = (source: string) =>
    Number(points("gateway.auth.lookups").find((p) => p.attributes.source === source)?.value ?? 0)
  await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })
  await new Promise((resolve) => setTimeout(resolve, 300))
  const before = { cache: total("cache"), database: total("database") }
  for (let i = 0; i < 5; i++) {
    expect((await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })).status).toBe(200)
  }
  await expect.poll(() => total("cache") - before.cache, { timeout: 5000 }).toBeGreaterThanOrEqual(5)
  expect(total("database")).toBe(before.database)
})

it("exports the database pool's usage: connections by state, the configured maximum, waiting requests", async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  expect((await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })).status).toBe(200)
  const pool = "model-gateway"
  const gauge = (name: string, state?: string) =>
    points(name).find((p) =>
      p.attributes["db.client.connection.pool.name"] === pool &&
      (state === undefined || p.attributes["db.client.connection.state"] === state)
    )?.value as number | undefined
  // Sampled every second, exported every 100 ms: the pool has opened connections by now.
  await expect.poll(() => (gauge("db.client.connection.count", "idle") ?? 0) + (gauge("db.client.connection.count", "used") ?? 0), {
    timeout: 5000
  }).toBeGreaterThanOrEqual(1)
  const idle = gauge("db.client.connection.count", "idle")!
  const used = gauge("db.client.connection.count", "used")!
  expect(idle).toBeGreaterThanOrEqual(0)
  expect(used).toBeGreaterThanOrEqual(0)
  expect(idle + used).toBeLessThanOrEqual(POOL_SIZE)
  expect(gauge("db.client.connection.max")).toBe(POOL_SIZE)
  expect(gauge("db.client.connection.pending_requests")).toBeGreaterThanOrEqual(0)
  const count = metrics.getMetrics().slice(-1).flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))
    .find((m) => m.descriptor.name === "db.client.connection.count")!
  expect(count.dataPointType).toBe(DataPointType.GAUGE)
})

it("exports webhook delivery outcomes: delivered, retry and failed", async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  const eu = await createEndUser(gw, platformId, platformKey, "webhooked")
  const up = await startReceiver()
  const down = await startReceiver()
  await down.close() // nobody listens there: a retry, then failed (schedule of two attempts)
  const outcome = (name: string) => Number(points("gateway.webhook.deliveries").find((p) => p.attributes.outcome === name)?.value ?? 0)
  const before = { delivered: outcome("delivered"), retry: outcome("retry"), failed: outcome("failed") }
  for (const r of [up, down]) {
    const res = await gw.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, { key: platformKey, body: { url: r.url } })
    expect(res.status).toBe(201)
    r.secret = res.body.secret
  }
  const budget = `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`
  expect((await gw.call("POST", budget, { key: platformKey, body: { max_usd: 5 } })).status).toBe(201)
  expect((await gw.call("POST", `${budget}/topup`, { key: platformKey, body: { amount_usd: 1 } })).status).toBe(200)
  await up.waitFor((r) => r.events.length === 1)
  await expect.poll(() => outcome("failed") - before.failed, { timeout: 5000 }).toBe(1)
  expect(outcome("retry") - before.retry).toBe(1)
  expect(outcome("delivered") - before.delivered).toBe(1)
  await up.close()
})

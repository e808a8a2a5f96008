// Metrics: a metric reader on the gateway's OpenTelemetry layer (its own metric export, as in
// production) receives the Effect metrics: settled requests, the GenAI conventions' histograms
// (tokens, duration, time to first token, time per output token), cost by model and platform,
// pre-flight rejections by code, webhook delivery outcomes, and the database pool's usage; and the
// Grafana dashboard asks only for metrics the gateway exports.
import { NodeSdk } from "@effect/opentelemetry"
import {
  AggregationTemporality,
  DataPointType,
  type Histogram,
  InMemoryMetricExporter,
  type MetricData,
  PeriodicExportingMetricReader
} from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Layer } from "effect"
import { readFileSync } from "node:fs"
import OpenAI from "openai"
import { afterAll, beforeAll, expect, it } from "vitest"
import { metricExportLayer } from "../src/MetricExport.js"
import { startReceiver } from "./fakes/WebhookReceiver.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 100 })
const POOL_SIZE = 6
let gw: Gateway
beforeAll(async () => {
  gw = await startGateway({
    env: { DATABASE_POOL_SIZE: String(POOL_SIZE), GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,100ms" },
    tracing: metricExportLayer(() => reader).pipe(Layer.provideMerge(NodeSdk.layer(() => ({
      resource: { serviceName: "gateway-metrics-test" },
      spanProcessor: new SimpleSpanProcessor(new InMemorySpanExporter())
    }))))
  })
})
afterAll(async () => {
  await gw?.close()
})

/** The metrics of the latest export (cumulative, so it holds the totals). */
const exported = (): Array<MetricData> => metrics.getMetrics().slice(-1).flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))

/** Data points of the latest export. */
const points = (name: string) =>
  exported().filter((m) => m.descriptor.name === name)
    .flatMap((m) => m.dataPoints as Array<{ attributes: Record<string, unknown>; value: unknown }>)

/** A histogram's data points whose attributes include `attributes`. */
const histogramPoints = (name: string, attributes: Record<string, string>) =>
  points(name).filter((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v)) as Array<{ attributes: Record<string, unknown>; value: Histogram }>

const countOf = (name: string, attributes: Record<string, string>) => histogramPoints(name, attributes).reduce((n, p) => n + p.value.count, 0)

/** The mock provider's model `slug` (provider model id `m`), for a platform of its own with a funded wallet. */
const mockModel = async (slug: string) => {
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug, providers: [{ provider: "mock", provider_model_id: "m", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] }
  })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
  return { platformId, platformKey }
}

it("exports request, token, cost and rejection metrics", async () => {
  const { platformId, platformKey } = await mockModel("metric-model")
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
  const input = histogramPoints("gen_ai.client.token.usage", { "gen_ai.token.type": "input", "gen_ai.request.model": "metric-model" })
  expect(input.reduce((sum, p) => sum + (p.value.sum ?? 0), 0)).toBe(15) // 3 calls x ceil(18 chars / 4) = 5 prompt tokens
  await expect.poll(() => points("gateway.preflight.rejections").find((p) => p.attributes.code === "model_not_found")?.value, { timeout: 5000 })
    .toBeGreaterThanOrEqual(1)
  expect(points("gateway.cost_usd").some((p) => p.attributes["gen_ai.request.model"] === "metric-model" && p.attributes["platform.id"] === platformId))
    .toBe(true)
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

const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
const TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]

it("exports the GenAI conventions' histograms with their units and advised buckets, for a chat call, a stream and a failed call", async () => {
  const { platformId, platformKey } = await mockModel("genai-model")
  // A model no upstream can serve: its only provider does not listen.
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "down", kind: "openai", base_url: "http://127.0.0.1:1" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "genai-down", providers: [{ provider: "down", provider_model_id: "d", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] }
  })
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/down`, { key: platformKey, body: { api_key: "k" } })
  const eu = await createEndUser(gw, platformId, platformKey, "genai-metered")
  const client = new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })

  const completion = await client.chat.completions.create({ model: "genai-model", messages: [{ role: "user", content: "one two three four" }] })
  const stream = await client.chat.completions.create({
    model: "genai-model",
    messages: [{ role: "user", content: "five six seven eight nine" }],
    stream: true,
    stream_options: { include_usage: true }
  })
  let streamed = ""
  let streamUsage: OpenAI.CompletionUsage | undefined
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.delta.content ?? ""
    streamUsage = chunk.usage ?? streamUsage
  }
  expect(streamed.split(" ").length).toBeGreaterThan(1)
  await expect(client.chat.completions.create({ model: "genai-down", messages: [{ role: "user", content: "x" }] })).rejects.toMatchObject({ status: 502 })

  const call = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "mock",
    "gen_ai.request.model": "genai-model",
    "gen_ai.response.model": "m",
    "platform.id": platformId
  }
  await expect.poll(() => countOf("gen_ai.server.request.duration", call), { timeout: 5000 }).toBe(2)
  await expect.poll(() => countOf("gen_ai.server.request.duration", { "gen_ai.request.model": "genai-down", "error.type": "upstream_error" }), { timeout: 5000 })
    .toBe(1)
  const metric = (name: string) => exported().find((m) => m.descriptor.name === name)!
  const shapes = [
    ["gen_ai.client.token.usage", "{token}", TOKEN_BUCKETS],
    ["gen_ai.server.request.duration", "s", DURATION_BUCKETS],
    ["gen_ai.server.time_to_first_token", "s", TTFT_BUCKETS],
    ["gen_ai.server.time_per_output_token", "s", TPOT_BUCKETS]
  ] as const
  for (const [name, unit, buckets] of shapes) {
    const m = metric(name)
    expect(m.dataPointType).toBe(DataPointType.HISTOGRAM)
    expect(m.descriptor.unit).toBe(unit)
    for (const p of m.dataPoints as Array<{ attributes: Record<string, unknown>; value: Histogram }>) {
      expect(p.value.buckets.boundaries).toEqual(buckets)
      // The unit is the descriptor's, not a data point attribute.
      expect(p.attributes.unit).toBeUndefined()
    }
  }
  // Tokens: one input and one output point per call, summing to the usage the client was told.
  const input = histogramPoints("gen_ai.client.token.usage", { ...call, "gen_ai.token.type": "input" })
  const output = histogramPoints("gen_ai.client.token.usage", { ...call, "gen_ai.token.type": "output" })
  expect(input.reduce((n, p) => n + p.value.count, 0)).toBe(2)
  expect(output.reduce((n, p) => n + p.value.count, 0)).toBe(2)
  expect(input.reduce((n, p) => n + (p.value.sum ?? 0), 0)).toBe(completion.usage!.prompt_tokens + streamUsage!.prompt_tokens)
  expect(output.reduce((n, p) => n + (p.value.sum ?? 0), 0)).toBe(completion.usage!.completion_tokens + streamUsage!.completion_tokens)
  // Streams only: the chat call adds nothing to these.
  expect(countOf("gen_ai.server.time_to_first_token", call)).toBe(1)
  expect(countOf("gen_ai.server.time_per_output_token", call)).toBe(1)
  expect(points("gateway.cost_usd").find((p) => p.attributes["platform.id"] === platformId && p.attributes["gen_ai.request.model"] === "genai-model")?.value)
    .toBeGreaterThan(0)
})

/**
 * The names the collector's Prometheus exporter gives an exported metric: dots to underscores, a
 * unit suffix (`s` -> `_seconds`; `1` and annotations such as `{token}` add none), then
 * `_bucket`/`_sum`/`_count` for histograms and `_total` for monotonic sums.
 */
const prometheusNames = (m: MetricData): Array<string> => {
  const unit = ({ s: "_seconds", ms: "_milliseconds", By: "_bytes" } as Record<string, string>)[m.descriptor.unit] ?? ""
  const base = m.descriptor.name.replace(/[^a-zA-Z0-9_]/g, "_") + unit
  if (m.dataPointType === DataPointType.HISTOGRAM) return [`${base}_bucket`, `${base}_sum`, `${base}_count`]
  if (m.dataPointType === DataPointType.SUM && m.isMonotonic) return [`${base}_total`]
  return [base]
}

it("ships a Grafana dashboard that parses and asks only for metrics the gateway exports", async () => {
  const dashboard = JSON.parse(readFileSync(new URL("../grafana-dashboard.json", import.meta.url), "utf8"))
  const queries: Array<string> = [
    ...dashboard.panels.flatMap((p: { targets?: Array<{ expr: string }> }) => (p.targets ?? []).map((t) => t.expr)),
    ...dashboard.templating.list.flatMap((v: { definition?: string }) => v.definition === undefined ? [] : [v.definition])
  ]
  // A metric name stands before a selector or range (`name{`, `name[`) or first in label_values().
  const referenced = new Set(queries.flatMap((q) => [
    ...[...q.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{[]/g)].map((m) => m[1]!),
    ...[...q.matchAll(/label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/g)].map((m) => m[1]!)
  ]))
  // Calls, errors, latency, tokens and cost are all there.
  expect([...referenced]).toEqual(expect.arrayContaining([
    "gen_ai_server_request_duration_seconds_count",
    "gen_ai_server_request_duration_seconds_bucket",
    "gen_ai_server_time_to_first_token_seconds_bucket",
    "gen_ai_client_token_usage_sum",
    "gateway_cost_usd_total",
    "gateway_preflight_rejections_total"
  ]))
  // A streamed call and a refused one: each metric the dashboard uses gets exported.
  const { platformId, platformKey } = await mockModel("dashboard-model")
  const eu = await createEndUser(gw, platformId, platformKey, "dashboard")
  const client = new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
  const stream = await client.chat.completions.create({ model: "dashboard-model", messages: [{ role: "user", content: "a b c" }], stream: true })
  for await (const _ of stream) { /* read to the end */ }
  await expect(client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] })).rejects.toMatchObject({ status: 404 })
  const missing = () => {
    const names = new Set(exported().flatMap(prometheusNames))
    return [...referenced].filter((name) => !names.has(name))
  }
  await expect.poll(missing, { timeout: 5000 }).toEqual([])
})

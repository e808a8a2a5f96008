// Fault: Redis (the shared rate-limit store) goes down. Fail closed (default): end users with
// limits get 503 service_unavailable, nothing is billed; fail open: they are served unlimited.
// Users without limits never touch Redis. Either way each failure is logged and counted
// (`gateway.ratelimiter.errors`, read here by a metric reader). Runs a private redis-server it can kill.
import { NodeSdk } from "@effect/opentelemetry"
import { AggregationTemporality, InMemoryMetricExporter, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { createServer } from "node:net"
import { afterAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const redisBinary = (() => {
  try {
    return execFileSync("which", ["redis-server"]).toString().trim()
  } catch {
    return ""
  }
})()

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0))
    })
  })

const startRedis = async () => {
  const port = await freePort()
  const proc = spawn(redisBinary, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" })
  const deadline = Date.now() + 5000
  while (Date.now() < deadline) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = createServer().listen(port, "127.0.0.1")
      socket.once("listening", () => socket.close(() => resolve(false)))
      socket.once("error", () => resolve(true))
    })
    if (up) break
    await new Promise((r) => setTimeout(r, 50))
  }
  return { url: `redis://127.0.0.1:${port}`, proc }
}

const children: Array<ChildProcess> = []
const gateways: Array<Gateway> = []
afterAll(async () => {
  for (const g of gateways) await g.close()
  for (const c of children) c.kill("SIGKILL")
})

const setup = async (mode: "closed" | "open") => {
  const redis = await startRedis()
  children.push(redis.proc)
  const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const gw = await startGateway({
    env: { REDIS_URL: redis.url, GATEWAY_RATE_LIMIT_ON_REDIS_ERROR: mode },
    tracing: NodeSdk.layer(() => ({
      resource: { serviceName: "gateway-redis-down-test" },
      spanProcessor: new SimpleSpanProcessor(new InMemorySpanExporter()),
      metricReader: new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 100 })
    }))
  })
  gateways.push(gw)
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  await admin("/v1/admin/models", { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "e", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "k" } })
  await admin(`/v1/admin/platforms/${platformId}/platform-wallet/topup`, { amount_usd: 1 })
  const limited = await createEndUser(gw, platformId, platformKey, "limited")
  const free = await createEndUser(gw, platformId, platformKey, "free")
  await gw.call("PUT", `/v1/platforms/${platformId}/end-users/${limited.endUserId}/rate-limits`, { key: platformKey, body: { rpm_limit: 100 } })
  const ask = (key: string) => gw.call("POST", "/v1/chat/completions", { key, body: { model: "mock-echo", messages: [{ role: "user", content: "hi" }] } })
  const logs = async () => (await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1", [platformId])).rows[0].n as number
  /** The latest export's count of rate limiter store failures during admission, in `mode`. */
  const storeErrors = () =>
    Number(metrics.getMetrics().slice(-1).flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))
      .filter((m) => m.descriptor.name === "gateway.ratelimiter.errors")
      .flatMap((m) => m.dataPoints as Array<{ attributes: Record<string, unknown>; value: unknown }>)
      .find((p) => p.attributes.operation === "admit" && p.attributes.mode === mode)?.value ?? 0)
  return { redis, gw, limited, free, ask, logs, storeErrors }
}

describe.skipIf(redisBinary === "")("Redis down (needs the redis-server binary)", () => {
  it("fail closed: 503 for users with limits, nothing billed; users without limits unaffected", async () => {
    const t = await setup("closed")
    expect((await t.ask(t.limited.endUserKey)).status).toBe(200)
    t.redis.proc.kill("SIGKILL")
    const refused = await t.ask(t.limited.endUserKey)
    expect(refused.status).toBe(503)
    expect(refused.body.error).toMatchObject({ code: "service_unavailable", type: "api_error" })
    expect((await t.ask(t.free.endUserKey)).status).toBe(200)
    expect(await t.logs()).toBe(2)
    await expect.poll(t.storeErrors, { timeout: 5000 }).toBeGreaterThanOrEqual(1)
  })

  it("fail open: users with limits are served unlimited while Redis is down", async () => {
    const t = await setup("open")
    t.redis.proc.kill("SIGKILL")
    const served = await t.ask(t.limited.endUserKey)
    expect(served.status).toBe(200)
    expect(served.headers.get("x-ratelimit-limit-requests")).toBeNull()
    expect(await t.logs()).toBe(1)
    await expect.poll(t.storeErrors, { timeout: 5000 }).toBeGreaterThanOrEqual(1)
  })
})

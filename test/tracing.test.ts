// OpenTelemetry: one server span per request with HTTP attributes and the tenant ids.
import { NodeSdk } from "@effect/opentelemetry"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { afterAll, beforeAll, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const exporter = new InMemorySpanExporter()
let gw: Gateway
beforeAll(async () => {
  gw = await startGateway({
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

// Without an OTLP endpoint the gateway makes no spans (they would go nowhere): a client's W3C
// trace context still reaches the upstream unchanged, and without one nothing is invented.
import { afterAll, beforeAll, expect, it } from "vitest"
import { startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, type Gateway, provisionOpenAiModel, startGateway } from "./support/Gateway.js"

let gw: Gateway
let upstream: Awaited<ReturnType<typeof startFakeOpenAi>>
let endUserKey: string
beforeAll(async () => {
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true" } }) // default tracing: off
  upstream = await startFakeOpenAi()
  const { platformId, platformKey } = await provisionOpenAiModel(gw, upstream.url, { provider: "fake", model: "fake-model" })
  endUserKey = (await createEndUser(gw, platformId, platformKey, "untraced")).endUserKey
})
afterAll(async () => {
  await upstream?.close()
  await gw?.close()
})

const chat = (headers: Record<string, string>, stream: boolean) =>
  fetch(`${gw.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${endUserKey}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "hi" }], stream })
  }).then(async (res) => ({ status: res.status, body: await res.text() }))

it("passes the client's traceparent to the upstream as it came, streaming or not", async () => {
  for (const stream of [false, true]) {
    upstream.reset()
    const traceparent = `00-4bf92f3577b34da6a3ce929d0e0e473${stream ? "6" : "7"}-00f067aa0ba902b7-01`
    const res = await chat({ traceparent }, stream)
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.headers.traceparent).toBe(traceparent)
  }
})

it("sends no traceparent upstream when the client sent none", async () => {
  upstream.reset()
  const res = await chat({}, false)
  expect(res.status).toBe(200)
  expect(upstream.requests).toHaveLength(1)
  expect(upstream.requests[0]!.headers.traceparent).toBeUndefined()
})

it("names the nearest recorded span, skipping no-op ones, or nothing", async () => {
  const { Effect, Tracer } = await import("effect")
  const { currentTraceparent } = await import("../layers/lib/CurrentSpan.js")
  const client = Tracer.externalSpan({ traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", sampled: true })
  const nested = currentTraceparent.pipe(Effect.withSpan("inner"), Effect.withSpan("outer"))
  // Tracing off: the spans are no-ops, the external parent's ids travel.
  const off = await Effect.runPromise(nested.pipe(Effect.withParentSpan(client), Effect.withTracerEnabled(false)))
  expect(off).toBe("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
  expect(await Effect.runPromise(nested.pipe(Effect.withTracerEnabled(false)))).toBeNull()
  // Tracing on: the innermost span, in the client's trace.
  const on = await Effect.runPromise(nested.pipe(Effect.withParentSpan(client)))
  expect(on).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/)
  expect(on).not.toContain("00f067aa0ba902b7")
})

it("makes per-call spans only when tracing is on, and annotates only recorded spans", async () => {
  const { Effect, Option } = await import("effect")
  const { annotateCurrentSpan, withCallSpan } = await import("../layers/lib/CurrentSpan.js")
  const inner = Effect.gen(function*() {
    yield* annotateCurrentSpan({ "gen_ai.request.model": "m" })
    return Option.getOrNull(yield* Effect.option(Effect.currentSpan))
  }).pipe(withCallSpan("call", () => ({ "platform.id": "p" })))
  const on = await Effect.runPromise(inner)
  expect(on?.name).toBe("call")
  expect(on?._tag === "Span" && Object.fromEntries(on.attributes)).toEqual({ "platform.id": "p", "gen_ai.request.model": "m" })
  // Off: no span at all (not even a no-op one), and the annotation is silently dropped.
  expect(await Effect.runPromise(inner.pipe(Effect.withTracerEnabled(false)))).toBeNull()
})

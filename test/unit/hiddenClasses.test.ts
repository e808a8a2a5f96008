// Hot-path rule "no hidden class per call" (docs/performance.md): what the request path builds
// per call shares V8 hidden classes from one call to the next. V8 gives an object made by a
// spread a hidden class of its own and each property added after it a new one, kept in the old
// generation until a full collection; they cost microseconds each and kept calls' young objects
// through the scavenges. `%HaveSameMap` (V8's natives syntax) compares two objects' hidden classes.
import { describe, expect, it } from "vitest"
import { setFlagsFromString } from "node:v8"
import { headersOf } from "../../src/inference/ChatRoute.js"
import { upstreamRequestBody } from "../../layers/pipeline/upstream/OpenAi.js"
import type { UpstreamCall } from "../../layers/pipeline/upstream/Upstream.js"

setFlagsFromString("--allow-natives-syntax")
const haveSameMap = new Function("a", "b", "return %HaveSameMap(a, b)") as (a: object, b: object) => boolean

/** Whether two calls' objects share a hidden class once the call site is warm (its inline caches set, as in a running gateway). */
const sharedOnceWarm = (make: (i: number) => object) => {
  for (let i = 0; i < 2_000; i++) make(i)
  return haveSameMap(make(1), make(2))
}

describe("objects built per call share hidden classes across calls", () => {
  it("an answer's head (headersOf)", () => {
    const limits = (n: number) => ({ "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": String(n) })
    const head = (i: number, headers: Record<string, string>) =>
      headersOf(headers, { "x-request-id": `id-${i}` }, { "content-type": "application/json", "content-length": i })
    expect(sharedOnceWarm((i) => head(i, limits(i)))).toBe(true)
    expect(sharedOnceWarm((i) => head(i, {}))).toBe(true)
  })

  it("the OpenAI request body, streamed or not", () => {
    const call = (i: number) => ({
      request: { model: "m", messages: [{ role: "user", content: `prompt ${i}` }], max_tokens: 8, stream: true, stream_options: { include_usage: true } },
      providerModelId: "upstream-m"
    }) as unknown as UpstreamCall
    expect(sharedOnceWarm((i) => upstreamRequestBody(call(i), true))).toBe(true)
    expect(sharedOnceWarm((i) => upstreamRequestBody(call(i), false))).toBe(true)
    expect(upstreamRequestBody(call(1), false)).toEqual({ model: "upstream-m", messages: [{ role: "user", content: "prompt 1" }], max_tokens: 8 })
  })
})

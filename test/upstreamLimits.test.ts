// An upstream cannot make the gateway hold unbounded memory: 1 GiB JSON answers, error bodies and SSE
// lines (made lazily) are cut at their caps, the socket closed early, the client answered 502 or by
// the next candidate, RSS bounded (sampled, and after a forced GC); answers under the caps still work.
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HELLO, type HostileUpstream, startHostileUpstream } from "./fakes/HostileUpstream.js"
import { createEndUser, createPlatform, type Gateway, type Peer, startGateway } from "./support/Gateway.js"

const MIB = 1024 * 1024
const GIB = 1024 * MIB
/** The defaults (Limits.ts) and the smaller caps the peer instance runs with. */
const DEFAULT_MAX_BODY = 32 * MIB
const PEER_MAX_BODY = MIB
const PEER_MAX_LINE = 64 * 1024

/** A forced full GC when V8 lets us have one (the flag can be set at run time); else nothing. */
const gc: () => void = (() => {
  try {
    setFlagsFromString("--expose-gc")
    return runInNewContext("gc") as () => void
  } catch {
    return () => undefined
  }
})()
const collected = async () => {
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return process.memoryUsage().rss
}

/** `run`'s result with the RSS growth over the baseline: the highest sampled during it, and after a GC. */
const withRss = async <T>(run: () => Promise<T>) => {
  const baseline = await collected()
  let peak = baseline
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss)
  }, 5)
  try {
    const result = await run()
    peak = Math.max(peak, process.memoryUsage().rss)
    return { result, peakGrowth: peak - baseline, settledGrowth: (await collected()) - baseline }
  } finally {
    clearInterval(sampler)
  }
}

let gw: Gateway
let peer: Peer
let a: HostileUpstream
let b: HostileUpstream
let endUserKey: string

beforeAll(async () => {
  ;[a, b] = await Promise.all([startHostileUpstream(), startHostileUpstream()])
  gw = await startGateway()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "ha", kind: "openai", base_url: a.url })
  await admin("/v1/admin/providers", { slug: "hb", kind: "openai", base_url: b.url })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 1 }
  await admin("/v1/admin/models", { slug: "solo", providers: [{ provider: "ha", provider_model_id: "a-1", ...price }] })
  await admin("/v1/admin/models", {
    slug: "pair",
    providers: [{ provider: "ha", provider_model_id: "a-1", priority: 0, ...price }, { provider: "hb", provider_model_id: "b-1", priority: 1, ...price }]
  })
  const p = await createPlatform(gw)
  for (const slug of ["ha", "hb"]) {
    await gw.call("PUT", `/v1/platforms/${p.platformId}/provider-keys/${slug}`, { key: p.platformKey, body: { api_key: `sk-${slug}-provider-key` } })
  }
  await admin(`/v1/admin/platforms/${p.platformId}/platform-wallet/topup`, { amount_usd: 100 })
  endUserKey = (await createEndUser(gw, p.platformId, p.platformKey, "limits-user")).endUserKey
  peer = await gw.startPeer({ GATEWAY_UPSTREAM_MAX_BODY: String(PEER_MAX_BODY), GATEWAY_UPSTREAM_MAX_SSE_LINE: "64kb" })
}, 120_000)
afterAll(async () => {
  await gw?.close()
  await Promise.all([a, b].map((f) => f?.close()))
})

const chat = (model: string, stream: boolean, via: Pick<Gateway, "baseUrl"> = gw) =>
  fetch(`${via.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${endUserKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], ...(stream ? { stream: true } : {}) })
  }).then(async (res) => ({ status: res.status, text: await res.text() }))

/** The content of an SSE answer, whether it ended with [DONE], and its finish reasons. */
const sseOf = (text: string) => {
  const data = text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6))
  const chunks = data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d))
  return {
    content: chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""),
    finish: chunks.map((c) => c.choices[0]?.finish_reason).filter((f) => f != null),
    done: data.at(-1) === "[DONE]"
  }
}

const expect502 = (answer: { status: number; text: string }) => {
  expect(answer.status).toBe(502)
  expect(JSON.parse(answer.text).error).toMatchObject({ code: "upstream_error", type: "api_error" })
}

describe("1 GiB from an upstream", () => {
  it("a JSON answer is cut at GATEWAY_UPSTREAM_MAX_BODY: 502, socket closed early, RSS bounded", async () => {
    a.answer({ kind: "hugeJson", bytes: GIB })
    const { result, peakGrowth, settledGrowth } = await withRss(() => chat("solo", false))
    expect502(result)
    expect(JSON.parse(result.text).error.message).toBe("The upstream provider sent an answer the gateway could not use")
    const served = a.requests.at(-1)!
    await a.waitFor(() => served.over)
    expect(served.closedEarly).toBe(true)
    expect(served.bytesWritten).toBeGreaterThan(DEFAULT_MAX_BODY) // it did get as far as the cap
    expect(served.bytesWritten).toBeLessThan(4 * DEFAULT_MAX_BODY)
    expect(peakGrowth).toBeLessThan(256 * MIB)
    expect(settledGrowth).toBeLessThan(128 * MIB)
  })

  it("the same answer with a second candidate fails over: 200 from it", async () => {
    a.answer({ kind: "hugeJson", bytes: GIB })
    b.answer({ kind: "healthy" })
    const before = b.requests.length
    const { result, peakGrowth } = await withRss(() => chat("pair", false))
    expect(result.status).toBe(200)
    expect(JSON.parse(result.text).choices[0].message.content).toBe(HELLO)
    expect(b.requests.length).toBe(before + 1)
    expect(a.requests.at(-1)!.closedEarly).toBe(true)
    expect(peakGrowth).toBeLessThan(256 * MIB)
  })

  it("an error body: only a prefix is read, the socket closed early; a 5xx still fails over", async () => {
    a.answer({ kind: "hugeError", status: 500, bytes: GIB })
    const { result, peakGrowth } = await withRss(() => chat("solo", false))
    expect502(result)
    expect(JSON.parse(result.text).error.message).toBe("The upstream provider answered 500")
    const served = a.requests.at(-1)!
    await a.waitFor(() => served.over)
    expect(served.closedEarly).toBe(true)
    expect(served.bytesWritten).toBeLessThan(16 * MIB)
    expect(peakGrowth).toBeLessThan(256 * MIB)
    b.answer({ kind: "healthy" })
    expect((await chat("pair", false)).status).toBe(200)
  })

  it("an SSE data line without end fails the stream before its first chunk: 502, socket closed early, RSS bounded", async () => {
    a.answer({ kind: "hugeSseLine", bytes: GIB })
    const { result, peakGrowth, settledGrowth } = await withRss(() => chat("solo", true))
    expect502(result)
    const served = a.requests.at(-1)!
    await a.waitFor(() => served.over)
    expect(served.closedEarly).toBe(true)
    expect(served.bytesWritten).toBeLessThan(64 * MIB)
    expect(peakGrowth).toBeLessThan(256 * MIB)
    expect(settledGrowth).toBeLessThan(128 * MIB)
  })

  it("the same stream with a second candidate fails over: the whole stream comes from it", async () => {
    a.answer({ kind: "hugeSseLine", bytes: GIB })
    b.answer({ kind: "healthy" })
    const before = b.requests.length
    const { result } = await withRss(() => chat("pair", true))
    expect(result.status).toBe(200)
    expect(sseOf(result.text)).toEqual({ content: HELLO, finish: ["stop"], done: true })
    expect(b.requests.length).toBe(before + 1)
    expect(a.requests.at(-1)!.closedEarly).toBe(true)
  })
})

describe("at the caps (an instance with GATEWAY_UPSTREAM_MAX_BODY=1mb, GATEWAY_UPSTREAM_MAX_SSE_LINE=64kb)", () => {
  it("a JSON answer a little under the cap is served; one byte over it is a 502", async () => {
    a.answer({ kind: "healthy", bodyBytes: PEER_MAX_BODY - 64 })
    const under = await chat("solo", false, peer)
    expect(under.status).toBe(200)
    expect(JSON.parse(under.text).choices[0].message.content).toMatch(/^a{1000000,}$/)
    a.answer({ kind: "healthy", bodyBytes: PEER_MAX_BODY + 1 })
    expect502(await chat("solo", false, peer))
  })

  it("an SSE line a little under the cap is served; a longer one after the first chunk ends the stream as a drop", async () => {
    a.answer({ kind: "healthy", lineBytes: PEER_MAX_LINE - 16 })
    const under = await chat("solo", true, peer)
    expect(under.status).toBe(200)
    const served = sseOf(under.text)
    expect(served.content).toMatch(/^x{60000,}$/)
    expect(served.done).toBe(true)

    // The role chunk went out first: the attempt can no longer fail over; the stream stops
    // with finish_reason "stop" and no [DONE], as any upstream drop does.
    a.answer({ kind: "healthy", lineBytes: PEER_MAX_LINE + 1 })
    const over = await chat("solo", true, peer)
    expect(over.status).toBe(200)
    expect(sseOf(over.text)).toEqual({ content: "", finish: ["stop"], done: false })
  })
})

describe("a stream that has not sent its first event", () => {
  it("a client that leaves meanwhile: the upstream request is aborted and the call settled as interrupted", async () => {
    a.answer({ kind: "silentStream" })
    const before = a.requests.length
    const controller = new AbortController()
    const pending = fetch(`${gw.baseUrl}/v1/chat/completions`, {
      method: "POST",
      signal: controller.signal,
      headers: { authorization: `Bearer ${endUserKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "solo", messages: [{ role: "user", content: "wait for it" }], stream: true })
    }).catch((error: unknown) => error)
    await a.waitFor(() => a.requests.length > before)
    controller.abort()
    await pending
    const served = a.requests.at(-1)!
    await a.waitFor(() => served.over)
    expect(served.closedEarly).toBe(true)
    const logs = await gw.db.pool.query("SELECT status, completion_tokens FROM inference_logs WHERE model_slug = 'solo' ORDER BY created_at DESC LIMIT 1")
    expect(logs.rows[0]).toEqual({ status: "interrupted", completion_tokens: 0 })
  })
})

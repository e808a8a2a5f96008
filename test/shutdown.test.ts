// SIGTERM during streams: the gateway stops accepting connections, lets streams in
// flight run to their end up to GATEWAY_SHUTDOWN_TIMEOUT, cuts the rest, settles every call
// (a cut stream bills what it emitted), writes the settlement queue, lets a webhook delivery in
// flight finish and flushes its spans before it exits. A repeated signal does not cut the drain;
// one after GATEWAY_FORCE_STOP_AFTER does, and the cut call is still settled. Each case
// runs a real gateway process and sends it real signals.
import { createServer, type Server } from "node:http"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mintKey } from "../layers/access/KeyFormat.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { startReceiver } from "./fakes/WebhookReceiver.js"
import { ok } from "./support/Gateway.js"
import { type GatewayProcess, spawnEnv, spawnGateway } from "./support/Process.js"
import { createTestDatabase, type TestDatabase } from "./support/TestDatabase.js"

/** An OTLP/HTTP (JSON) receiver: the names and trace ids of the spans the gateway exported. */
const startCollector = async () => {
  const spans: Array<{ name: string; traceId: string; attributes: Record<string, unknown> }> = []
  const server: Server = createServer((req, res) => {
    let body = ""
    req.on("data", (chunk) => (body += chunk))
    req.on("end", () => {
      if (req.url?.endsWith("/v1/traces")) {
        const parsed = JSON.parse(body)
        for (const rs of parsed.resourceSpans ?? []) {
          for (const ss of rs.scopeSpans ?? []) {
            for (const span of ss.spans ?? []) {
              const attributes: Record<string, unknown> = {}
              for (const a of span.attributes ?? []) attributes[a.key] = Object.values(a.value ?? {})[0]
              spans.push({ name: span.name, traceId: span.traceId, attributes })
            }
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  return { url: `http://127.0.0.1:${port}`, spans, close: () => new Promise<void>((r) => server.close(() => r())) }
}

let db: TestDatabase
let upstream: FakeUpstream
let collector: Awaited<ReturnType<typeof startCollector>>
const dataDirs: Array<string> = []
const adminKey = mintKey("admin").raw
const encryptionKey = randomBytes(32).toString("base64")

beforeAll(async () => {
  db = await createTestDatabase()
  db.pool.on("connect", (client) => client.on("error", () => undefined))
  upstream = await startFakeOpenAi()
  collector = await startCollector()
}, 60_000)

afterAll(async () => {
  await upstream?.close()
  await collector?.close()
  await db?.drop()
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true })
}, 60_000)

const start = (label: string, shutdownTimeout: string, extra: Record<string, string> = {}) => {
  const dir = mkdtempSync(join(tmpdir(), `gateway-shutdown-${label}-`))
  dataDirs.push(dir)
  // The bundle `npm start` runs: this file also proves that it streams, counts tokens, exports
  // spans through the lazily loaded OpenTelemetry SDK and shuts down cleanly.
  return spawnGateway({
    label,
    entry: "bundle",
    env: spawnEnv({ databaseUrl: db.url, dataDir: dir, adminKey, encryptionKey }, {
      GATEWAY_SHUTDOWN_TIMEOUT: shutdownTimeout,
      DATABASE_POOL_SIZE: "4",
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_SERVICE_NAME: `gateway-shutdown-${label}`,
      ...extra
    })
  })
}

/** Catalog (idempotent), a platform with a 10 USD wallet, an end user with a 5 USD budget. */
const tenant = async (gw: GatewayProcess, name: string) => {
  // The catalog is shared by both cases (one database): the admin API upserts it.
  const provider = await gw.call("POST", "/v1/admin/providers", { key: adminKey, body: { slug: "slow", kind: "openai", base_url: upstream.url } })
  expect([200, 201]).toContain(provider.status)
  const model = await gw.call("POST", "/v1/admin/models", {
    key: adminKey,
    body: { slug: "slow-model", providers: [{ provider: "slow", provider_model_id: "slow-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] }
  })
  expect([200, 201]).toContain(model.status)
  const platform = ok(await gw.call("POST", "/v1/admin/platforms", { key: adminKey, body: { name } }), 201).body
  const platformId = platform.platform.id as string
  const platformKey = platform.api_key.raw_key as string
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/slow`, { key: platformKey, body: { api_key: "sk-slow" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: adminKey, body: { amount_usd: 10 } }))
  const user = ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: "u" } }), 201).body
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${user.id}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
  return { platformId, platformKey, endUserId: user.id as string, endUserKey: user.api_key.raw_key as string }
}

/** Starts a streaming call; resolves once the first content arrived, with the rest of the stream as a promise. */
const openStream = async (gw: GatewayProcess, key: string, traceId: string) => {
  const response = await fetch(`${gw.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01`
    },
    body: JSON.stringify({ model: "slow-model", stream: true, messages: [{ role: "user", content: "count slowly" }] })
  })
  expect(response.status).toBe(200)
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let text = ""
  while (!/"content":"[^"]/.test(text)) {
    const { value, done } = await reader.read()
    if (done) break
    text += decoder.decode(value)
  }
  const rest = (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read()
        if (done) return { text, cut: false }
        text += decoder.decode(value)
      }
    } catch {
      return { text, cut: true }
    }
  })()
  // Wrapped: an async function returning a promise would wait for it.
  return { rest }
}

const contentOf = (sse: string) =>
  sse.split("\n").filter((line) => line.startsWith("data: {")).map((line) => JSON.parse(line.slice(6)))
    .flatMap((chunk) => chunk.choices.map((c: any) => c.delta?.content ?? "")).join("")

const settledRows = async (platformId: string) => {
  const logs = await db.pool.query(
    "SELECT status, completion_tokens, estimated_cost_usd::text AS cost FROM inference_logs WHERE platform_id = $1",
    [platformId]
  )
  const debits = await db.pool.query(
    "SELECT count(*)::int AS n, coalesce(sum(amount_usd), 0)::text AS sum FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'",
    [platformId]
  )
  const wallet = await db.pool.query(
    "SELECT count(*)::int AS n FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit'",
    [platformId]
  )
  return { logs: logs.rows, debits: debits.rows[0], walletDebits: wallet.rows[0].n as number }
}

describe("SIGTERM during streams", () => {
  it("drains: a stream in flight runs to [DONE], is settled once, its spans are exported, and the process exits", async () => {
    const gw = await start("drain", "20s")
    const t = await tenant(gw, "Drain")
    const reply = "one two three four five six seven eight nine ten"
    upstream.setBehavior({ reply, chunkDelayMs: 150 })
    const traceId = randomBytes(16).toString("hex")
    const { rest: stream } = await openStream(gw, t.endUserKey, traceId)

    const stopped = gw.stop(30_000)
    const { text, cut } = await stream
    expect(cut).toBe(false)
    expect(text).toContain("data: [DONE]")
    expect(contentOf(text)).toBe(reply)
    await stopped
    // A new connection is refused once the gateway is gone.
    await expect(fetch(`${gw.baseUrl}/health`)).rejects.toThrow()

    const rows = await settledRows(t.platformId)
    expect(rows.logs).toHaveLength(1)
    expect(rows.logs[0]).toMatchObject({ status: "success", completion_tokens: 10 })
    expect(rows.debits.n).toBe(1)
    expect(rows.debits.sum).toBe(rows.logs[0].cost)
    expect(rows.walletDebits).toBe(1)
    // The spans of the call, exported before exit, in the client's trace.
    const names = collector.spans.filter((s) => s.traceId === traceId).map((s) => s.name)
    expect(names).toEqual(expect.arrayContaining(["Inference.admit", "ProviderRouter.attempt", "Inference.settle", "http.server POST"]))
    // ... and the settlement group written during shutdown, linked to the call's settlement span.
    expect(collector.spans.some((s) => s.name === "Settlements.commit")).toBe(true)
  }, 60_000)

  it("SIGHUP (the terminal running it was closed) drains as SIGTERM does: the stream completes, is billed once, exit 0", async () => {
    const gw = await start("hangup", "20s")
    const t = await tenant(gw, "Hangup")
    const reply = "one two three four five six"
    upstream.setBehavior({ reply, chunkDelayMs: 150 })
    const { rest: stream } = await openStream(gw, t.endUserKey, randomBytes(16).toString("hex"))

    gw.signal("SIGHUP")
    await gw.waitForLine(/SIGHUP: shutting down/)
    const { text, cut } = await stream
    expect(cut).toBe(false)
    expect(contentOf(text)).toBe(reply)
    expect(await gw.exited).toEqual({ code: 0, signal: null })
    const rows = await settledRows(t.platformId)
    expect(rows.logs).toHaveLength(1)
    expect(rows.logs[0]).toMatchObject({ status: "success", completion_tokens: 6 })
    expect(rows.debits.n).toBe(1)
    expect(rows.walletDebits).toBe(1)
  }, 60_000)

  it("cuts a stream still running at the deadline and bills the tokens it emitted", async () => {
    const gw = await start("deadline", "1s")
    const t = await tenant(gw, "Deadline")
    upstream.setBehavior({ reply: Array.from({ length: 40 }, (_, i) => `w${i}`).join(" "), chunkDelayMs: 200 })
    const { rest: stream } = await openStream(gw, t.endUserKey, randomBytes(16).toString("hex"))

    const began = Date.now()
    await gw.stop(30_000)
    expect(await gw.exited).toEqual({ code: 0, signal: null })
    const { text, cut } = await stream
    // Cut well before the upstream's 8 s, and without the terminator.
    expect(Date.now() - began).toBeLessThan(7_000)
    expect(cut || !text.includes("data: [DONE]")).toBe(true)
    const emitted = contentOf(text).split(" ").filter((w) => w !== "").length
    expect(emitted).toBeGreaterThan(0)
    expect(emitted).toBeLessThan(40)

    const rows = await settledRows(t.platformId)
    expect(rows.logs).toHaveLength(1)
    expect(rows.logs[0].status).toBe("interrupted")
    // Billed by the tokenizer for what was streamed (at least what the client saw).
    expect(rows.logs[0].completion_tokens).toBeGreaterThanOrEqual(emitted)
    expect(Number(rows.logs[0].cost)).toBeGreaterThan(0)
    expect(rows.debits.n).toBe(1)
    expect(rows.debits.sum).toBe(rows.logs[0].cost)
    expect(rows.walletDebits).toBe(1)
  }, 60_000)

  it("a repeated SIGTERM (npm and systemd deliver one stop twice) does not cut the drain: the stream completes, is logged and billed, exit 0", async () => {
    const gw = await start("repeat", "20s")
    const t = await tenant(gw, "Repeat")
    const reply = "one two three four five six seven eight nine ten"
    upstream.setBehavior({ reply, chunkDelayMs: 200 })
    const { rest: stream } = await openStream(gw, t.endUserKey, randomBytes(16).toString("hex"))

    gw.signal("SIGTERM")
    // The first one is being handled (the drain started): the next ones are separate deliveries.
    await gw.waitForLine(/SIGTERM: shutting down/)
    gw.signal("SIGTERM")
    gw.signal("SIGINT")
    gw.signal("SIGTERM")
    const { text, cut } = await stream
    expect(cut).toBe(false)
    expect(text).toContain("data: [DONE]")
    expect(contentOf(text)).toBe(reply)
    expect(await gw.exited).toEqual({ code: 0, signal: null })
    // The duplicates were noticed, and said so once.
    expect(gw.lines.filter((l) => /ignored: already shutting down/.test(l))).toHaveLength(1)
    expect(gw.lines.some((l) => /forced stop/.test(l))).toBe(false)

    const rows = await settledRows(t.platformId)
    expect(rows.logs).toEqual([expect.objectContaining({ status: "success", completion_tokens: 10 })])
    expect(rows.debits.n).toBe(1)
    expect(rows.debits.sum).toBe(rows.logs[0].cost)
    expect(rows.walletDebits).toBe(1)
  }, 60_000)

  it("a signal after GATEWAY_FORCE_STOP_AFTER forces the stop: the stream is cut, logged interrupted with its tokens and billed before exit", async () => {
    // The shutdown deadline (30 s) is far beyond the upstream's 8 s: only the forced stop can cut.
    // The timeout in Effect's spelling, as older deployments set it: still read.
    const gw = await start("forced", "30 seconds", { GATEWAY_FORCE_STOP_AFTER: "1s" })
    const t = await tenant(gw, "Forced")
    upstream.setBehavior({ reply: Array.from({ length: 40 }, (_, i) => `w${i}`).join(" "), chunkDelayMs: 200 })
    const { rest: stream } = await openStream(gw, t.endUserKey, randomBytes(16).toString("hex"))

    gw.signal("SIGTERM")
    await gw.waitForLine(/SIGTERM: shutting down/)
    gw.signal("SIGTERM") // a duplicate: ignored
    await gw.waitForLine(/ignored: already shutting down/)
    await new Promise((resolve) => setTimeout(resolve, 1_500)) // past the grace period
    gw.signal("SIGINT")
    const { text, cut } = await stream
    expect(cut || !text.includes("data: [DONE]")).toBe(true)
    const emitted = contentOf(text).split(" ").filter((w) => w !== "").length
    expect(emitted).toBeGreaterThan(0)
    expect(emitted).toBeLessThan(40)
    expect(await gw.exited).toEqual({ code: 0, signal: null })
    expect(gw.lines.some((l) => /SIGINT: forced stop/.test(l))).toBe(true)

    // Written before the exit (the process is gone; nothing else could write it).
    const rows = await settledRows(t.platformId)
    expect(rows.logs).toHaveLength(1)
    expect(rows.logs[0].status).toBe("interrupted")
    expect(rows.logs[0].completion_tokens).toBeGreaterThanOrEqual(emitted)
    expect(Number(rows.logs[0].cost)).toBeGreaterThan(0)
    expect(rows.debits.n).toBe(1)
    expect(rows.debits.sum).toBe(rows.logs[0].cost)
    expect(rows.walletDebits).toBe(1)
  }, 60_000)

  it("flushes the outbox: a webhook delivery in flight at SIGTERM finishes and is recorded delivered before the process exits", async () => {
    const gw = await start("outbox", "5s")
    const t = await tenant(gw, "Outbox")
    const slow = await startReceiver({ delayMs: 1500 })
    try {
      const endpoint = ok(await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, {
        key: t.platformKey,
        body: { url: slow.url, event_types: ["budget.topped_up"] }
      }), 201).body
      slow.secret = endpoint.secret
      const topup = ok(await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/topup`, {
        key: t.platformKey,
        body: { amount_usd: 1 }
      }))
      await slow.waitFor((r) => r.arrived === 1) // the delivery is on the wire; its answer is 1.5 s away
      await gw.stop(30_000)
      expect(slow.events.map((e) => e.body.event_id)).toEqual([`${topup.body.transaction.id}:budget.topped_up`])
      const rows = await db.pool.query("SELECT status, attempt, last_http_status FROM webhook_deliveries WHERE endpoint_id = $1", [endpoint.id])
      expect(rows.rows).toEqual([{ status: "delivered", attempt: 1, last_http_status: 200 }])
    } finally {
      await slow.close()
    }
  }, 60_000)
})

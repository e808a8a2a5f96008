// Scale-out: two gateway *processes* (`node --import tsx src/main.ts`, own memory,
// caches and pools) on one fresh Postgres database and, when REDIS_URL is set, one Redis.
// What is shared where (docs/operations.md "Scaling out"):
//   (a) rate limits are global through Redis (per instance without it),
//   (b) a revocation on one instance reaches the other's auth cache by LISTEN/NOTIFY,
//   (c) both instances run webhook dispatchers, yet each event is delivered once,
//   (d) concurrent inference on both instances settles exactly once per call,
//   (e) MCP sessions are rows in Postgres: any instance serves any session (no affinity).
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import OpenAI from "openai"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mintKey } from "../layers/access/KeyFormat.js"
import { startReceiver, type WebhookReceiver } from "./fakes/WebhookReceiver.js"
import { type GatewayProcess, spawnEnv, spawnGateway } from "./support/Process.js"
import { createTestDatabase, type TestDatabase } from "./support/TestDatabase.js"

const redisUrl = process.env.REDIS_URL !== undefined && process.env.REDIS_URL !== "" ? process.env.REDIS_URL : undefined

let db: TestDatabase
let receiver: WebhookReceiver
let a: GatewayProcess
let b: GatewayProcess
const dataDirs: Array<string> = []
const adminKey = mintKey("admin").raw

beforeAll(async () => {
  db = await createTestDatabase()
  // TestDatabase.drop ends the pool and then runs DROP DATABASE ... WITH (FORCE); pg-pool's end()
  // resolves before its clients' sockets close, so a client may still get the FORCE's 57P01 and
  // emit an unhandled 'error'. Such late errors of the assertion pool are of no interest here.
  db.pool.on("connect", (client) => client.on("error", () => undefined))
  receiver = await startReceiver()
  const encryptionKey = randomBytes(32).toString("base64")
  const start = (label: string) => {
    const dir = mkdtempSync(join(tmpdir(), `gateway-scaleout-${label}-`))
    dataDirs.push(dir)
    // Tracing stays off whatever the developer's shell says (spawnEnv).
    return spawnGateway({
      label,
      env: spawnEnv({ databaseUrl: db.url, dataDir: dir, adminKey, encryptionKey }, {
        REDIS_URL: redisUrl,
        GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,1s,1s",
        DATABASE_POOL_SIZE: "8"
      })
    })
  }
  // One after the other: on a brand-new database two instances starting at the same instant can
  // race on the migrator's `CREATE TABLE IF NOT EXISTS schema_migrations` (duplicate pg_type row;
  // the loser exits and must be restarted). Once that table exists, the migrator's table lock
  // serialises concurrent starts. See docs/operations.md "Migrations".
  a = await start("A")
  b = await start("B")
}, 90_000)

afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()])
  await receiver?.close()
  await db?.drop()
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true })
}, 60_000)

/** The instance for the i-th call of a round robin. */
const pick = (i: number) => (i % 2 === 0 ? a : b)

const ok = <T extends { status: number; body: any }>(res: T, status = 200): T => {
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${JSON.stringify(res.body)}`)
  return res
}

let catalogReady: Promise<void> | undefined
/** The offline `mock` provider and model `mock-echo` (1 / 2 USD per million tokens), once. */
const catalog = () =>
  catalogReady ??= (async () => {
    ok(await a.call("POST", "/v1/admin/providers", { key: adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } }))
    ok(await a.call("POST", "/v1/admin/models", {
      key: adminKey,
      body: { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] }
    }))
  })()

interface Tenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly endUserKeyId: string
}

/** A platform with a mock provider key, a 10 USD wallet and one end user with a 5 USD budget (all made on A). */
const tenant = async (name: string, extra: Record<string, unknown> = {}): Promise<Tenant> => {
  await catalog()
  const platform = ok(await a.call("POST", "/v1/admin/platforms", { key: adminKey, body: { name, ...extra } }), 201).body
  const platformId = platform.platform.id as string
  const platformKey = platform.api_key.raw_key as string
  ok(await a.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "mock-key" } }))
  ok(await a.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: adminKey, body: { amount_usd: 10 } }))
  const user = ok(await a.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: "user" } }), 201).body
  const endUserId = user.id as string
  ok(await a.call("POST", `/v1/platforms/${platformId}/end-users/${endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
  return { platformId, platformKey, endUserId, endUserKey: user.api_key.raw_key, endUserKeyId: user.api_key.id }
}

const chat = (gw: GatewayProcess, key: string, content = "hello") =>
  gw.call("POST", "/v1/chat/completions", { key, body: { model: "mock-echo", messages: [{ role: "user", content }] } })

/** Polls until `probe` is true; returns the elapsed milliseconds, or throws after `timeoutMs`. */
const pollUntil = async (probe: () => Promise<boolean>, timeoutMs: number, intervalMs = 20) => {
  const started = performance.now()
  for (;;) {
    if (await probe()) return performance.now() - started
    if (performance.now() - started > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}

describe("two gateway processes on one database", () => {
  it("both answer /health on the API host and the tool service", async () => {
    for (const gw of [a, b]) {
      expect((await fetch(`${gw.baseUrl}/health`)).status).toBe(200)
      expect((await fetch(`${gw.toolsUrl}/health`)).status).toBe(200)
    }
    expect(a.baseUrl).not.toBe(b.baseUrl)
  })

  // Skipped without REDIS_URL (each instance then limits in memory: case (a') runs instead).
  it.runIf(redisUrl !== undefined)("(a) rate limits are global through Redis (skipped unless REDIS_URL is set): rpm 4, alternating instances, 4 pass then 429 on both", async () => {
    const t = await tenant("rate-limits")
    ok(await a.call("PUT", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/rate-limits`, { key: t.platformKey, body: { rpm_limit: 4 } }))
    const statuses: Array<number> = []
    for (let i = 0; i < 8; i++) {
      const res = await chat(pick(i), t.endUserKey)
      statuses.push(res.status)
      if (res.status === 429) {
        expect(res.body.error.code).toBe("rate_limit_exceeded")
        expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0)
      } else {
        expect(res.headers.get("x-ratelimit-limit-requests")).toBe("4")
      }
    }
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429, 429, 429])
    // The refusals never reached settlement: exactly four log rows, once the settlements (written
    // after the answers, a few milliseconds later) are in, and still four a moment after.
    const logCount = async () =>
      (await db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1", [t.platformId])).rows[0].n
    await pollUntil(async () => (await logCount()) >= 4, 5_000, 50)
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(await logCount()).toBe(4)
  })

  it.runIf(redisUrl === undefined)("(a') skipped when REDIS_URL is set ((a) runs instead); without it limits are per instance: rpm 4 behind a round robin lets 4 through on each", async () => {
    // Documents the memory limiter's behaviour behind a round robin (docs/operations.md).
    const t = await tenant("rate-limits-memory")
    ok(await a.call("PUT", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/rate-limits`, { key: t.platformKey, body: { rpm_limit: 4 } }))
    const statuses: Array<number> = []
    for (let i = 0; i < 10; i++) statuses.push((await chat(pick(i), t.endUserKey)).status)
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 429, 429])
  })

  it("(b) a key revoked on A is refused by B within a second (B had it cached)", async () => {
    const t = await tenant("revocation")
    // A second platform key, warmed into B's auth cache.
    const created = ok(await a.call("POST", `/v1/platforms/${t.platformId}/api-keys`, { key: t.platformKey, body: { name: "ci" } }), 201).body
    for (let i = 0; i < 3; i++) ok(await b.call("GET", `/v1/platforms/${t.platformId}`, { key: created.raw_key }))
    // The end user's key too (inference path).
    ok(await chat(b, t.endUserKey))

    ok(await a.call("PATCH", `/v1/platforms/${t.platformId}/api-keys/${created.id}`, { key: t.platformKey, body: { is_active: false } }))
    const platformKeyMs = await pollUntil(async () => (await b.call("GET", `/v1/platforms/${t.platformId}`, { key: created.raw_key })).status === 401, 1_000)
    const gone = await b.call("GET", `/v1/platforms/${t.platformId}`, { key: created.raw_key })
    expect(gone.status).toBe(401)
    expect(gone.body.error.code).toBe("invalid_api_key")

    expect((await a.call("DELETE", `/v1/platforms/${t.platformId}/api-keys/${t.endUserKeyId}?type=end_user`, { key: t.platformKey })).status).toBe(204)
    const endUserKeyMs = await pollUntil(async () => (await chat(b, t.endUserKey)).status === 401, 1_000)
    expect(platformKeyMs).toBeLessThanOrEqual(1_000)
    expect(endUserKeyMs).toBeLessThanOrEqual(1_000)
  })

  it("(c) 20 topups alternating instances: the receiver gets 20 distinct events, each once, though both instances dispatch", async () => {
    const t = await tenant("webhooks")
    const endpoint = ok(await a.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, { key: t.platformKey, body: { url: receiver.url } }), 201).body
    receiver.secret = endpoint.secret
    const transactionIds: Array<string> = []
    for (let i = 0; i < 20; i++) {
      const res = ok(await pick(i).call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/topup`, {
        key: t.platformKey,
        body: { amount_usd: 1, reason: `topup ${i}` }
      }))
      transactionIds.push(res.body.transaction.id as string)
    }
    await receiver.waitFor((r) => r.events.length >= 20, 15_000)
    // Give a duplicate (a second dispatcher, an expired lease) time to show up.
    await new Promise((r) => setTimeout(r, 1_500))
    expect(receiver.invalid).toEqual([])
    expect(receiver.requests.length).toBe(20)
    const ids = receiver.events.map((e) => e.headers["webhook-id"] as string)
    expect(new Set(ids).size).toBe(20)
    expect(receiver.events.every((e) => e.body.event_type === "budget.topped_up")).toBe(true)
    expect(new Set(receiver.events.map((e) => e.body.data.transaction_id))).toEqual(new Set(transactionIds))
    const deliveries = await db.pool.query(
      `SELECT d.status, d.attempt, (SELECT count(*)::int FROM webhook_delivery_attempts x WHERE x.delivery_id = d.id) AS attempts
         FROM webhook_deliveries d WHERE d.endpoint_id = $1`,
      [endpoint.id]
    )
    expect(deliveries.rows).toHaveLength(20)
    expect(deliveries.rows.every((row) => row.status === "delivered" && row.attempts === 1)).toBe(true)
  })

  it("(d) 40 concurrent chat completions on both instances settle exactly once each", async () => {
    const t = await tenant("settlement")
    const clients = [a, b].map((gw) => new OpenAI({ apiKey: t.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }))
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) =>
      clients[i % 2]!.chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: `call number ${i}` }] })))
    expect(new Set(answers.map((r) => r.id)).size).toBe(40)
    // Settlement is on the request path for JSON answers; allow a moment anyway.
    await pollUntil(async () => {
      const n = await db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1", [t.platformId])
      return n.rows[0].n >= 40
    }, 5_000, 50)
    const audit = await db.pool.query(
      `WITH logs AS (SELECT count(*)::int AS n, count(DISTINCT metadata->>'request_id')::int AS ids,
                            coalesce(sum(estimated_cost_usd), 0) AS cost
                       FROM inference_logs WHERE platform_id = $1),
            debits AS (SELECT count(*)::int AS n, count(DISTINCT metadata->>'request_id')::int AS ids,
                              coalesce(sum(amount_usd), 0) AS total
                         FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'),
            wallet_debits AS (SELECT count(*)::int AS n FROM platform_wallet_transactions
                                WHERE platform_id = $1 AND type = 'debit'),
            budget AS (SELECT used_usd FROM budgets WHERE end_user_id = $2 AND deleted_at IS NULL),
            wallet AS (SELECT balance_usd FROM platform_wallets WHERE platform_id = $1)
       SELECT logs.n AS logs, logs.ids AS log_ids, debits.n AS debits, debits.ids AS debit_ids,
              wallet_debits.n AS wallet_debits, logs.cost::text AS cost,
              logs.cost > 0 AS cost_positive,
              debits.total = logs.cost AS debits_equal_cost,
              budget.used_usd = logs.cost AS budget_used_equals_cost,
              10 - wallet.balance_usd = logs.cost AS wallet_change_equals_cost
         FROM logs, debits, wallet_debits, budget, wallet`,
      [t.platformId, t.endUserId]
    )
    expect(audit.rows[0]).toMatchObject({
      logs: 40,
      log_ids: 40,
      debits: 40,
      debit_ids: 40,
      wallet_debits: 40,
      cost_positive: true,
      debits_equal_cost: true,
      budget_used_equals_cost: true,
      wallet_change_equals_cost: true
    })
    // docs/operations.md's wallet check: the balance equals the sum of its rows.
    const walletRows = await db.pool.query(
      `SELECT w.balance_usd = coalesce(sum(CASE t.type WHEN 'topup' THEN t.amount_usd ELSE -t.amount_usd END), 0) AS wallet_ok
         FROM platform_wallets w LEFT JOIN platform_wallet_transactions t ON t.platform_id = w.platform_id
        WHERE w.platform_id = $1 GROUP BY w.platform_id, w.balance_usd`,
      [t.platformId]
    )
    expect(walletRows.rows).toEqual([{ wallet_ok: true }])
    expect(new Set(answers.map((r) => r.id))).toEqual(
      new Set((await db.pool.query("SELECT metadata->>'request_id' AS id FROM inference_logs WHERE platform_id = $1", [t.platformId])).rows.map((r) => r.id))
    )
  })

  it("(e) an MCP session opened on A is served by B with the same mcp-session-id; a DELETE on B ends it on A", async () => {
    const t = await tenant("mcp", { skills_enabled: true })
    const client = new Client({ name: "scaleout-test", version: "1.0.0" })
    const transport = new StreamableHTTPClientTransport(new URL(`${a.toolsUrl}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${t.endUserKey}` } }
    })
    await client.connect(transport)
    try {
      const names = (await client.listTools()).tools.map((tool) => tool.name)
      expect(names).toContain("find_skill")
      const sessionId = transport.sessionId!
      expect(sessionId).toBeTruthy()

      const session = (gw: GatewayProcess, method: "POST" | "DELETE") =>
        fetch(`${gw.toolsUrl}/mcp`, {
          method,
          headers: {
            authorization: `Bearer ${t.endUserKey}`,
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            "mcp-session-id": sessionId,
            ...(transport.protocolVersion === undefined ? {} : { "mcp-protocol-version": transport.protocolVersion })
          },
          ...(method === "POST" ? { body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list", params: {} }) } : {})
        })
      const onB = await session(b, "POST")
      expect(onB.status).toBe(200)
      expect(onB.headers.get("mcp-session-id")).toBe(sessionId)
      expect(await onB.text()).toContain("find_skill")
      expect((await session(b, "DELETE")).status).toBe(200)
      const onA = await session(a, "POST")
      expect(onA.status).toBe(404)
      expect(await onA.json()).toEqual({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null })
    } finally {
      await client.close()
    }
  })

  // @effect/sql-pg's listen() shares one connection whose errors are swallowed, so when that
  // connection dies (Postgres restart or failover, pg_terminate_backend, a proxy's idle reaper)
  // the LISTEN stream never ends. KeyAuth proves the channel with probe notifications every few
  // seconds and, when one goes missing, stops trusting its cache (a lookup per request), so a
  // revocation made on another instance still counts at once. Runs last: it kills both
  // instances' LISTEN connections.
  it("(f) after its LISTEN connection is killed, B still sees a revocation made on A within a few seconds", async () => {
    const t = await tenant("listen-killed")
    const created = ok(await a.call("POST", `/v1/platforms/${t.platformId}/api-keys`, { key: t.platformKey, body: { name: "ci" } }), 201).body
    ok(await b.call("GET", `/v1/platforms/${t.platformId}`, { key: created.raw_key }))
    const killed = await db.pool.query(
      `SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
        WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`
    )
    expect(killed.rows.length).toBeGreaterThan(0)
    await new Promise((r) => setTimeout(r, 4_500)) // one probe period (3 s) plus its wait (1 s)
    ok(await a.call("PATCH", `/v1/platforms/${t.platformId}/api-keys/${created.id}`, { key: t.platformKey, body: { is_active: false } }))
    await pollUntil(async () => (await b.call("GET", `/v1/platforms/${t.platformId}`, { key: created.raw_key })).status === 401, 3_000, 100)
  })
})

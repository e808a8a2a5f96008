// Webhooks end to end: endpoint management over HTTP on the real gateway, budget events enqueued
// through WebhookOutbox in a transaction, delivered to real receivers that verify the signature
// with `standardwebhooks`; retries, failure, rollback, several dispatchers, lease expiry, SSRF.
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, ConfigProvider, Effect, Either, Layer, ManagedRuntime, Redacted, Stream } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Webhook } from "standardwebhooks"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Crypto } from "../layers/platform/Crypto.js"
import { DatabaseLive } from "../layers/platform/Database.js"
import { DatabaseUrl } from "../layers/platform/EmbeddedPostgres.js"
import {
  type BudgetEventData,
  type BudgetEventType,
  buildEnvelope,
  WAKE_CHANNEL,
  WebhookOutbox
} from "../layers/ledger/WebhookOutbox.js"
import { parseRetrySchedule } from "../layers/lib/RetrySchedule.js"
import { checkUrl, isBlockedAddress } from "../layers/lib/SsrfGuard.js"
import { startReceiver, type WebhookReceiver } from "./fakes/WebhookReceiver.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const encryptionKey = randomBytes(32).toString("base64")
const SCHEDULE = "0s,200ms,200ms,200ms"
const env = {
  GATEWAY_ALLOW_PRIVATE_URLS: "true",
  GATEWAY_WEBHOOK_RETRY_SCHEDULE: SCHEDULE,
  GATEWAY_WEBHOOK_TIMEOUT: "1s",
  GATEWAY_ENCRYPTION_KEY: encryptionKey
}

type OutboxRuntime = ManagedRuntime.ManagedRuntime<WebhookOutbox | Crypto | SqlClient.SqlClient | PgClient.PgClient, unknown>

/** A second WebhookOutbox (with its own dispatcher) on the gateway's database, for enqueue. */
const makeOutbox = (dbUrl: string, dataDir: string): OutboxRuntime => {
  const provider = ConfigProvider.fromMap(new Map(Object.entries({ ...env, GATEWAY_DATA_DIR: dataDir, DATABASE_POOL_SIZE: "4" })))
  const layer = WebhookOutbox.Default.pipe(
    Layer.provideMerge(Crypto.Default),
    Layer.provideMerge(DatabaseLive),
    Layer.provide(Layer.succeed(DatabaseUrl, Redacted.make(dbUrl))),
    Layer.provide(Layer.setConfigProvider(provider))
  )
  return ManagedRuntime.make(layer)
}

let gw: Gateway
let outbox: OutboxRuntime
let dataDir: string
const receivers: Array<WebhookReceiver> = []

beforeAll(async () => {
  // Effect's own tracer (no exporter): the traceparent tests below need recorded spans.
  gw = await startGateway({ env, tracing: Layer.empty })
  dataDir = mkdtempSync(join(tmpdir(), "gateway-webhooks-test-"))
  outbox = makeOutbox(gw.db.url, dataDir)
  await outbox.runPromise(Effect.void)
})
afterAll(async () => {
  for (const r of receivers) await r.close()
  await outbox?.dispose()
  await gw?.close()
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true })
})

const receiver = async (options?: Parameters<typeof startReceiver>[0]) => {
  const r = await startReceiver(options)
  receivers.push(r)
  return r
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Tenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
}

const tenant = async (): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  const { endUserId, endUserKey } = await createEndUser(gw, platformId, platformKey, `u-${randomUUID()}`)
  return { platformId, platformKey, endUserId, endUserKey }
}

const register = async (t: Tenant, r: WebhookReceiver, eventTypes?: ReadonlyArray<string>) => {
  const body = eventTypes === undefined ? { url: r.url } : { url: r.url, event_types: eventTypes }
  const res = await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, { key: t.platformKey, body })
  if (res.status !== 201) throw new Error(`register: ${res.status} ${JSON.stringify(res.body)}`)
  r.secret = res.body.secret
  return res.body as { id: string; secret: string; event_types: Array<string> }
}

const eventData = (t: Tenant, overrides: Partial<BudgetEventData> = {}): BudgetEventData => ({
  platform_id: t.platformId,
  end_user_id: t.endUserId,
  budget_id: randomUUID(),
  transaction_id: randomUUID(),
  type: "topup",
  amount_usd: BigDecimal.unsafeFromString("2.50"),
  max_usd_after: BigDecimal.unsafeFromString("12.5000000000"),
  used_usd_after: BigDecimal.unsafeFromString("3.123456789"),
  remaining_usd_after: BigDecimal.unsafeFromString("9.376543211"),
  reason: "monthly allowance",
  metadata: { source: "test", nested: { n: 1 } },
  ...overrides
})

/** Enqueue inside a transaction, as the ledger does. */
const enqueue = (eventType: BudgetEventType, data: BudgetEventData, createdAt = new Date()) =>
  outbox.runPromise(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const o = yield* WebhookOutbox
    yield* o.enqueue(eventType, data, createdAt).pipe(sql.withTransaction)
  }))

const query = async <T = any>(text: string, params: Array<unknown> = []): Promise<Array<T>> =>
  (await gw.db.pool.query(text, params)).rows as Array<T>

const deliveries = async (t: Tenant, endpointId: string) => {
  const res = await gw.call("GET", `/v1/platforms/${t.platformId}/webhook-endpoints/${endpointId}/deliveries`, {
    key: t.platformKey
  })
  expect(res.status).toBe(200)
  return res.body as { data: Array<any>; total: number; page: number; limit: number }
}

const waitUntil = async (check: () => Promise<boolean>, timeoutMs = 10_000) => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`)
    await sleep(50)
  }
}

describe("webhook endpoints", () => {
  it("registers an endpoint: 201 with the secret once, never again, stored encrypted", async () => {
    const t = await tenant()
    const res = await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, {
      key: t.platformKey,
      body: { url: "https://hooks.example.com/budget" }
    })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({
      platform_id: t.platformId,
      url: "https://hooks.example.com/budget",
      event_types: ["budget.topped_up", "budget.low_balance", "budget.suspended", "budget.unsuspended"],
      is_active: true
    })
    expect(res.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/)
    expect(Buffer.from(res.body.secret.slice(6), "base64")).toHaveLength(24)
    expect(Date.parse(res.body.created_at)).not.toBeNaN()

    const one = await gw.call("GET", `/v1/platforms/${t.platformId}/webhook-endpoints/${res.body.id}`, { key: t.platformKey })
    expect(one.status).toBe(200)
    expect(one.body).toEqual({ ...res.body, secret: undefined, created_at: res.body.created_at })
    expect(one.body).not.toHaveProperty("secret")
    const list = await gw.call("GET", `/v1/platforms/${t.platformId}/webhook-endpoints`, { key: t.platformKey })
    expect(list.status).toBe(200)
    expect(list.body).toMatchObject({ total: 1, page: 1, limit: 20 })
    expect(list.body.data.map((e: any) => e.id)).toEqual([res.body.id])
    expect(JSON.stringify(list.body)).not.toContain(res.body.secret.slice(6))

    const [row] = await query("SELECT secret_encrypted, event_types FROM webhook_endpoints WHERE id = $1", [res.body.id])
    expect(row.event_types).toBeNull()
    expect(row.secret_encrypted).not.toContain(res.body.secret.slice(6))
    const decrypted = await outbox.runPromise(Effect.map(Crypto, (c) => c.decrypt(row.secret_encrypted)))
    expect(decrypted).toBe(res.body.secret)
  })

  it("keeps an explicit event_types list, including the opt-in budget.debited", async () => {
    const t = await tenant()
    const res = await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, {
      key: t.platformKey,
      body: { url: "http://hooks.example.com/x", event_types: ["budget.debited", "budget.low_balance"] }
    })
    expect(res.status).toBe(201)
    expect(res.body.event_types).toEqual(["budget.debited", "budget.low_balance"])
  })

  it("rejects bad bodies with 422 naming the field", async () => {
    const t = await tenant()
    const cases: Array<[unknown, string]> = [
      [{ url: "ftp://hooks.example.com/x" }, "url"],
      [{ url: "not a url" }, "url"],
      [{ url: "javascript:alert(1)" }, "url"],
      [{}, "url"],
      [{ url: "https://hooks.example.com/x", event_types: ["budget.nope"] }, "event_types.0"],
      [{ url: "https://hooks.example.com/x", event_types: ["budget.debited", "budget.debited"] }, "event_types"],
      [{ url: "https://hooks.example.com/x", event_types: [] }, "event_types"],
      [{ url: "https://hooks.example.com/x", secret: "mine" }, "secret"]
    ]
    for (const [body, param] of cases) {
      const res = await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, { key: t.platformKey, body })
      expect(res.status, JSON.stringify(body)).toBe(422)
      expect(res.body.error, JSON.stringify(body)).toMatchObject({ code: "validation_error", param })
    }
    const list = await gw.call("GET", `/v1/platforms/${t.platformId}/webhook-endpoints`, { key: t.platformKey })
    expect(list.body.total).toBe(0)
  })

  it("keeps tenants apart: another platform's endpoint is 404, end-user keys are 403", async () => {
    const a = await tenant()
    const b = await tenant()
    const r = await receiver()
    const endpoint = await register(a, r)
    const base = `/v1/platforms/${a.platformId}/webhook-endpoints`
    for (const [method, path] of [
      ["GET", `${base}/${endpoint.id}`],
      ["GET", `${base}/${endpoint.id}/deliveries`],
      ["DELETE", `${base}/${endpoint.id}`],
      ["GET", base]
    ] as const) {
      const cross = await gw.call(method, path, { key: b.platformKey })
      expect(cross.status, `${method} ${path}`).toBe(404)
      expect(cross.body.error.code).toBe("not_found")
    }
    // B's own platform path with A's endpoint id: still not found.
    const viaOwn = await gw.call("GET", `/v1/platforms/${b.platformId}/webhook-endpoints/${endpoint.id}`, { key: b.platformKey })
    expect(viaOwn.status).toBe(404)
    const delViaOwn = await gw.call("DELETE", `/v1/platforms/${b.platformId}/webhook-endpoints/${endpoint.id}`, { key: b.platformKey })
    expect(delViaOwn.status).toBe(404)
    const asEndUser = await gw.call("POST", base, { key: a.endUserKey, body: { url: r.url } })
    expect(asEndUser.status).toBe(403)
    expect(asEndUser.body.error.code).toBe("forbidden")
    const asAdmin = await gw.call("GET", base, { key: gw.adminKey })
    expect(asAdmin.status).toBe(403)
    const notUuid = await gw.call("GET", `${base}/nope`, { key: a.platformKey })
    expect(notUuid.status).toBe(404)
    const still = await gw.call("GET", `${base}/${endpoint.id}`, { key: a.platformKey })
    expect(still.status).toBe(200)
  })

  it("caps endpoints per platform at 20 by default: the 21st is 409 conflict", async () => {
    const t = await tenant()
    const base = `/v1/platforms/${t.platformId}/webhook-endpoints`
    for (let i = 0; i < 20; i++) {
      const res = await gw.call("POST", base, { key: t.platformKey, body: { url: `https://hooks.example.com/${i}` } })
      expect(res.status).toBe(201)
    }
    const refused = await gw.call("POST", base, { key: t.platformKey, body: { url: "https://hooks.example.com/21" } })
    expect(refused.status).toBe(409)
    expect(refused.body.error).toMatchObject({ code: "conflict", param: null })
    expect(refused.body.error.message).toMatch(/webhook endpoints allowed \(20\)/)
    expect((await gw.call("GET", base, { key: t.platformKey })).body.total).toBe(20)
  })

  it("deletes an endpoint: 204, gone from reads, its pending deliveries stop", async () => {
    const t = await tenant()
    const r = await receiver({ status: 500 })
    const endpoint = await register(t, r)
    await enqueue("budget.topped_up", eventData(t))
    await r.waitFor((x) => x.requests.length >= 1)
    const del = await gw.call("DELETE", `/v1/platforms/${t.platformId}/webhook-endpoints/${endpoint.id}`, { key: t.platformKey })
    expect(del.status).toBe(204)
    const seen = r.requests.length
    await sleep(800)
    // At most one attempt that was already in flight when the row went away.
    expect(r.requests.length).toBeLessThanOrEqual(seen + 1)
    const get = await gw.call("GET", `/v1/platforms/${t.platformId}/webhook-endpoints/${endpoint.id}`, { key: t.platformKey })
    expect(get.status).toBe(404)
    expect(await query("SELECT 1 FROM webhook_deliveries WHERE endpoint_id = $1", [endpoint.id])).toHaveLength(0)
    const again = await gw.call("DELETE", `/v1/platforms/${t.platformId}/webhook-endpoints/${endpoint.id}`, { key: t.platformKey })
    expect(again.status).toBe(404)
  })
})

describe("webhook delivery", () => {
  it("signs per Standard Webhooks and sends the spec's envelope exactly", async () => {
    const t = await tenant()
    const r = await receiver()
    const endpoint = await register(t, r)
    const data = eventData(t)
    const createdAt = new Date("2026-04-12T10:11:12.345Z")
    await enqueue("budget.topped_up", data, createdAt)
    await r.waitFor((x) => x.events.length === 1)
    const [event] = r.events
    expect(r.invalid).toEqual([])
    const eventId = `${data.transaction_id}:budget.topped_up`
    expect(event!.headers["webhook-id"]).toBe(eventId)
    expect(event!.headers["content-type"]).toBe("application/json")
    expect(Math.abs(Number(event!.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(30)
    expect(event!.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/)
    expect(event!.body).toEqual({
      event_type: "budget.topped_up",
      event_id: eventId,
      api_version: "2026-04-11",
      created_at: "2026-04-12T10:11:12.345Z",
      data: {
        platform_id: t.platformId,
        end_user_id: t.endUserId,
        budget_id: data.budget_id,
        transaction_id: data.transaction_id,
        type: "topup",
        amount_usd: 2.5,
        max_usd_after: 12.5,
        used_usd_after: 3.123456789,
        remaining_usd_after: 9.376543211,
        reason: "monthly allowance",
        metadata: { source: "test", nested: { n: 1 } }
      }
    })
    // The raw body keeps the spec's field order.
    expect(Object.keys(JSON.parse(event!.rawBody))).toEqual(["event_type", "event_id", "api_version", "created_at", "data"])
    expect(Object.keys(JSON.parse(event!.rawBody).data).slice(0, 4)).toEqual(["platform_id", "end_user_id", "budget_id", "transaction_id"])

    // The receiver library does reject a tampered body or another secret (the fake is not lenient).
    const headers = event!.headers as Record<string, string>
    expect(() => new Webhook(r.secret!).verify(event!.rawBody.replace("2.5", "25"), headers)).toThrow()
    expect(() => new Webhook(`whsec_${randomBytes(24).toString("base64")}`).verify(event!.rawBody, headers)).toThrow()
    const list = await deliveries(t, endpoint.id)
    expect(list.total).toBe(1)
    expect(list.data[0]).toMatchObject({
      event_id: eventId,
      event_type: "budget.topped_up",
      status: "delivered",
      http_status: 200,
      attempt: 1,
      next_attempt_at: null,
      last_error: null
    })
  })

  it("delivers events of the real ledger: a topup and a suspension through the budget API", async () => {
    const t = await tenant()
    const r = await receiver()
    await register(t, r)
    const path = `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`
    const created = await gw.call("POST", path, { key: t.platformKey, body: { max_usd: 10 } })
    expect(created.status).toBe(201)
    const topup = await gw.call("POST", `${path}/topup`, { key: t.platformKey, body: { amount_usd: 0.5, reason: "gift" } })
    expect(topup.status).toBe(200)
    await r.waitFor((x) => x.events.length === 1)
    expect(r.events[0]!.body).toMatchObject({
      event_type: "budget.topped_up",
      event_id: `${topup.body.transaction.id}:budget.topped_up`,
      api_version: "2026-04-11",
      data: {
        platform_id: t.platformId,
        end_user_id: t.endUserId,
        budget_id: topup.body.budget_id,
        transaction_id: topup.body.transaction.id,
        type: "topup",
        amount_usd: 0.5,
        max_usd_after: 10.5,
        used_usd_after: 0,
        remaining_usd_after: 10.5,
        reason: "gift"
      }
    })
    const suspend = await gw.call("PATCH", path, { key: t.platformKey, body: { is_suspended: true } })
    expect(suspend.status).toBe(200)
    await r.waitFor((x) => x.events.length === 2)
    expect(r.events[1]!.body.event_type).toBe("budget.suspended")
  })

  it("every budget transition through the API: its ledger row and its webhook", async () => {
    const t = await tenant()
    const all = await receiver()
    await register(t, all, ["budget.topped_up", "budget.low_balance", "budget.suspended", "budget.unsuspended", "budget.debited"])
    const path = `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`
    const call = (method: string, suffix: string, body?: unknown) => gw.call(method, `${path}${suffix}`, { key: t.platformKey, body })
    expect((await call("POST", "", { max_usd: 10, low_balance_threshold: 4 })).status).toBe(201)
    const d1 = await call("POST", "/debit", { amount_usd: 5 }) // remaining 5: above the threshold
    const d2 = await call("POST", "/debit", { amount_usd: 1 }) // remaining 4: crosses
    const d3 = await call("POST", "/debit", { amount_usd: 1 }) // remaining 3: already below, disarmed
    const suspended = await call("PATCH", "", { is_suspended: true, reason: "fraud check", metadata: { case: 9 } })
    const unsuspended = await call("PATCH", "", { is_suspended: false })
    const topup = await call("POST", "/topup", { amount_usd: 10 }) // re-arms
    const d4 = await call("POST", "/debit", { amount_usd: 9.5 }) // remaining 3.5: crosses again
    await all.waitFor((x) => x.events.length === 9)
    await sleep(300)
    const got = all.events.map((e) => e.body.event_id).sort()
    const rows = await query<{ id: string; type: string }>(
      "SELECT t.id, t.type FROM budget_transactions t JOIN budgets b ON b.id = t.budget_id WHERE b.end_user_id = $1 ORDER BY t.seq",
      [t.endUserId]
    )
    const adjustments = rows.filter((r) => r.type === "adjustment").map((r) => r.id)
    expect(got).toEqual([
      `${d1.body.transaction.id}:budget.debited`,
      `${d2.body.transaction.id}:budget.debited`,
      `${d2.body.transaction.id}:budget.low_balance`,
      `${d3.body.transaction.id}:budget.debited`,
      `${adjustments[0]}:budget.suspended`,
      `${adjustments[1]}:budget.unsuspended`,
      `${topup.body.transaction.id}:budget.topped_up`,
      `${d4.body.transaction.id}:budget.debited`,
      `${d4.body.transaction.id}:budget.low_balance`
    ].sort())
    expect(suspended.status).toBe(200)
    expect(unsuspended.status).toBe(200)
    const suspendedEvent = all.events.find((e) => e.body.event_type === "budget.suspended")!
    expect(suspendedEvent.body.data).toMatchObject({ type: "adjustment", reason: "fraud check", metadata: { case: 9 } })
    const low = all.events.filter((e) => e.body.event_type === "budget.low_balance").map((e) => e.body.data.remaining_usd_after)
    expect(low.sort()).toEqual([3.5, 4])
    expect(rows.map((r) => r.type)).toEqual(["opening", "debit", "debit", "debit", "adjustment", "adjustment", "topup", "debit"])
  })

  it("sends budget.debited only to endpoints that list it; the default set gets the rest", async () => {
    const t = await tenant()
    const byDefault = await receiver()
    const debits = await receiver()
    const topups = await receiver()
    await register(t, byDefault)
    await register(t, debits, ["budget.debited"])
    await register(t, topups, ["budget.topped_up"])
    const debit = eventData(t, { type: "debit" })
    await enqueue("budget.debited", debit)
    const low = eventData(t, { type: "debit" })
    await enqueue("budget.low_balance", low)
    await byDefault.waitFor((x) => x.events.length === 1)
    await debits.waitFor((x) => x.events.length === 1)
    await sleep(700)
    expect(byDefault.events.map((e) => e.body.event_type)).toEqual(["budget.low_balance"])
    expect(debits.events.map((e) => e.body.event_type)).toEqual(["budget.debited"])
    expect(debits.events[0]!.body.event_id).toBe(`${debit.transaction_id}:budget.debited`)
    expect(topups.requests).toHaveLength(0)
  })

  it("does not leak events across platforms", async () => {
    const a = await tenant()
    const b = await tenant()
    const ra = await receiver()
    const rb = await receiver()
    await register(a, ra)
    await register(b, rb)
    await enqueue("budget.suspended", eventData(a, { type: "adjustment" }))
    await ra.waitFor((x) => x.events.length === 1)
    await sleep(300)
    expect(rb.requests).toHaveLength(0)
  })

  it("retries a failing receiver and records every attempt", async () => {
    const t = await tenant()
    const r = await receiver({ failFirst: 2 })
    const endpoint = await register(t, r)
    const data = eventData(t)
    await enqueue("budget.topped_up", data)
    await r.waitFor((x) => x.events.length === 1)
    expect(r.requests.map((q) => q.status)).toEqual([500, 500, 200])
    // Same webhook-id on every attempt, so receivers can deduplicate.
    expect(new Set(r.requests.map((q) => q.headers["webhook-id"]))).toEqual(new Set([`${data.transaction_id}:budget.topped_up`]))
    await waitUntil(async () => (await deliveries(t, endpoint.id)).data[0]?.status === "delivered")
    const [d] = (await deliveries(t, endpoint.id)).data
    expect(d).toMatchObject({ status: "delivered", attempt: 3, http_status: 200, next_attempt_at: null })
    const attempts = await query("SELECT attempt, http_status, error FROM webhook_delivery_attempts WHERE delivery_id = $1 ORDER BY attempt", [d.id])
    expect(attempts).toEqual([
      { attempt: 1, http_status: 500, error: "HTTP 500" },
      { attempt: 2, http_status: 500, error: "HTTP 500" },
      { attempt: 3, http_status: 200, error: null }
    ])
  })

  it("cuts a receiver that never answers after GATEWAY_WEBHOOK_TIMEOUT: a failed attempt saying so", async () => {
    const t = await tenant()
    const r = await receiver({ hang: true })
    const endpoint = await register(t, r)
    await enqueue("budget.topped_up", eventData(t))
    await waitUntil(async () => (await deliveries(t, endpoint.id)).data[0]?.attempt >= 1)
    const [d] = (await deliveries(t, endpoint.id)).data
    expect(d.last_error).toBe("timed out after 1000 ms")
    expect(d.http_status).toBeNull()
    // The receiver saw the gateway give up on the request (its connection closed unanswered).
    await r.waitFor((x) => x.abandoned >= 1)
    expect(r.requests).toHaveLength(0)
  })

  it("fails a delivery for good once the schedule is used up", async () => {
    const t = await tenant()
    const down = await startReceiver()
    await down.close() // nobody listens on that port any more
    const endpoint = await register(t, down)
    await enqueue("budget.unsuspended", eventData(t, { type: "adjustment" }))
    await waitUntil(async () => (await deliveries(t, endpoint.id)).data[0]?.status === "failed")
    const [d] = (await deliveries(t, endpoint.id)).data
    expect(d).toMatchObject({ status: "failed", attempt: 4, http_status: null, next_attempt_at: null })
    expect(d.last_error).toMatch(/ECONNREFUSED/)
    const attempts = await query("SELECT attempt, http_status, error FROM webhook_delivery_attempts WHERE delivery_id = $1 ORDER BY attempt", [d.id])
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4])
    expect(attempts.every((a) => a.http_status === null && /ECONNREFUSED/.test(a.error))).toBe(true)
    await sleep(500)
    expect((await deliveries(t, endpoint.id)).data[0].attempt).toBe(4)
  })

  it("a receiver down for the whole schedule: the delivery is recorded failed, and the missed event is backfilled from GET budget/transactions with since", async () => {
    const t = await tenant()
    const r = await receiver()
    const endpoint = await register(t, r, ["budget.topped_up"])
    const path = `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`
    const call = (method: string, suffix: string, body?: unknown) => gw.call(method, `${path}${suffix}`, { key: t.platformKey, body })
    expect((await call("POST", "", { max_usd: 10 })).status).toBe(201)
    const seen = await call("POST", "/topup", { amount_usd: 1 })
    await r.waitFor((x) => x.events.length === 1)
    const lastSeen = r.events[0]!.body // what the receiver processed last, before its outage
    expect(lastSeen.event_id).toBe(`${seen.body.transaction.id}:budget.topped_up`)
    await r.close()
    const missed = await call("POST", "/topup", { amount_usd: 2 })
    expect(missed.status).toBe(200)
    const missedEventId = `${missed.body.transaction.id}:budget.topped_up`
    const failedDelivery = async () => (await deliveries(t, endpoint.id)).data.find((d) => d.event_id === missedEventId)
    await waitUntil(async () => (await failedDelivery())?.status === "failed")
    expect(await failedDelivery()).toMatchObject({ status: "failed", attempt: 4, next_attempt_at: null })
    expect(r.events.map((e) => e.body.event_id)).toEqual([lastSeen.event_id])
    // The receiver's backfill: every ledger row after the last event it processed.
    const backfill = await call("GET", `/transactions?since=${encodeURIComponent(lastSeen.created_at)}`)
    expect(backfill.status).toBe(200)
    const missedRow = backfill.body.data.find((row: any) => row.id === missed.body.transaction.id)
    expect(missedRow).toMatchObject({ type: "topup", amount_usd: 2, max_usd_after: 13 })
    expect(backfill.body.data.every((row: any) => row.created_at > lastSeen.created_at || row.id === seen.body.transaction.id)).toBe(true)
  })

  it("writes nothing when the enclosing transaction rolls back", async () => {
    const t = await tenant()
    const r = await receiver()
    const endpoint = await register(t, r)
    const data = eventData(t)
    const exit = await outbox.runPromiseExit(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const o = yield* WebhookOutbox
      yield* Effect.gen(function*() {
        yield* o.enqueue("budget.topped_up", data, new Date())
        return yield* Effect.fail("ledger check failed after the enqueue")
      }).pipe(sql.withTransaction)
    }))
    expect(exit._tag).toBe("Failure")
    await sleep(700)
    expect(await query("SELECT 1 FROM webhook_events WHERE event_id LIKE $1", [`${data.transaction_id}:%`])).toHaveLength(0)
    expect(await query("SELECT 1 FROM webhook_deliveries WHERE endpoint_id = $1", [endpoint.id])).toHaveLength(0)
    expect(r.requests).toHaveLength(0)
  })

  it("wakes dispatchers through NOTIFY when the transaction commits, not when it rolls back", async () => {
    const t = await tenant()
    const r = await receiver()
    await register(t, r)
    // The same listen() the dispatcher uses (it ignores notifications with an empty payload).
    const heard = outbox.runPromise(
      Effect.flatMap(PgClient.PgClient, (pg) => pg.listen(WAKE_CHANNEL).pipe(Stream.take(1), Stream.runCollect)).pipe(
        Effect.timeout("5 seconds")
      )
    )
    await sleep(300)
    const rolledBack = await outbox.runPromiseExit(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const o = yield* WebhookOutbox
      yield* Effect.gen(function*() {
        yield* o.enqueue("budget.suspended", eventData(t), new Date())
        return yield* Effect.fail("rolled back")
      }).pipe(sql.withTransaction)
    }))
    expect(rolledBack._tag).toBe("Failure")
    await sleep(300)
    await enqueue("budget.unsuspended", eventData(t))
    expect([...(await heard)]).toEqual(["budget.unsuspended"])
  })

  it("enqueues an event once even when the same transaction id is enqueued again", async () => {
    const t = await tenant()
    const r = await receiver()
    const endpoint = await register(t, r)
    const data = eventData(t)
    await enqueue("budget.topped_up", data)
    await enqueue("budget.topped_up", data)
    await r.waitFor((x) => x.events.length >= 1)
    await sleep(500)
    expect(r.events).toHaveLength(1)
    expect((await deliveries(t, endpoint.id)).total).toBe(1)
  })

  it("sends a W3C traceparent in the enqueuing span's trace, or a new trace when none was stored", async () => {
    const t = await tenant()
    const r = await receiver()
    await register(t, r)
    // Enqueued under a span of ours: the delivery continues its trace (Effect's own tracer here).
    const data = eventData(t)
    const traceId = await outbox.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const o = yield* WebhookOutbox
      yield* o.enqueue("budget.topped_up", data, new Date()).pipe(sql.withTransaction)
      return (yield* Effect.currentSpan).traceId
    }).pipe(Effect.withSpan("test.budget_write")))
    await r.waitFor((x) => x.events.length === 1)
    const [stored] = await query<{ traceparent: string }>("SELECT traceparent FROM webhook_events WHERE event_id = $1", [
      `${data.transaction_id}:budget.topped_up`
    ])
    expect(stored!.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    const sent = String(r.events[0]!.headers.traceparent)
    expect(sent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    // The header names the delivery span, a child of the stored one, not the stored span itself.
    expect(sent.split("-")[2]).not.toBe(stored!.traceparent.split("-")[2])

    // Rows without a usable context (written before migration 0010, or garbled) still go out, in
    // a trace of their own.
    for (const traceparent of [null, "not-a-traceparent"]) {
      const envelope = buildEnvelope("budget.topped_up", eventData(t), new Date())
      const [ev] = await query(
        "INSERT INTO webhook_events (event_id, platform_id, event_type, payload, traceparent) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        [envelope.event_id, t.platformId, envelope.event_type, JSON.stringify(envelope), traceparent]
      )
      await query("INSERT INTO webhook_deliveries (event_id, endpoint_id) SELECT $1, id FROM webhook_endpoints WHERE platform_id = $2", [
        ev.id,
        t.platformId
      ])
      await r.waitFor((x) => x.events.some((e) => e.body.event_id === envelope.event_id))
      const header = String(r.events.find((e) => e.body.event_id === envelope.event_id)!.headers.traceparent)
      expect(header).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
      expect(header.split("-")[1]).not.toBe(traceId)
    }
    expect(r.invalid).toEqual([])
  })

  it("delivers each of 20 events exactly once with several dispatchers running", async () => {
    const t = await tenant()
    const r = await receiver()
    await register(t, r)
    // The gateway's dispatcher, the test outbox's, and one more instance all compete.
    const third = makeOutbox(gw.db.url, dataDir)
    await third.runPromise(Effect.void)
    try {
      const events = Array.from({ length: 20 }, () => eventData(t, { type: "debit" }))
      await outbox.runPromise(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const o = yield* WebhookOutbox
        yield* Effect.forEach(events, (d) => o.enqueue("budget.low_balance", d, new Date())).pipe(sql.withTransaction)
      }))
      await r.waitFor((x) => x.events.length >= 20)
      await sleep(700)
      expect(r.requests).toHaveLength(20)
      const ids = r.events.map((e) => e.body.event_id)
      expect(new Set(ids).size).toBe(20)
      expect(new Set(ids)).toEqual(new Set(events.map((d) => `${d.transaction_id}:budget.low_balance`)))
    } finally {
      await third.dispose()
    }
  })

  it("redelivers a delivery whose lease expired (a dispatcher crashed mid-send), and not before", async () => {
    const t = await tenant()
    const r = await receiver()
    const endpoint = await register(t, r)
    const insertClaimed = async (leaseSql: string) => {
      const data = eventData(t)
      const envelope = buildEnvelope("budget.topped_up", data, new Date())
      const [ev] = await query(
        "INSERT INTO webhook_events (event_id, platform_id, event_type, payload) VALUES ($1, $2, $3, $4) RETURNING id",
        [envelope.event_id, t.platformId, envelope.event_type, JSON.stringify(envelope)]
      )
      await query(
        `INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempt, next_attempt_at, lease_until)
         VALUES ($1, $2, 'pending', 0, now() - interval '1 minute', ${leaseSql})`,
        [ev.id, endpoint.id]
      )
      return envelope.event_id
    }
    const expired = await insertClaimed("now() - interval '1 second'")
    await r.waitFor((x) => x.events.some((e) => e.body.event_id === expired))

    const held = await insertClaimed("now() + interval '2 seconds'")
    await sleep(1000)
    expect(r.events.some((e) => e.body.event_id === held)).toBe(false)
    await r.waitFor((x) => x.events.some((e) => e.body.event_id === held), 5000)
    expect(r.events).toHaveLength(2)
    expect(r.invalid).toEqual([])
  })
})

describe("SSRF guard", () => {
  let strict: Gateway
  beforeAll(async () => {
    strict = await startGateway({
      env: { GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,100ms", GATEWAY_ENCRYPTION_KEY: encryptionKey }
    })
  })
  afterAll(async () => {
    await strict?.close()
  })

  it("refuses loopback, private, link-local and metadata URLs at registration (422 url)", async () => {
    const { platformId, platformKey } = await createPlatform(strict)
    for (
      const url of [
        "http://127.0.0.1:9/x",
        "http://localhost:9/x",
        "http://[::1]/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://169.254.169.254/latest/meta-data",
        "http://10.1.2.3/x",
        "http://192.168.0.1/x",
        "http://172.16.5.5/x",
        "http://100.64.0.1/x",
        "http://0.0.0.0/x",
        "http://2130706433/x",
        "http://0x7f.0.0.1/x",
        "http://[fd00::1]/x",
        "http://[fe80::1]/x"
      ]
    ) {
      const res = await strict.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, { key: platformKey, body: { url } })
      expect(res.status, url).toBe(422)
      expect(res.body.error, url).toMatchObject({ code: "validation_error", param: "url" })
    }
    const publicOk = await strict.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, {
      key: platformKey,
      body: { url: "https://93.184.215.14/hooks" }
    })
    expect(publicOk.status).toBe(201)
  })

  it("refuses again at delivery time: a failed attempt with the reason, nothing sent", async () => {
    const { platformId } = await createPlatform(strict)
    const r = await receiver()
    r.secret = "whsec_" + randomBytes(24).toString("base64")
    // As if the URL had been accepted earlier (e.g. its DNS pointed elsewhere at registration).
    const [ep] = (await strict.db.pool.query(
      "INSERT INTO webhook_endpoints (platform_id, url, secret_encrypted) VALUES ($1, $2, 'unused') RETURNING id",
      [platformId, r.url]
    )).rows
    const envelope = buildEnvelope("budget.topped_up", {
      ...eventData({ platformId, platformKey: "", endUserId: randomUUID(), endUserKey: "" })
    }, new Date())
    const [ev] = (await strict.db.pool.query(
      "INSERT INTO webhook_events (event_id, platform_id, event_type, payload) VALUES ($1, $2, $3, $4) RETURNING id",
      [envelope.event_id, platformId, envelope.event_type, JSON.stringify(envelope)]
    )).rows
    const [d] = (await strict.db.pool.query(
      "INSERT INTO webhook_deliveries (event_id, endpoint_id) VALUES ($1, $2) RETURNING id",
      [ev.id, ep.id]
    )).rows
    const deadline = Date.now() + 10_000
    let row: any
    while (Date.now() < deadline) {
      ;[row] = (await strict.db.pool.query("SELECT status, attempt, last_error FROM webhook_deliveries WHERE id = $1", [d.id])).rows
      if (row.status === "failed") break
      await sleep(50)
    }
    expect(row).toMatchObject({ status: "failed", attempt: 2 })
    expect(row.last_error).toMatch(/private or reserved address/)
    const attempts = (await strict.db.pool.query("SELECT error FROM webhook_delivery_attempts WHERE delivery_id = $1", [d.id])).rows
    expect(attempts).toHaveLength(2)
    expect(r.requests).toHaveLength(0)
  })

  it("classifies addresses", () => {
    const blocked = [
      "127.0.0.1", "127.255.255.254", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
      "100.64.0.1", "100.127.255.255", "0.0.0.0", "0.1.2.3", "224.0.0.1", "255.255.255.255",
      "::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "fe80::1%eth0", "ff02::1",
      "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:10.0.0.1", "::ffff:a9fe:a9fe", "::127.0.0.1",
      "64:ff9b::10.0.0.1", "2002:7f00:1::1", "not-an-ip"
    ]
    const allowed = ["93.184.215.14", "8.8.8.8", "172.32.0.1", "100.128.0.1", "169.255.0.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8"]
    for (const ip of blocked) expect(isBlockedAddress(ip), ip).toBe(true)
    for (const ip of allowed) expect(isBlockedAddress(ip), ip).toBe(false)
  })

  it("checks schemes even when private URLs are allowed", async () => {
    const run = (url: string, allow: boolean) => Effect.runPromise(Effect.either(checkUrl(url, allow)))
    expect(Either.isLeft(await run("ftp://example.com/", true))).toBe(true)
    expect(Either.isLeft(await run("file:///etc/passwd", true))).toBe(true)
    expect(Either.isRight(await run("http://127.0.0.1:1/", true))).toBe(true)
    expect(Either.isLeft(await run("http://127.0.0.1:1/", false))).toBe(true)
    expect(Either.isLeft(await run("http://does-not-exist.invalid/", false))).toBe(true)
  })
})

describe("retry schedule", () => {
  it("parses durations and refuses nonsense", () => {
    expect(parseRetrySchedule("0s,5s,5m,30m,2h,5h,10h,10h")).toEqual(
      Either.right([0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000])
    )
    expect(parseRetrySchedule(" 0s, 200ms ,1.5s,1d")).toEqual(Either.right([0, 200, 1_500, 86_400_000]))
    // The one duration format: plain numbers are milliseconds, Effect's words are read too.
    expect(parseRetrySchedule("0,250,30 seconds,2 days")).toEqual(Either.right([0, 250, 30_000, 172_800_000]))
    expect(Either.isLeft(parseRetrySchedule("5x"))).toBe(true)
    expect(Either.isLeft(parseRetrySchedule("0s,-1s"))).toBe(true)
    expect(Either.isLeft(parseRetrySchedule(""))).toBe(true)
    expect(Either.isLeft(parseRetrySchedule("1s,,2s"))).toBe(true)
  })
})

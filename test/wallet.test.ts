// The display wallet: settings rules validation, every display-ledger transition with its audit
// row, clamping, idempotency, 403 for end-user keys, /v1/me/budget shapes and 404s, rules applied
// exactly at settlement under concurrency, and display exhaustion refusing inference.
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type ApiResponse, catalogMockEcho, createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
beforeAll(async () => {
  gw = await startGateway()
  await catalogMockEcho(gw, "echo")
})
afterAll(async () => {
  await gw?.close()
})

interface Tenant {
  platformId: string
  platformKey: string
  endUserId: string
  endUserKey: string
  call: (method: string, suffix: string, body?: unknown, headers?: Record<string, string>) => Promise<ApiResponse>
}

const tenant = async (settings: Record<string, unknown> | null = { end_user_wallet: { enabled: true, unit: "gems" } }): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw, settings === null ? { name: "W" } : { name: "W", settings })
  const eu = await createEndUser(gw, platformId, platformKey, "wallet-user")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 10 } })
  const call: Tenant["call"] = (method, suffix, body, headers) =>
    gw.call(method, `/v1/platforms/${platformId}/end-users/${eu.endUserId}/wallet${suffix}`, {
      key: platformKey,
      body,
      ...(headers ? { headers } : {})
    })
  return { platformId, platformKey, ...eu, call }
}

const auditRows = async (t: Tenant) =>
  (await gw.db.pool.query(
    `SELECT d.type, d.amount_display::text AS amount, d.max_display_after::text AS max_after, d.used_display_after::text AS used_after, d.reason
     FROM display_transactions d JOIN budgets b ON b.id = d.budget_id WHERE b.end_user_id = $1 ORDER BY d.seq`,
    [t.endUserId]
  )).rows

describe("settings", () => {
  it("validates the rules on PATCH: at most 8, no duplicate trigger, the right amount field, non-negative", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const patch = (rules: unknown) => gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body: { settings: { end_user_wallet: { rules } } } })
    const ok = await patch([{ trigger: "inference_call", amount: 1 }, { trigger: "usd_spent", amount_per_usd: 100 }, { trigger: "tool_call", amount: 0.5 }])
    expect(ok.status).toBe(200)
    const bad: Array<unknown> = [
      [{ trigger: "inference_call", amount: 1 }, { trigger: "inference_call", amount: 2 }],
      Array.from({ length: 9 }, () => ({ trigger: "tool_call", amount: 1 })),
      [{ trigger: "inference_call", amount: -1 }],
      [{ trigger: "usd_spent", amount: 1 }],
      [{ trigger: "per_token", amount: 1 }]
    ]
    for (const rules of bad) {
      const res = await patch(rules)
      expect(res.status, JSON.stringify(rules)).toBe(422)
      expect(res.body.error.code).toBe("validation_error")
      expect(String(res.body.error.param)).toContain("settings.end_user_wallet.rules")
    }
    const after = await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })
    expect(after.body.settings.end_user_wallet.rules).toHaveLength(3)
  })
})

describe("display ledger transitions", () => {
  it("init, overwrite up and down, topup, adjust with clamping, disable; one audit row each", async () => {
    const t = await tenant()
    const before = await t.call("GET", "")
    expect(before.status).toBe(200)
    expect(before.body).toMatchObject({ end_user_id: t.endUserId, usd_ledger: { max_usd: 10, used_usd: 0, remaining_usd: 10 }, display_ledger: null })
    expect((await t.call("POST", "/topup", { amount_display: 5 })).body.error.code).toBe("display_ledger_not_initialized")
    expect((await t.call("POST", "/adjust", { delta: 5, reason: "x" })).status).toBe(409)

    const init = await t.call("POST", "", { max_display: 100, reason: "plan" })
    expect(init.body).toEqual({ budget_id: before.body.budget_id, max_display: 100, used_display: 0, idempotent_replay: false, no_changes: false })
    const debit = await t.call("POST", "/adjust", { delta: -30, reason: "usage import" })
    expect(debit.body).toMatchObject({ used_display: 30, requested_delta: -30, applied_delta: -30, clamped: false })
    const same = await t.call("POST", "", { max_display: 100 })
    expect(same.body).toMatchObject({ no_changes: true, used_display: 30 })
    const up = await t.call("POST", "", { max_display: 150 })
    expect(up.body).toMatchObject({ max_display: 150, used_display: 30, no_changes: false })
    const down = await t.call("POST", "", { max_display: 120 })
    expect(down.body).toMatchObject({ max_display: 120, used_display: 30 })
    const topup = await t.call("POST", "/topup", { amount_display: 5 })
    expect(topup.body).toMatchObject({ max_display: 125, used_display: 30 })

    const credit = await t.call("POST", "/adjust", { delta: 50, reason: "goodwill" })
    expect(credit.body).toMatchObject({ used_display: 0, requested_delta: 50, applied_delta: 30, clamped: true })
    const overdraw = await t.call("POST", "/adjust", { delta: -500, reason: "penalty" })
    expect(overdraw.body).toMatchObject({ used_display: 125, requested_delta: -500, applied_delta: -125, clamped: true })
    for (const reason of ["", "   "]) {
      const res = await t.call("POST", "/adjust", { delta: 1, reason })
      expect(res.status).toBe(422)
      expect(res.body.error.param).toBe("reason")
    }
    const view = await t.call("GET", "")
    expect(view.body.display_ledger).toEqual({ unit: "gems", max: 125, used: 125, remaining: 0, active_rules: [] })

    expect((await t.call("DELETE", "")).status).toBe(204)
    expect((await t.call("DELETE", "")).status).toBe(204)
    expect((await t.call("GET", "")).body).toMatchObject({ display_ledger: null, usd_ledger: { max_usd: 10, used_usd: 0 } })
    expect((await gw.call("GET", "/v1/me/budget", { key: t.endUserKey })).status).toBe(404)

    expect((await auditRows(t)).map((r) => [r.type, r.amount, r.reason])).toEqual([
      ["opening", "100", "plan"],
      ["adjustment", "-30", "usage import"],
      ["topup", "50", null],
      ["topup", "-30", null],
      ["topup", "5", null],
      ["adjustment", "30", "goodwill"],
      ["adjustment", "-125", "penalty"],
      ["adjustment", "-125", "wallet_disabled"]
    ])
  })

  it("Idempotency-Key on init: replay and 409", async () => {
    const t = await tenant()
    const h = { "idempotency-key": "init-1" }
    const first = await t.call("POST", "", { max_display: 10 }, h)
    const replay = await t.call("POST", "", { max_display: 10 }, h)
    expect(first.body.idempotent_replay).toBe(false)
    expect(replay.body).toMatchObject({ idempotent_replay: true, max_display: 10 })
    const conflict = await t.call("POST", "", { max_display: 11 }, h)
    expect(conflict.status).toBe(409)
    expect(conflict.body.error.code).toBe("idempotency_conflict")
    const adj1 = await t.call("POST", "/adjust", { delta: -1, reason: "a" }, { "idempotency-key": "adj" })
    const adj2 = await t.call("POST", "/adjust", { delta: -1, reason: "a" }, { "idempotency-key": "adj" })
    expect(adj2.body).toMatchObject({ idempotent_replay: true, used_display: 1 })
    expect(adj1.body.idempotent_replay).toBe(false)
    expect(await auditRows(t)).toHaveLength(2)
  })

  it("end-user keys get 403 on every wallet endpoint", async () => {
    const t = await tenant()
    for (const [method, suffix, body] of [["GET", "", undefined], ["POST", "", { max_display: 1 }], ["POST", "/topup", { amount_display: 1 }], ["POST", "/adjust", { delta: 1, reason: "x" }], ["DELETE", "", undefined]] as const) {
      const res = await gw.call(method, `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/wallet${suffix}`, { key: t.endUserKey, body })
      expect(res.status, `${method} ${suffix}`).toBe(403)
    }
  })
})

describe("/v1/me/budget", () => {
  it("display shape when enabled and initialised; 404 when off or uninitialised; legacy USD shape", async () => {
    const enabled = await tenant()
    const me = (t: Tenant) => gw.call("GET", "/v1/me/budget", { key: t.endUserKey })
    expect((await me(enabled)).status).toBe(404)
    await enabled.call("POST", "", { max_display: 40 })
    await enabled.call("POST", "/adjust", { delta: -15, reason: "use" })
    const shape = await me(enabled)
    expect(shape.body).toEqual({ unit: "gems", max: 40, used: 15, remaining: 25, period: "one_time", period_start: expect.any(String) })
    expect(JSON.stringify(shape.body)).not.toMatch(/usd/i)

    const off = await tenant({ end_user_wallet: { enabled: false } })
    await off.call("POST", "", { max_display: 40 })
    const offRes = await me(off)
    expect(offRes.status).toBe(404)
    expect(offRes.body.error.code).toBe("not_found")
    expect(offRes.body.error.message).toBe((await me(await tenant())).body.error.message)

    const legacy = await tenant(null)
    await gw.call("POST", `/v1/platforms/${legacy.platformId}/end-users/${legacy.endUserId}/budget/debit`, { key: legacy.platformKey, body: { amount_usd: 2.5 } })
    expect((await me(legacy)).body).toMatchObject({ unit: "USD", max: 10, used: 2.5, remaining: 7.5, period: "one_time" })
    expect((await gw.call("GET", "/v1/me/budget", { key: legacy.platformKey })).status).toBe(403)
  })
})

describe("rules at settlement", () => {
  it("parallel calls with all three rules: used_display is the exact sum of the rule amounts", async () => {
    const t = await tenant({
      end_user_wallet: {
        enabled: true,
        rules: [{ trigger: "inference_call", amount: 1.5 }, { trigger: "usd_spent", amount_per_usd: 1000 }, { trigger: "tool_call", amount: 2 }]
      }
    })
    await gw.call("PUT", `/v1/platforms/${t.platformId}/provider-keys/mock`, { key: t.platformKey, body: { api_key: "k" } })
    await gw.call("POST", `/v1/admin/platforms/${t.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
    await t.call("POST", "", { max_display: 100000 })
    const client = new OpenAI({ apiKey: t.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
    await Promise.all(Array.from({ length: 30 }, (_, i) =>
      client.chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: `message ${i} ${"x".repeat(i)}` }] })
    ))
    const { rows: [sums] } = await gw.db.pool.query(
      `SELECT (SELECT used_display FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL)
         = 30 * 1.5 + 1000 * (SELECT sum(estimated_cost_usd) FROM inference_logs WHERE end_user_id = $1) AS exact,
         (SELECT count(*)::int FROM inference_logs WHERE end_user_id = $1) AS calls`,
      [t.endUserId]
    )
    expect(sums).toEqual({ exact: true, calls: 30 })
  })

  it("an exhausted display ledger refuses inference with 402 budget_exhausted (display_ledger) before the upstream", async () => {
    const t = await tenant({ end_user_wallet: { enabled: true, rules: [{ trigger: "inference_call", amount: 1 }] } })
    await gw.call("PUT", `/v1/platforms/${t.platformId}/provider-keys/mock`, { key: t.platformKey, body: { api_key: "k" } })
    await gw.call("POST", `/v1/admin/platforms/${t.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
    await t.call("POST", "", { max_display: 2 })
    const ask = () => gw.call("POST", "/v1/chat/completions", { key: t.endUserKey, body: { model: "mock-echo", messages: [{ role: "user", content: "hi" }] } })
    expect((await ask()).status).toBe(200)
    expect((await ask()).status).toBe(200)
    const refused = await ask()
    expect(refused.status).toBe(402)
    expect(refused.body.error).toMatchObject({ code: "budget_exhausted", param: "display_ledger" })
    const logs = await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE end_user_id = $1", [t.endUserId])
    expect(logs.rows[0].n).toBe(2)
    // The USD ledger is untouched by the display rules: only the two calls' costs.
    const view = await t.call("GET", "")
    expect(view.body.display_ledger).toMatchObject({ max: 2, used: 2, remaining: 0 })
  })
})

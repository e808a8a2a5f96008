// Hostile numbers over real HTTP: money decoded exactly from the JSON text with a scale and a
// magnitude bound, integers and dates bounded by their columns, every refusal a 422 naming the
// field that leaves the ledger as it was; Idempotency-Key on the operator wallet topup.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
let platformId: string
let platformKey: string
let endUserId: string

beforeAll(async () => {
  gw = await startGateway()
  ;({ platformId, platformKey } = await createPlatform(gw))
  ;({ endUserId } = await createEndUser(gw, platformId, platformKey, "numbers-user"))
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${endUserId}/budget`, { key: platformKey, body: { max_usd: 10 } }), 201)
})
afterAll(async () => {
  await gw?.close()
})

const budgetPath = () => `/v1/platforms/${platformId}/end-users/${endUserId}/budget`
const walletTopupPath = (pid = platformId) => `/v1/admin/platforms/${pid}/platform-wallet/topup`
const json = (rawBody: string) => ({ rawBody, headers: { "content-type": "application/json" } })

/** Everything a money refusal must leave alone. */
const ledgerState = async () => {
  const q = async (sql: string) => (await gw.db.pool.query(sql)).rows
  return {
    budgets: await q("SELECT id, max_usd::text, used_usd::text FROM budgets ORDER BY id"),
    budgetRows: await q("SELECT count(*)::int AS n FROM budget_transactions"),
    wallets: await q("SELECT platform_id, balance_usd::text FROM platform_wallets ORDER BY platform_id"),
    walletRows: await q("SELECT count(*)::int AS n FROM platform_wallet_transactions")
  }
}

const expect422 = (res: { status: number; body: any }, param: string | null) => {
  expect(res.status, JSON.stringify(res.body)).toBe(422)
  expect(res.body.error.code).toBe("validation_error")
  expect(res.body.error.param).toBe(param)
}

describe("money", () => {
  it("refuses 1e309, 1e300, 1e-30 and 30 decimal places with 422 naming the field; nothing changes", async () => {
    const before = await ledgerState()
    for (const literal of ["1e309", "-1e309", "1e300", "1e-30", "0.123456789012345678901234567890", "1000000000000", "\"1e309\"", "\"12,50\""]) {
      expect422(await gw.call("POST", `${budgetPath()}/topup`, { key: platformKey, ...json(`{"amount_usd": ${literal}}`) }), "amount_usd")
      expect422(await gw.call("POST", walletTopupPath(), { key: gw.adminKey, ...json(`{"amount_usd": ${literal}}`) }), "amount_usd")
    }
    // The same in every other money field: a PATCH, an adjustment, a price.
    expect422(await gw.call("PATCH", budgetPath(), { key: platformKey, ...json(`{"max_usd": 1e309}`) }), "max_usd")
    expect422(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${endUserId}/wallet/adjust`, {
      key: platformKey, ...json(`{"delta": -1e300, "reason": "x"}`)
    }), "delta")
    expect422(await gw.call("POST", "/v1/admin/models", {
      key: gw.adminKey, ...json(`{"slug": "m", "providers": [{"provider": "p", "provider_model_id": "x", "input_usd_per_mtok": 1e309}]}`)
    }), "providers.0.input_usd_per_mtok")
    expect422(await gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, ...json(`{"settings": {"default_budget_usd": 1e309}}`) }), "settings.default_budget_usd")
    expect(await ledgerState()).toEqual(before)
  })

  it("stores 123456789.0000000001 exactly, sent as a number or as a string; 0.1 stays 0.1", async () => {
    const { platformId: pid } = await createPlatform(gw)
    ok(await gw.call("POST", walletTopupPath(pid), { key: gw.adminKey, ...json(`{"amount_usd": 123456789.0000000001}`) }))
    ok(await gw.call("POST", walletTopupPath(pid), { key: gw.adminKey, ...json(`{"amount_usd": "123456789.0000000001"}`) }))
    ok(await gw.call("POST", walletTopupPath(pid), { key: gw.adminKey, ...json(`{"amount_usd": 0.1}`) }))
    const [wallet] = (await gw.db.pool.query("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1", [pid])).rows
    expect(wallet.balance_usd).toBe("246913578.1000000002")
    const rows = (await gw.db.pool.query(
      "SELECT amount_usd::text FROM platform_wallet_transactions WHERE platform_id = $1 ORDER BY seq", [pid])).rows
    expect(rows.map((r) => r.amount_usd)).toEqual(["123456789.0000000001", "123456789.0000000001", "0.1"])

    const eu = await createEndUser(gw, platformId, platformKey, "exact-budget")
    const created = await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, {
      key: platformKey, ...json(`{"max_usd": 999999999999.9999999999, "low_balance_threshold": "0.0000000001"}`)
    })
    ok(created, 201)
    const [budget] = (await gw.db.pool.query(
      "SELECT max_usd::text, low_balance_threshold::text FROM budgets WHERE end_user_id = $1", [eu.endUserId])).rows
    expect(budget).toEqual({ max_usd: "999999999999.9999999999", low_balance_threshold: "0.0000000001" })
  })

  it("answers money as plain JSON numbers: no accepted amount comes back in exponent form like 1e+21", async () => {
    const { platformId: pid, platformKey: key } = await createPlatform(gw)
    for (const literal of ["999999999999.99", "1e21", "1e300"]) {
      const res = await fetch(`${gw.baseUrl}${walletTopupPath(pid)}`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.adminKey}`, "content-type": "application/json" },
        body: `{"amount_usd": ${literal}}`
      })
      const text = await res.text()
      if (res.status === 200) expect(text, literal).not.toMatch(/\de\+\d/)
      else expect(res.status, literal).toBe(422)
    }
    const wallet = await fetch(`${gw.baseUrl}/v1/platforms/${pid}/platform-wallet`, { headers: { authorization: `Bearer ${key}` } })
    expect(await wallet.text()).toContain(`"balance_usd":999999999999.99`)
  })
})

describe("integers, dates and pages", () => {
  it("rate limits must fit the integer columns: 2147483648 and 1e309 are 422, 2147483647 is stored", async () => {
    const path = `/v1/platforms/${platformId}/end-users/${endUserId}/rate-limits`
    expect422(await gw.call("PUT", path, { key: platformKey, body: { rpm_limit: 2147483648 } }), "rpm_limit")
    expect422(await gw.call("PUT", path, { key: platformKey, ...json(`{"tpm_limit": 1e309}`) }), "tpm_limit")
    expect422(await gw.call("PUT", path, { key: platformKey, ...json(`{"rpd_limit": 12345678901234567890}`) }), "rpd_limit")
    expect422(await gw.call("PATCH", `/v1/platforms/${platformId}`, {
      key: platformKey, body: { settings: { default_rate_limits: { rpm_limit: 2147483648 } } }
    }), "settings.default_rate_limits.rpm_limit")
    expect((await gw.db.pool.query("SELECT count(*)::int AS n FROM end_user_rate_limits")).rows[0].n).toBe(0)
    const put = ok(await gw.call("PUT", path, { key: platformKey, body: { rpm_limit: 2147483647 } }))
    expect(put.body.rpm_limit).toBe(2147483647)
  })

  it("settings stored before the bounds existed stay readable and patchable", async () => {
    const { platformId: pid, platformKey: key } = await createPlatform(gw)
    await gw.db.pool.query(
      `UPDATE platforms SET settings = '{"default_rate_limits": {"rpm_limit": 3000000000}, "default_budget_usd": 1e300}'::jsonb WHERE id = $1`, [pid])
    const read = ok(await gw.call("GET", `/v1/platforms/${pid}`, { key }))
    expect(read.body.settings.default_rate_limits.rpm_limit).toBe(3000000000)
    const patched = ok(await gw.call("PATCH", `/v1/platforms/${pid}`, { key, body: { settings: { default_budget_usd: 5 } } }))
    expect(patched.body.settings.default_budget_usd).toBe(5)
  })

  it("model priority and weight fit their integer columns", async () => {
    await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "p-int", kind: "mock", base_url: "http://mock.invalid" } })
    const model = (provider: Record<string, unknown>) =>
      gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "m-int", providers: [{ provider: "p-int", provider_model_id: "x", ...provider }] } })
    expect422(await model({ priority: 2147483648 }), "providers.0.priority")
    expect422(await model({ weight: 1e300 }), "providers.0.weight")
    ok(await model({ priority: -2147483648, weight: 2147483647 }))
  })

  it("dates outside years 1-9999 are 422: the minimum and maximum JS dates, not a 500", async () => {
    for (const since of ["-271821-04-20T00:00:00.000Z", "+275760-09-13T00:00:00.000Z", "0000-12-31T23:59:59.999Z"]) {
      const res = await gw.call("GET", `${budgetPath()}/transactions?since=${encodeURIComponent(since)}`, { key: platformKey })
      expect422(res, "since")
    }
    ok(await gw.call("GET", `${budgetPath()}/transactions?since=0001-01-01T00:00:00.000Z`, { key: platformKey }))
    const key = await gw.call("POST", `/v1/platforms/${platformId}/api-keys`, { key: platformKey, body: { expires_at: "+275760-09-13T00:00:00.000Z" } })
    expect422(key, "expires_at")
  })

  it("page and limit are bounded: 422, not a 500 or an unbounded scan", async () => {
    for (const query of ["page=1e300", "page=10000001", "page=0", "limit=101", "limit=1e309"]) {
      const res = await gw.call("GET", `/v1/platforms/${platformId}/end-users?${query}`, { key: platformKey })
      expect(res.status, query).toBe(422)
    }
    ok(await gw.call("GET", `/v1/platforms/${platformId}/end-users?page=10000000&limit=100`, { key: platformKey }))
  })

  it("a number a float64 cannot hold never reaches a non-money field rounded: 422", async () => {
    const res = await gw.call("POST", "/v1/capabilities/search", { key: platformKey, ...json(`{"query": "x", "limit": 8.0000000000000000001}`) })
    expect422(res, "limit")
  })
})

describe("Idempotency-Key on the operator wallet topup", () => {
  it("20 parallel topups with one key credit once; every copy answers the same body; another body is 409", async () => {
    const { platformId: pid } = await createPlatform(gw)
    const topup = (amount: string) =>
      gw.call("POST", walletTopupPath(pid), { key: gw.adminKey, ...json(`{"amount_usd": ${amount}, "reason": "grant"}`), headers: { "content-type": "application/json", "idempotency-key": "grant-1" } })
    const answers = await Promise.all(Array.from({ length: 20 }, () => topup("25.5")))
    for (const answer of answers) {
      expect(answer.status).toBe(200)
      expect(answer.body).toEqual(answers[0]!.body)
    }
    expect(answers[0]!.body.balance_usd).toBe(25.5)
    const rows = (await gw.db.pool.query("SELECT amount_usd::text FROM platform_wallet_transactions WHERE platform_id = $1", [pid])).rows
    expect(rows).toEqual([{ amount_usd: "25.5" }])
    const [wallet] = (await gw.db.pool.query("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1", [pid])).rows
    expect(wallet.balance_usd).toBe("25.5")

    // The same amount spelled otherwise is the same body; another amount is a conflict.
    expect((await topup("\"25.50\"")).body).toEqual(answers[0]!.body)
    const conflict = await topup("26")
    expect(conflict.status).toBe(409)
    expect(conflict.body.error).toMatchObject({ code: "idempotency_conflict", param: "Idempotency-Key" })
    // Without a key every topup applies.
    ok(await gw.call("POST", walletTopupPath(pid), { key: gw.adminKey, body: { amount_usd: 1 } }))
    ok(await gw.call("POST", walletTopupPath(pid), { key: gw.adminKey, body: { amount_usd: 1 } }))
    const [after] = (await gw.db.pool.query("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1", [pid])).rows
    expect(after.balance_usd).toBe("27.5")
  })

  it("a key is scoped to its platform: the same key on another platform credits that one", async () => {
    const a = await createPlatform(gw)
    const b = await createPlatform(gw)
    const headers = { "idempotency-key": "shared" }
    ok(await gw.call("POST", walletTopupPath(a.platformId), { key: gw.adminKey, body: { amount_usd: 3 }, headers }))
    ok(await gw.call("POST", walletTopupPath(b.platformId), { key: gw.adminKey, body: { amount_usd: 3 }, headers }))
    const rows = (await gw.db.pool.query(
      "SELECT platform_id, balance_usd::text FROM platform_wallets WHERE platform_id = ANY($1)", [[a.platformId, b.platformId]])).rows
    expect(rows.map((r) => r.balance_usd)).toEqual(["3", "3"])
  })

  it("budget create honours Idempotency-Key: a retry answers the created budget instead of 409", async () => {
    const eu = await createEndUser(gw, platformId, platformKey, "keyed-create")
    const create = () =>
      gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 7 }, headers: { "idempotency-key": "create-1" } })
    const [first, second] = await Promise.all([create(), create()])
    expect(first!.status).toBe(201)
    expect(second!.status).toBe(201)
    expect(second!.body).toEqual(first!.body)
    const opening = (await gw.db.pool.query(
      "SELECT count(*)::int AS n FROM budget_transactions t JOIN budgets b ON b.id = t.budget_id WHERE b.end_user_id = $1", [eu.endUserId])).rows
    expect(opening[0].n).toBe(1)
  })
})

// Budgets over HTTP: every endpoint, each transition's ledger row, idempotency (replay, 409,
// concurrency), validation, tenant isolation and the ledger audit query.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let p: { platformId: string; platformKey: string }
beforeAll(async () => {
  gw = await startGateway()
  p = await createPlatform(gw)
})
afterAll(async () => {
  await gw?.close()
})

const budgetPath = (endUserId: string, suffix = "") => `/v1/platforms/${p.platformId}/end-users/${endUserId}/budget${suffix}`
const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  gw.call(method, path, { key: p.platformKey, body, ...(headers ? { headers } : {}) })

const newUser = async (name: string) => (await createEndUser(gw, p.platformId, p.platformKey, name)).endUserId

const ledgerRows = async (budgetId: string) =>
  (await gw.db.pool.query(
    "SELECT type, amount_usd::text, max_usd_before::text, max_usd_after::text, used_usd_before::text, used_usd_after::text, reason, metadata, actor_type, actor_key_id FROM budget_transactions WHERE budget_id = $1 ORDER BY seq",
    [budgetId]
  )).rows

/** The README's audit query: max and used equal the sums of the row deltas, rows chain. */
export const AUDIT = `
SELECT b.id,
       b.max_usd = coalesce(sum(t.max_usd_after - t.max_usd_before), 0) AS max_ok,
       b.used_usd = coalesce(sum(t.used_usd_after - t.used_usd_before), 0) AS used_ok,
       bool_and(t.max_usd_before = coalesce(t.prev_max, 0) AND t.used_usd_before = coalesce(t.prev_used, 0)) AS chained
FROM budgets b
JOIN (SELECT *, lag(max_usd_after) OVER w AS prev_max, lag(used_usd_after) OVER w AS prev_used
      FROM budget_transactions WINDOW w AS (PARTITION BY budget_id ORDER BY seq)) t ON t.budget_id = b.id
WHERE b.id = $1
GROUP BY b.id, b.max_usd, b.used_usd`

const audit = async (budgetId: string) => (await gw.db.pool.query(AUDIT, [budgetId])).rows[0]

describe("budget lifecycle", () => {
  it("create -> get -> patch -> suspend -> topup -> debit -> delete, one ledger row each", async () => {
    const eu = await newUser("life")
    const created = await call("POST", budgetPath(eu), { max_usd: 10, low_balance_threshold: 2 })
    expect(created.status).toBe(201)
    expect(created.body).toMatchObject({
      end_user_id: eu,
      max_usd: 10,
      used_usd: 0,
      remaining_usd: 10,
      period: "one_time",
      auto_replenish: false,
      low_balance_threshold: 2,
      is_active: true,
      is_suspended: false
    })
    const budgetId = created.body.id as string
    expect((await call("GET", budgetPath(eu))).body.id).toBe(budgetId)

    const patched = await call("PATCH", budgetPath(eu), { max_usd: 12.5, reason: "raise", metadata: { ticket: 7 } })
    expect(patched.status).toBe(200)
    expect(patched.body).toMatchObject({ max_usd: 12.5, remaining_usd: 12.5, idempotent_replay: false })

    const suspended = await call("PATCH", budgetPath(eu), { is_suspended: true })
    expect(suspended.body.is_suspended).toBe(true)

    const topup = await call("POST", budgetPath(eu, "/topup"), { amount_usd: 0.1, reason: "gift" })
    expect(topup.status).toBe(200)
    expect(topup.body).toMatchObject({ success: true, idempotent_replay: false, budget_id: budgetId, max_usd: 12.6, used_usd: 0 })
    expect(Object.keys(topup.body.transaction).sort()).toEqual(
      ["amount_usd", "created_at", "id", "max_usd_after", "metadata", "reason", "type", "used_usd_after"]
    )
    expect(topup.body.transaction).toMatchObject({ type: "topup", amount_usd: 0.1, max_usd_after: 12.6, reason: "gift" })

    // A debit works while suspended and may push remaining below zero.
    const debit = await call("POST", budgetPath(eu, "/debit"), { amount_usd: 20.2, metadata: { job: "x" } })
    expect(debit.status).toBe(200)
    expect(debit.body).toMatchObject({ used_usd: 20.2, transaction: { type: "debit", amount_usd: 20.2, used_usd_after: 20.2 } })
    expect((await call("GET", budgetPath(eu))).body.remaining_usd).toBe(-7.6)

    const unsuspended = await call("PATCH", budgetPath(eu), { is_suspended: false, reason: "paid" })
    expect(unsuspended.body.is_suspended).toBe(false)

    const deleted = await call("DELETE", budgetPath(eu))
    expect(deleted.status).toBe(204)
    expect((await call("GET", budgetPath(eu))).status).toBe(404)

    const rows = await ledgerRows(budgetId)
    expect(rows.map((r) => r.type)).toEqual(["opening", "adjustment", "adjustment", "topup", "debit", "adjustment", "adjustment"])
    expect(rows[0]).toMatchObject({ amount_usd: "10", max_usd_before: "0", max_usd_after: "10", actor_type: "platform_key" })
    expect(rows[1]).toMatchObject({ amount_usd: "2.5", max_usd_after: "12.5", reason: "raise", metadata: { ticket: 7 } })
    expect(rows[6]).toMatchObject({ reason: "budget_deleted" })
    expect(await audit(budgetId)).toMatchObject({ max_ok: true, used_ok: true, chained: true })

    // Recreated after the soft delete: a fresh budget with its own opening row.
    const again = await call("POST", budgetPath(eu), { max_usd: 3 })
    expect(again.status).toBe(201)
    expect(again.body.id).not.toBe(budgetId)
  })

  it("a second POST while a budget exists is 409 conflict", async () => {
    const eu = await newUser("dup")
    expect((await call("POST", budgetPath(eu), { max_usd: 1 })).status).toBe(201)
    const second = await call("POST", budgetPath(eu), { max_usd: 1 })
    expect(second.status).toBe(409)
    expect(second.body.error.code).toBe("conflict")
  })

  it("validation: 422 naming the field, nothing written", async () => {
    const eu = await newUser("val")
    const cases: Array<[string, string, unknown, string]> = [
      ["POST", "", { max_usd: 0 }, "max_usd"],
      ["POST", "", { max_usd: -1 }, "max_usd"],
      ["POST", "", {}, "max_usd"],
      ["POST", "", { max_usd: 5, period: "weekly" }, "period"],
      ["POST", "", { max_usd: 5, low_balance_threshold: -1 }, "low_balance_threshold"],
      ["POST", "", { max_usd: 5, auto_replenish: true }, "replenish_amount"]
    ]
    for (const [method, suffix, body, param] of cases) {
      const res = await call(method, budgetPath(eu, suffix), body)
      expect(res.status, JSON.stringify(body)).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param })
    }
    expect((await call("POST", budgetPath(eu), { max_usd: 5 })).status).toBe(201)
    const more: Array<[string, string, unknown, string]> = [
      ["PATCH", "", { max_usd: 0 }, "max_usd"],
      ["PATCH", "", { reason: "x".repeat(501) }, "reason"],
      ["PATCH", "", { auto_replenish: true }, "replenish_amount"],
      ["POST", "/topup", { amount_usd: 0 }, "amount_usd"],
      ["POST", "/debit", { amount_usd: -3 }, "amount_usd"],
      ["POST", "/debit", {}, "amount_usd"]
    ]
    for (const [method, suffix, body, param] of more) {
      const res = await call(method, budgetPath(eu, suffix), body)
      expect(res.status, JSON.stringify(body)).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param })
    }
    const budget = (await call("GET", budgetPath(eu))).body
    expect(budget).toMatchObject({ max_usd: 5, used_usd: 0 })
    expect((await ledgerRows(budget.id)).map((r) => r.type)).toEqual(["opening"])
  })

  it("daily and monthly budgets with auto_replenish", async () => {
    const eu = await newUser("periodic")
    const res = await call("POST", budgetPath(eu), { max_usd: 5, period: "daily", auto_replenish: true, replenish_amount: 4 })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ period: "daily", auto_replenish: true, replenish_amount: 4 })
  })
})

describe("idempotency", () => {
  it("same key + same body replays without applying; different body is 409", async () => {
    const eu = await newUser("idem")
    await call("POST", budgetPath(eu), { max_usd: 10 })
    const headers = { "idempotency-key": "topup-1" }
    const first = await call("POST", budgetPath(eu, "/topup"), { amount_usd: 1.5, reason: "r" }, headers)
    const replay = await call("POST", budgetPath(eu, "/topup"), { reason: "r", amount_usd: 1.5 }, headers)
    expect(first.body.idempotent_replay).toBe(false)
    expect(replay.status).toBe(200)
    expect(replay.body.idempotent_replay).toBe(true)
    expect(replay.body.transaction).toEqual(first.body.transaction)
    const conflict = await call("POST", budgetPath(eu, "/topup"), { amount_usd: 2 }, headers)
    expect(conflict.status).toBe(409)
    expect(conflict.body.error.code).toBe("idempotency_conflict")
    // The same key on another operation is its own scope.
    const debit = await call("POST", budgetPath(eu, "/debit"), { amount_usd: 1 }, headers)
    expect(debit.body.idempotent_replay).toBe(false)
    const patch1 = await call("PATCH", budgetPath(eu), { is_suspended: true }, { "idempotency-key": "p1" })
    const patch2 = await call("PATCH", budgetPath(eu), { is_suspended: true }, { "idempotency-key": "p1" })
    expect(patch2.body.idempotent_replay).toBe(true)
    expect(patch1.body.idempotent_replay).toBe(false)
    const budget = (await call("GET", budgetPath(eu))).body
    expect(budget).toMatchObject({ max_usd: 11.5, used_usd: 1 })
    expect((await ledgerRows(budget.id)).map((r) => r.type)).toEqual(["opening", "topup", "debit", "adjustment"])
  })

  it("50 concurrent requests with one key apply once", async () => {
    const eu = await newUser("idem-race")
    await call("POST", budgetPath(eu), { max_usd: 10 })
    const results = await Promise.all(
      Array.from({ length: 50 }, () => call("POST", budgetPath(eu, "/debit"), { amount_usd: 0.25 }, { "idempotency-key": "race" }))
    )
    expect(results.every((r) => r.status === 200)).toBe(true)
    expect(results.filter((r) => r.body.idempotent_replay === false)).toHaveLength(1)
    expect(new Set(results.map((r) => r.body.transaction.id)).size).toBe(1)
    const budget = (await call("GET", budgetPath(eu))).body
    expect(budget.used_usd).toBe(0.25)
    expect((await ledgerRows(budget.id)).filter((r) => r.type === "debit")).toHaveLength(1)
  })

  it("no key: every call applies", async () => {
    const eu = await newUser("nokey")
    await call("POST", budgetPath(eu), { max_usd: 10 })
    await call("POST", budgetPath(eu, "/debit"), { amount_usd: 1 })
    await call("POST", budgetPath(eu, "/debit"), { amount_usd: 1 })
    expect((await call("GET", budgetPath(eu))).body.used_usd).toBe(2)
  })
})

describe("transactions and lists", () => {
  it("transactions: since is strictly after, limit 1-200 default 50", async () => {
    const eu = await newUser("tx")
    await call("POST", budgetPath(eu), { max_usd: 100 })
    for (let i = 0; i < 4; i++) await call("POST", budgetPath(eu, "/debit"), { amount_usd: 1 })
    const all = await call("GET", budgetPath(eu, "/transactions"))
    expect(all.status).toBe(200)
    expect(all.body.limit).toBe(50)
    expect(all.body.data.map((t: any) => t.type)).toEqual(["opening", "debit", "debit", "debit", "debit"])
    expect(all.body.data[0]).toMatchObject({ actor_type: "platform_key", amount_usd: 100 })
    const since = all.body.data[2].created_at
    const after = await call("GET", budgetPath(eu, `/transactions?since=${encodeURIComponent(since)}`))
    expect(after.body.data.every((t: any) => t.created_at > since)).toBe(true)
    expect(after.body.data.map((t: any) => t.id)).not.toContain(all.body.data[2].id)
    const two = await call("GET", budgetPath(eu, "/transactions?limit=2"))
    expect(two.body).toMatchObject({ limit: 2 })
    expect(two.body.data).toHaveLength(2)
    for (const bad of ["limit=0", "limit=201", "limit=abc", "since=yesterday"]) {
      const res = await call("GET", budgetPath(eu, `/transactions?${bad}`))
      expect(res.status, bad).toBe(422)
      expect(res.body.error.param, bad).toBe(bad.split("=")[0])
    }
  })

  it("platform budget list: paginated, filters end_user_id, is_active, is_suspended", async () => {
    const other = await createPlatform(gw)
    const call2 = (method: string, path: string, body?: unknown) => gw.call(method, path, { key: other.platformKey, body })
    const ids: Array<string> = []
    for (const name of ["l1", "l2", "l3"]) {
      const eu = await createEndUser(gw, other.platformId, other.platformKey, name)
      ids.push(eu.endUserId)
      await call2("POST", `/v1/platforms/${other.platformId}/end-users/${eu.endUserId}/budget`, { max_usd: 1 })
    }
    await call2("PATCH", `/v1/platforms/${other.platformId}/end-users/${ids[1]}/budget`, { is_suspended: true })
    await call2("PATCH", `/v1/platforms/${other.platformId}/end-users/${ids[2]}/budget`, { is_active: false })
    const list = (q: string) => call2("GET", `/v1/platforms/${other.platformId}/budgets${q}`)
    expect((await list("")).body).toMatchObject({ total: 3, page: 1, limit: 20 })
    expect((await list(`?end_user_id=${ids[0]}`)).body.data.map((b: any) => b.end_user_id)).toEqual([ids[0]])
    expect((await list("?is_suspended=true")).body.data.map((b: any) => b.end_user_id)).toEqual([ids[1]])
    expect((await list("?is_active=false")).body.data.map((b: any) => b.end_user_id)).toEqual([ids[2]])
    expect((await list("?limit=1&page=2")).body.data).toHaveLength(1)
    expect((await list("?is_active=maybe")).status).toBe(422)
  })
})

describe("isolation", () => {
  it("another platform's end user is 404 on every budget route; end-user keys are 403", async () => {
    const other = await createPlatform(gw)
    const theirs = await createEndUser(gw, other.platformId, other.platformKey, "theirs")
    await gw.call("POST", `/v1/platforms/${other.platformId}/end-users/${theirs.endUserId}/budget`, {
      key: other.platformKey,
      body: { max_usd: 1 }
    })
    for (const [method, suffix, body] of [
      ["GET", "", undefined],
      ["PATCH", "", { max_usd: 99 }],
      ["DELETE", "", undefined],
      ["POST", "/topup", { amount_usd: 1 }],
      ["POST", "/debit", { amount_usd: 1 }],
      ["GET", "/transactions", undefined]
    ] as const) {
      const res = await call(method, budgetPath(theirs.endUserId, suffix), body)
      expect(res.status, `${method} ${suffix}`).toBe(404)
    }
    const crossPlatform = await gw.call("GET", `/v1/platforms/${other.platformId}/budgets`, { key: p.platformKey })
    expect(crossPlatform.status).toBe(404)
    const stillThere = await gw.call("GET", `/v1/platforms/${other.platformId}/end-users/${theirs.endUserId}/budget`, {
      key: other.platformKey
    })
    expect(stillThere.body).toMatchObject({ max_usd: 1, used_usd: 0 })
    const asEndUser = await gw.call("GET", budgetPath(theirs.endUserId), { key: theirs.endUserKey })
    expect(asEndUser.status).toBe(403)
  })
})

// End users of a platform: retry-safe creation, default budgets, list/read/patch, deactivation, cascading delete, isolation.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type ApiResponse, createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"
import { waitForListeners } from "./support/TestDatabase.js"

let gw: Gateway
beforeAll(async () => {
  gw = await startGateway()
})
afterAll(async () => {
  await gw?.close()
})

const UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"

/** Asserts the OpenAI error envelope, its status and code, and (when given) its param. */
const expectError = (res: ApiResponse, status: number, code: string, param?: string | null) => {
  expect(res.status, JSON.stringify(res.body)).toBe(status)
  expect(Object.keys(res.body)).toEqual(["error"])
  expect(Object.keys(res.body.error).sort()).toEqual(["code", "message", "param", "type"])
  expect(typeof res.body.error.message).toBe("string")
  expect(typeof res.body.error.type).toBe("string")
  expect(res.body.error.code).toBe(code)
  if (param !== undefined) expect(res.body.error.param).toBe(param)
}

const usersPath = (platformId: string) => `/v1/platforms/${platformId}/end-users`

/**
 * There is no end-user endpoint yet, so an end-user key is probed on a management endpoint: a
 * key that authenticates is refused there with 403 (a bad key would be 401).
 */
const probeEndUserKey = (platformId: string, key: string) => gw.call("GET", `/v1/platforms/${platformId}`, { key })

const count = async (table: "end_users" | "api_keys" | "budgets", platformId: string) => {
  const res = await gw.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE platform_id = $1`, [platformId])
  return res.rows[0]?.n
}

const countRows = async (platformId: string) => ({
  users: await count("end_users", platformId),
  keys: await count("api_keys", platformId),
  budgets: await count("budgets", platformId)
})

describe("creating end users", () => {
  it("first call: 201 with the record, a working end-user key and no budget", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const before = Date.now()
    const res = await gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "user-1" } })
    expect(res.status).toBe(201)
    const { api_key: apiKey, budget, ...user } = res.body
    expect(user).toMatchObject({
      platform_id: platformId,
      external_id: "user-1",
      display_name: "user-1",
      metadata: {},
      is_active: true
    })
    expect(user.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
    expect(Date.parse(user.created_at)).toBeGreaterThanOrEqual(before - 5_000)
    expect(Date.parse(user.updated_at)).toBeGreaterThanOrEqual(before - 5_000)
    expect(budget).toBeNull()
    expect(apiKey.raw_key).toMatch(/^sk-eu_[0-9A-Za-z]{40}$/)
    expect(apiKey).toMatchObject({
      platform_id: platformId,
      end_user_id: user.id,
      key_prefix: apiKey.raw_key.slice(0, 12),
      scopes: ["inference"],
      is_active: true,
      expires_at: null
    })
    expect(typeof apiKey.name).toBe("string")
    expect(apiKey.name.length).toBeGreaterThan(0)
    expect(JSON.stringify(res.body)).not.toMatch(/hash/i)

    expectError(await probeEndUserKey(platformId, apiKey.raw_key), 403, "forbidden")

    const row = await gw.db.pool.query("SELECT external_id, display_name, is_active FROM end_users WHERE id = $1", [user.id])
    expect(row.rows).toEqual([{ external_id: "user-1", display_name: "user-1", is_active: true }])
  })

  it("keeps display_name and metadata when given; limits are inclusive", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const metadata = { plan: "pro", tags: ["a", "b"], nested: { n: 1, ok: true, none: null } }
    const res = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      body: { external_id: "ext-42", display_name: "Ada Lovelace", metadata }
    })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ external_id: "ext-42", display_name: "Ada Lovelace", metadata })

    const longest = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      body: { external_id: "e".repeat(255), display_name: "d".repeat(100) }
    })
    expect(longest.status).toBe(201)
    expect(longest.body.external_id).toBe("e".repeat(255))
    expect(longest.body.display_name).toBe("d".repeat(100))
    const shortest = await gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "x", display_name: "y" } })
    expect(shortest.status).toBe(201)
    expect(shortest.body).toMatchObject({ external_id: "x", display_name: "y" })

    const read = await gw.call("GET", `${usersPath(platformId)}/${res.body.id}`, { key: platformKey })
    expect(read.body.metadata).toEqual(metadata)
  })

  it("with settings.default_budget_usd, opens a monthly budget with one opening ledger row", async () => {
    const { platformId, platformKey } = await createPlatform(gw, { name: "Budgeted", settings: { default_budget_usd: 12.5 } })
    const res = await gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "budgeted" } })
    expect(res.status).toBe(201)
    const budget = res.body.budget
    expect(budget).toMatchObject({
      platform_id: platformId,
      end_user_id: res.body.id,
      max_usd: 12.5,
      used_usd: 0,
      remaining_usd: 12.5,
      period: "monthly",
      is_active: true,
      is_suspended: false
    })
    expect(budget.id).toMatch(/^[0-9a-f-]{36}$/)

    const budgets = await gw.db.pool.query("SELECT id, max_usd::float8 AS max_usd, period FROM budgets WHERE end_user_id = $1", [res.body.id])
    expect(budgets.rows).toEqual([{ id: budget.id, max_usd: 12.5, period: "monthly" }])
    const txs = await gw.db.pool.query(
      "SELECT type, amount_usd::float8 AS amount_usd, max_usd_after::float8 AS max_after, used_usd_after::float8 AS used_after FROM budget_transactions WHERE budget_id = $1",
      [budget.id]
    )
    expect(txs.rows).toEqual([{ type: "opening", amount_usd: 12.5, max_after: 12.5, used_after: 0 }])

    // A repeat call returns the same budget and writes no new budget or ledger row.
    const again = await gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "budgeted" } })
    expect(again.status).toBe(200)
    expect(again.body.budget).toMatchObject({ id: budget.id, max_usd: 12.5, remaining_usd: 12.5 })
    expect(await count("budgets", platformId)).toBe(1)
    const txsAfter = await gw.db.pool.query("SELECT count(*)::int AS n FROM budget_transactions WHERE budget_id = $1", [budget.id])
    expect(txsAfter.rows[0]?.n).toBe(1)
  })

  it("a repeat call is 200 with the same user and a fresh key; both keys work", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const first = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      body: { external_id: "repeat", display_name: "Original", metadata: { v: 1 } }
    })
    expect(first.status).toBe(201)
    const second = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      body: { external_id: "repeat", display_name: "Original" }
    })
    expect(second.status).toBe(200)
    expect(second.body.id).toBe(first.body.id)
    expect(second.body).toMatchObject({ external_id: "repeat", display_name: "Original", metadata: { v: 1 }, budget: null })
    expect(second.body.api_key.raw_key).toMatch(/^sk-eu_[0-9A-Za-z]{40}$/)
    expect(second.body.api_key.raw_key).not.toBe(first.body.api_key.raw_key)
    expect(second.body.api_key.id).not.toBe(first.body.api_key.id)
    expect(second.body.api_key.end_user_id).toBe(first.body.id)

    expectError(await probeEndUserKey(platformId, first.body.api_key.raw_key), 403, "forbidden")
    expectError(await probeEndUserKey(platformId, second.body.api_key.raw_key), 403, "forbidden")
    expect(await count("end_users", platformId)).toBe(1)
    const keys = await gw.call("GET", `/v1/platforms/${platformId}/api-keys?type=end_user`, { key: platformKey })
    expect(keys.body.total).toBe(2)
  })

  it("20 parallel calls with one external_id: one 201, nineteen 200, one user, 20 working keys", async () => {
    const { platformId, platformKey } = await createPlatform(gw, { name: "Race", settings: { default_budget_usd: 5 } })
    const responses = await Promise.all(
      Array.from({ length: 20 }, () =>
        gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "same-person" } }))
    )
    const statuses = responses.map((r) => r.status)
    expect(statuses.filter((s) => s === 201)).toHaveLength(1)
    expect(statuses.filter((s) => s === 200)).toHaveLength(19)
    expect(new Set(responses.map((r) => r.body.id)).size).toBe(1)
    const rawKeys = responses.map((r) => r.body.api_key.raw_key as string)
    expect(new Set(rawKeys).size).toBe(20)
    expect(new Set(responses.map((r) => r.body.budget?.id)).size).toBe(1)
    expect(responses[0]?.body.budget).not.toBeNull()

    for (const raw of rawKeys) {
      expectError(await probeEndUserKey(platformId, raw), 403, "forbidden")
    }
    const keys = await gw.call("GET", `/v1/platforms/${platformId}/api-keys?type=end_user&limit=100`, { key: platformKey })
    expect(keys.body.total).toBe(20)
    expect(await countRows(platformId)).toEqual({ users: 1, keys: 21, budgets: 1 })
    const opening = await gw.db.pool.query(
      "SELECT count(*)::int AS n FROM budget_transactions WHERE platform_id = $1 AND type = 'opening'",
      [platformId]
    )
    expect(opening.rows[0]?.n).toBe(1)
  })

  it("rejects bad bodies with 422 naming the field and stores nothing", async () => {
    const { platformId, platformKey } = await createPlatform(gw, { name: "Strict", settings: { default_budget_usd: 3 } })
    await createEndUser(gw, platformId, platformKey, "existing")
    const before = await countRows(platformId)
    const cases: Array<[unknown, string]> = [
      [{}, "external_id"],
      [{ display_name: "No Id" }, "external_id"],
      [{ external_id: "" }, "external_id"],
      [{ external_id: "z".repeat(256) }, "external_id"],
      [{ external_id: 42 }, "external_id"],
      [{ external_id: null }, "external_id"],
      [{ external_id: "ok", display_name: "" }, "display_name"],
      [{ external_id: "ok", display_name: "d".repeat(101) }, "display_name"],
      [{ external_id: "ok", display_name: 7 }, "display_name"],
      [{ external_id: "ok", metadata: "text" }, "metadata"],
      [{ external_id: "ok", metadata: null }, "metadata"],
      [{ external_id: "ok", metadata: 5 }, "metadata"],
      [{ external_id: "ok", is_admin: true }, "is_admin"],
      [{ external_id: "ok", platform_id: UNKNOWN_ID }, "platform_id"],
      // The repeat path must validate too: nothing (not even a key) is added for an existing user.
      [{ external_id: "existing", display_name: "" }, "display_name"],
      [{ external_id: "existing", extra: 1 }, "extra"]
    ]
    for (const [body, param] of cases) {
      const res = await gw.call("POST", usersPath(platformId), { key: platformKey, body })
      expectError(res, 422, "validation_error", param)
      expect(res.body.error.type).toBe("invalid_request_error")
    }
    const notJson = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      rawBody: "{\"external_id\":",
      headers: { "content-type": "application/json" }
    })
    expect(notJson.status).toBe(400)
    expect(notJson.body.error.code).toBe("invalid_json")
    expect(await countRows(platformId)).toEqual(before)
    const none = await gw.call("GET", `${usersPath(platformId)}?external_id=ok`, { key: platformKey })
    expect(none.body.total).toBe(0)
  })
})

describe("listing and reading end users", () => {
  it("lists paginated, filters by external_id, and reads one", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const ids: Array<string> = []
    for (const ext of ["l-1", "l-2", "l-3"]) ids.push((await createEndUser(gw, platformId, platformKey, ext)).endUserId)

    const all = await gw.call("GET", usersPath(platformId), { key: platformKey })
    expect(all.status).toBe(200)
    expect(Object.keys(all.body).sort()).toEqual(["data", "limit", "page", "total"])
    expect(all.body).toMatchObject({ total: 3, page: 1, limit: 20 })
    expect(all.body.data.map((u: { id: string }) => u.id).sort()).toEqual([...ids].sort())
    for (const user of all.body.data) {
      expect(user).not.toHaveProperty("api_key")
      expect(user.platform_id).toBe(platformId)
    }

    const page1 = await gw.call("GET", `${usersPath(platformId)}?limit=2`, { key: platformKey })
    const page2 = await gw.call("GET", `${usersPath(platformId)}?limit=2&page=2`, { key: platformKey })
    expect(page1.body).toMatchObject({ total: 3, page: 1, limit: 2 })
    expect(page1.body.data).toHaveLength(2)
    expect(page2.body).toMatchObject({ total: 3, page: 2, limit: 2 })
    expect(page2.body.data).toHaveLength(1)
    const seen = [...page1.body.data, ...page2.body.data].map((u: { id: string }) => u.id)
    expect(new Set(seen).size).toBe(3)
    const beyond = await gw.call("GET", `${usersPath(platformId)}?page=9&limit=100`, { key: platformKey })
    expect(beyond.body).toMatchObject({ data: [], total: 3, page: 9, limit: 100 })

    const filtered = await gw.call("GET", `${usersPath(platformId)}?external_id=l-2`, { key: platformKey })
    expect(filtered.status).toBe(200)
    expect(filtered.body).toMatchObject({ total: 1, page: 1, limit: 20 })
    expect(filtered.body.data).toHaveLength(1)
    expect(filtered.body.data[0]).toMatchObject({ id: ids[1], external_id: "l-2" })
    const missing = await gw.call("GET", `${usersPath(platformId)}?external_id=nobody`, { key: platformKey })
    expect(missing.status).toBe(200)
    expect(missing.body).toEqual({ data: [], total: 0, page: 1, limit: 20 })
    const encoded = await createEndUser(gw, platformId, platformKey, "a b&c=d/é")
    const special = await gw.call("GET", `${usersPath(platformId)}?external_id=${encodeURIComponent("a b&c=d/é")}`, { key: platformKey })
    expect(special.body.data.map((u: { id: string }) => u.id)).toEqual([encoded.endUserId])

    const one = await gw.call("GET", `${usersPath(platformId)}/${ids[0]}`, { key: platformKey })
    expect(one.status).toBe(200)
    expect(one.body).toMatchObject({ id: ids[0], platform_id: platformId, external_id: "l-1", display_name: "l-1", metadata: {}, is_active: true })
    expect(one.body).not.toHaveProperty("api_key")
    expect(one.body).not.toHaveProperty("budget")

    for (const id of [UNKNOWN_ID, "not-a-uuid", "1", `${ids[0]}0`]) {
      expectError(await gw.call("GET", `${usersPath(platformId)}/${id}`, { key: platformKey }), 404, "not_found")
    }
  })

  it("rejects bad list parameters with 422 naming the parameter", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const cases: Array<[string, string]> = [
      ["page=0", "page"],
      ["page=2.5", "page"],
      ["page=first", "page"],
      ["limit=0", "limit"],
      ["limit=101", "limit"],
      ["limit=-5", "limit"],
      ["limit=ten", "limit"]
    ]
    for (const [query, param] of cases) {
      expectError(await gw.call("GET", `${usersPath(platformId)}?${query}`, { key: platformKey }), 422, "validation_error", param)
    }
  })
})

describe("changing end users", () => {
  it("patches display_name; metadata replaces the stored object entirely", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      body: { external_id: "patchy", display_name: "Before", metadata: { a: 1, b: 2 } }
    })
    const path = `${usersPath(platformId)}/${created.body.id}`

    const renamed = await gw.call("PATCH", path, { key: platformKey, body: { display_name: "After" } })
    expect(renamed.status).toBe(200)
    expect(renamed.body).toMatchObject({ id: created.body.id, external_id: "patchy", display_name: "After", metadata: { a: 1, b: 2 }, is_active: true })
    expect(Date.parse(renamed.body.updated_at)).toBeGreaterThanOrEqual(Date.parse(created.body.updated_at))

    const replaced = await gw.call("PATCH", path, { key: platformKey, body: { metadata: { c: 3 } } })
    expect(replaced.status).toBe(200)
    expect(replaced.body.metadata).toEqual({ c: 3 })
    expect(replaced.body.display_name).toBe("After")
    const read = await gw.call("GET", path, { key: platformKey })
    expect(read.body.metadata).toEqual({ c: 3 })
    const stored = await gw.db.pool.query("SELECT metadata FROM end_users WHERE id = $1", [created.body.id])
    expect(stored.rows[0]?.metadata).toEqual({ c: 3 })

    const nested = await gw.call("PATCH", path, { key: platformKey, body: { metadata: { deep: { x: 1 } } } })
    expect(nested.body.metadata).toEqual({ deep: { x: 1 } })
    const emptied = await gw.call("PATCH", path, { key: platformKey, body: { metadata: {} } })
    expect(emptied.body.metadata).toEqual({})

    const noop = await gw.call("PATCH", path, { key: platformKey, body: {} })
    expect(noop.status).toBe(200)
    expect(noop.body).toMatchObject({ display_name: "After", metadata: {}, is_active: true })
  })

  it("rejects bad patch bodies with 422 and changes nothing", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", usersPath(platformId), {
      key: platformKey,
      body: { external_id: "guarded", display_name: "Guarded", metadata: { keep: true } }
    })
    const path = `${usersPath(platformId)}/${created.body.id}`
    const cases: Array<[unknown, string]> = [
      [{ display_name: "" }, "display_name"],
      [{ display_name: "q".repeat(101) }, "display_name"],
      [{ display_name: null }, "display_name"],
      [{ metadata: "nope" }, "metadata"],
      [{ metadata: null }, "metadata"],
      [{ is_active: "no" }, "is_active"],
      [{ is_active: null }, "is_active"],
      [{ external_id: "renamed" }, "external_id"],
      [{ display_name: "Fine", nickname: "x" }, "nickname"]
    ]
    for (const [body, param] of cases) {
      expectError(await gw.call("PATCH", path, { key: platformKey, body }), 422, "validation_error", param)
    }
    const after = await gw.call("GET", path, { key: platformKey })
    expect(after.body).toMatchObject({ external_id: "guarded", display_name: "Guarded", metadata: { keep: true }, is_active: true })
    expect(after.body.updated_at).toBe(created.body.updated_at)
    for (const id of [UNKNOWN_ID, "not-a-uuid"]) {
      const res = await gw.call("PATCH", `${usersPath(platformId)}/${id}`, { key: platformKey, body: { display_name: "Ghost" } })
      expectError(res, 404, "not_found")
    }
  })

  it("is_active false stops the user's keys with 403 at once; true restores them", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const user = await createEndUser(gw, platformId, platformKey, "toggle")
    const other = await createEndUser(gw, platformId, platformKey, "bystander")
    const extra = await gw.call("POST", `/v1/platforms/${platformId}/api-keys`, { key: platformKey, body: { end_user_id: user.endUserId } })
    const keys = [user.endUserKey, extra.body.raw_key as string]
    // Active keys are cached and refused on management routes (authenticated, 403).
    const baseline = await probeEndUserKey(platformId, user.endUserKey)
    expectError(baseline, 403, "forbidden")
    const activeMessage = baseline.body.error.message as string
    for (const key of keys) expectError(await probeEndUserKey(platformId, key), 403, "forbidden")

    const off = await gw.call("PATCH", `${usersPath(platformId)}/${user.endUserId}`, { key: platformKey, body: { is_active: false } })
    expect(off.status).toBe(200)
    expect(off.body.is_active).toBe(false)
    for (const key of keys) {
      const res = await probeEndUserKey(platformId, key)
      expectError(res, 403, "forbidden")
      // Refused at authentication because the user is inactive, not by the route's own check.
      expect(res.body.error.message).not.toBe(activeMessage)
    }
    // A key issued while inactive (retry of the same external_id) is refused the same way.
    const retry = await gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "toggle" } })
    expect(retry.status).toBe(200)
    expect(retry.body.is_active).toBe(false)
    const retryProbe = await probeEndUserKey(platformId, retry.body.api_key.raw_key)
    expectError(retryProbe, 403, "forbidden")
    expect(retryProbe.body.error.message).not.toBe(activeMessage)
    // Keys of other users are untouched.
    const bystander = await probeEndUserKey(platformId, other.endUserKey)
    expect(bystander.body.error.message).toBe(activeMessage)

    const listed = await gw.call("GET", `${usersPath(platformId)}?external_id=toggle`, { key: platformKey })
    expect(listed.body.data[0]?.is_active).toBe(false)

    const on = await gw.call("PATCH", `${usersPath(platformId)}/${user.endUserId}`, { key: platformKey, body: { is_active: true } })
    expect(on.status).toBe(200)
    expect(on.body.is_active).toBe(true)
    for (const key of [...keys, retry.body.api_key.raw_key as string]) {
      const res = await probeEndUserKey(platformId, key)
      expectError(res, 403, "forbidden")
      expect(res.body.error.message).toBe(activeMessage)
    }
  })
})

describe("deleting end users", () => {
  it("deletes permanently with cascade; the user's keys are 401 at once, even when cached", async () => {
    const { platformId, platformKey } = await createPlatform(gw, { name: "Cascade", settings: { default_budget_usd: 10 } })
    const user = await createEndUser(gw, platformId, platformKey, "leaving")
    const sibling = await createEndUser(gw, platformId, platformKey, "staying")
    const secondKey = await gw.call("POST", `/v1/platforms/${platformId}/api-keys`, { key: platformKey, body: { end_user_id: user.endUserId } })
    const budgetId = user.body.budget.id as string
    await gw.db.pool.query(
      "INSERT INTO end_user_rate_limits (end_user_id, platform_id, rpm_limit) VALUES ($1, $2, 60)",
      [user.endUserId, platformId]
    )
    // Both keys are used (thus cached) right before the delete.
    expectError(await probeEndUserKey(platformId, user.endUserKey), 403, "forbidden")
    expectError(await probeEndUserKey(platformId, secondKey.body.raw_key), 403, "forbidden")

    const del = await gw.call("DELETE", `${usersPath(platformId)}/${user.endUserId}`, { key: platformKey })
    expect(del.status).toBe(204)
    expect(del.body).toBeNull()

    expectError(await probeEndUserKey(platformId, user.endUserKey), 401, "invalid_api_key")
    expectError(await probeEndUserKey(platformId, secondKey.body.raw_key), 401, "invalid_api_key")

    const q = async (sql: string, id: string) => (await gw.db.pool.query<{ n: number }>(sql, [id])).rows[0]?.n
    expect(await q("SELECT count(*)::int AS n FROM end_users WHERE id = $1", user.endUserId)).toBe(0)
    expect(await q("SELECT count(*)::int AS n FROM api_keys WHERE end_user_id = $1", user.endUserId)).toBe(0)
    expect(await q("SELECT count(*)::int AS n FROM budgets WHERE end_user_id = $1", user.endUserId)).toBe(0)
    expect(await q("SELECT count(*)::int AS n FROM budget_transactions WHERE budget_id = $1", budgetId)).toBe(0)
    expect(await q("SELECT count(*)::int AS n FROM end_user_rate_limits WHERE end_user_id = $1", user.endUserId)).toBe(0)

    // The sibling keeps everything.
    expect(await q("SELECT count(*)::int AS n FROM api_keys WHERE end_user_id = $1", sibling.endUserId)).toBe(1)
    expect(await q("SELECT count(*)::int AS n FROM budget_transactions WHERE budget_id = $1", sibling.body.budget.id)).toBe(1)
    expectError(await probeEndUserKey(platformId, sibling.endUserKey), 403, "forbidden")

    const path = `${usersPath(platformId)}/${user.endUserId}`
    expectError(await gw.call("GET", path, { key: platformKey }), 404, "not_found")
    expectError(await gw.call("PATCH", path, { key: platformKey, body: { is_active: true } }), 404, "not_found")
    expectError(await gw.call("DELETE", path, { key: platformKey }), 404, "not_found")
    const list = await gw.call("GET", usersPath(platformId), { key: platformKey })
    expect(list.body.total).toBe(1)
    expect(list.body.data.map((u: { id: string }) => u.id)).toEqual([sibling.endUserId])
    const keyList = await gw.call("GET", `/v1/platforms/${platformId}/api-keys?type=end_user`, { key: platformKey })
    expect(keyList.body.total).toBe(1)
    expectError(
      await gw.call("GET", `/v1/platforms/${platformId}/api-keys/${user.body.api_key.id}`, { key: platformKey }),
      404,
      "not_found"
    )

    // The external_id is free again: a new user, a new budget, old keys still dead.
    const reborn = await gw.call("POST", usersPath(platformId), { key: platformKey, body: { external_id: "leaving" } })
    expect(reborn.status).toBe(201)
    expect(reborn.body.id).not.toBe(user.endUserId)
    expect(reborn.body.budget.id).not.toBe(budgetId)
    expectError(await probeEndUserKey(platformId, user.endUserKey), 401, "invalid_api_key")

    for (const id of [UNKNOWN_ID, "not-a-uuid"]) {
      expectError(await gw.call("DELETE", `${usersPath(platformId)}/${id}`, { key: platformKey }), 404, "not_found")
    }
  })

  it("parallel deletes of one user: exactly one 204, the rest 404", async () => {
    const { platformId, platformKey } = await createPlatform(gw, { name: "Twice", settings: { default_budget_usd: 2 } })
    const user = await createEndUser(gw, platformId, platformKey, "deleted-twice")
    const results = await Promise.all(
      Array.from({ length: 6 }, () => gw.call("DELETE", `${usersPath(platformId)}/${user.endUserId}`, { key: platformKey }))
    )
    expect(results.filter((r) => r.status === 204)).toHaveLength(1)
    for (const r of results.filter((r) => r.status !== 204)) expectError(r, 404, "not_found")
    expect(await countRows(platformId)).toEqual({ users: 0, keys: 1, budgets: 0 })
    expectError(await probeEndUserKey(platformId, user.endUserKey), 401, "invalid_api_key")
  })

  it("a delete on one instance reaches a second instance that had the keys cached", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const user = await createEndUser(gw, platformId, platformKey, "peer-cached")
    const peer = await gw.startPeer()
    await waitForListeners(gw.db.pool, 2)
    try {
      expectError(await peer.call("GET", `/v1/platforms/${platformId}`, { key: user.endUserKey }), 403, "forbidden")
      const del = await gw.call("DELETE", `${usersPath(platformId)}/${user.endUserId}`, { key: platformKey })
      expect(del.status).toBe(204)
      let status = 403
      const deadline = Date.now() + 2_000
      while (status !== 401 && Date.now() < deadline) {
        status = (await peer.call("GET", `/v1/platforms/${platformId}`, { key: user.endUserKey })).status
        if (status !== 401) await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(status).toBe(401)
    } finally {
      await peer.close()
    }
  })
})

describe("tenant isolation", () => {
  it("another platform's path or end users are 404 everywhere; end-user and operator keys are 403", async () => {
    const a = await createPlatform(gw)
    const b = await createPlatform(gw, { name: "B", settings: { default_budget_usd: 7 } })
    const aUser = await createEndUser(gw, a.platformId, a.platformKey, "a-user")
    const bUser = await createEndUser(gw, b.platformId, b.platformKey, "shared-ext")
    const beforeB = await countRows(b.platformId)
    const beforeA = await countRows(a.platformId)

    const onB: Array<[string, string, unknown]> = [
      ["GET", usersPath(b.platformId), undefined],
      ["GET", `${usersPath(b.platformId)}?external_id=shared-ext`, undefined],
      ["POST", usersPath(b.platformId), { external_id: "shared-ext" }],
      ["POST", usersPath(b.platformId), { external_id: "brand-new" }],
      ["GET", `${usersPath(b.platformId)}/${bUser.endUserId}`, undefined],
      ["PATCH", `${usersPath(b.platformId)}/${bUser.endUserId}`, { is_active: false }],
      ["DELETE", `${usersPath(b.platformId)}/${bUser.endUserId}`, undefined]
    ]
    for (const [method, path, body] of onB) {
      expectError(await gw.call(method, path, { key: a.platformKey, body }), 404, "not_found")
    }
    const underA: Array<[string, string, unknown]> = [
      ["GET", `${usersPath(a.platformId)}/${bUser.endUserId}`, undefined],
      ["PATCH", `${usersPath(a.platformId)}/${bUser.endUserId}`, { metadata: { pwned: true } }],
      ["PATCH", `${usersPath(a.platformId)}/${bUser.endUserId}`, { is_active: false }],
      ["DELETE", `${usersPath(a.platformId)}/${bUser.endUserId}`, undefined]
    ]
    for (const [method, path, body] of underA) {
      expectError(await gw.call(method, path, { key: a.platformKey, body }), 404, "not_found")
    }
    // A's external_id filter does not reach B's user with that id.
    const filtered = await gw.call("GET", `${usersPath(a.platformId)}?external_id=shared-ext`, { key: a.platformKey })
    expect(filtered.body).toMatchObject({ data: [], total: 0 })
    // The same external_id on A is a different, new user of A.
    const twin = await gw.call("POST", usersPath(a.platformId), { key: a.platformKey, body: { external_id: "shared-ext" } })
    expect(twin.status).toBe(201)
    expect(twin.body.id).not.toBe(bUser.endUserId)
    expect(twin.body.platform_id).toBe(a.platformId)
    expect(twin.body.budget).toBeNull()

    const paths: Array<[string, string, unknown]> = [
      ["GET", usersPath(a.platformId), undefined],
      ["POST", usersPath(a.platformId), { external_id: "by-eu" }],
      ["GET", `${usersPath(a.platformId)}/${aUser.endUserId}`, undefined],
      ["PATCH", `${usersPath(a.platformId)}/${aUser.endUserId}`, { display_name: "self-renamed" }],
      ["DELETE", `${usersPath(a.platformId)}/${aUser.endUserId}`, undefined],
      ["GET", usersPath(b.platformId), undefined]
    ]
    for (const [method, path, body] of paths) {
      expectError(await gw.call(method, path, { key: aUser.endUserKey, body }), 403, "forbidden")
      expectError(await gw.call(method, path, { key: gw.adminKey, body }), 403, "forbidden")
    }
    expectError(await gw.call("GET", usersPath(a.platformId)), 401, "missing_api_key")
    expectError(await gw.call("GET", usersPath(a.platformId), { key: `sk-plat_${"Z".repeat(40)}` }), 401, "invalid_api_key")

    // Nothing changed on B; A only gained its own twin (one user, one key).
    expect(await countRows(b.platformId)).toEqual(beforeB)
    expect(await countRows(a.platformId)).toEqual({ ...beforeA, users: (beforeA.users ?? 0) + 1, keys: (beforeA.keys ?? 0) + 1 })
    const bRead = await gw.call("GET", `${usersPath(b.platformId)}/${bUser.endUserId}`, { key: b.platformKey })
    expect(bRead.body).toMatchObject({ is_active: true, metadata: {}, display_name: "shared-ext" })
    expectError(await probeEndUserKey(b.platformId, bUser.endUserKey), 403, "forbidden")
    const aRead = await gw.call("GET", `${usersPath(a.platformId)}/${aUser.endUserId}`, { key: a.platformKey })
    expect(aRead.body).toMatchObject({ display_name: "a-user", is_active: true })
  })
})

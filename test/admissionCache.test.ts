// Admission reads its snapshot from a short-lived cache (GATEWAY_ADMISSION_CACHE_TTL): this
// instance's own calls count at once and exactly (Settlements' running totals), writes through
// the API drop the cached state as they answer, and other writers are seen within the TTL; with
// a TTL of 0 (read on every call) at the very next call.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
beforeAll(async () => {
  gw = await startGateway({ env: { GATEWAY_ADMISSION_CACHE_TTL: "2s" } })
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] }
  })
})
afterAll(async () => {
  await gw?.close()
})

const tenant = async (maxUsd: number) => {
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
  const eu = await createEndUser(gw, platformId, platformKey, "user")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: maxUsd } })
  const budgetPath = `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`
  // "hello there": 3 prompt tokens, reply "echo: hello there" 3 completion tokens = 0.000009 USD.
  const ask = (call: Gateway["call"] = gw.call) =>
    call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "mock-echo", messages: [{ role: "user", content: "hello there" }] } })
  return { platformId, platformKey, endUserId: eu.endUserId, budgetPath, ask }
}

describe("admission cache", () => {
  it("counts this instance's own calls at once: the budget runs out on exactly the right call", async () => {
    const t = await tenant(0.00002)
    const statuses: Array<number> = []
    for (let i = 0; i < 5; i++) statuses.push((await t.ask()).status)
    // remaining before each call: 0.00002, 0.000011, 0.000002, then -0.000007 (refused).
    expect(statuses).toEqual([200, 200, 200, 402, 402])
    const budget = await gw.call("GET", t.budgetPath, { key: t.platformKey })
    expect(budget.body.used_usd).toBeCloseTo(0.000027, 9)
  })

  it("writes through the API reach admission at once", async () => {
    const t = await tenant(1)
    expect((await t.ask()).status).toBe(200)
    await gw.call("PATCH", t.budgetPath, { key: t.platformKey, body: { is_suspended: true } })
    expect((await t.ask()).body.error?.code).toBe("budget_suspended")
    await gw.call("PATCH", t.budgetPath, { key: t.platformKey, body: { is_suspended: false } })
    expect((await t.ask()).status).toBe(200)
    await gw.call("PUT", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/rate-limits`, { key: t.platformKey, body: { rpm_limit: 1 } })
    expect([(await t.ask()).status, (await t.ask()).status]).toEqual([200, 429])
  })

  it("a write that bypasses this instance (another instance, SQL) is seen within the TTL", async () => {
    const t = await tenant(1)
    expect((await t.ask()).status).toBe(200)
    await gw.db.pool.query("UPDATE budgets SET is_suspended = true WHERE end_user_id = $1", [t.endUserId])
    // Still the cached state: admitted without reading the database...
    expect((await t.ask()).status).toBe(200)
    // ... until the entry expires.
    await new Promise((resolve) => setTimeout(resolve, 2100))
    expect((await t.ask()).body.error?.code).toBe("budget_suspended")
  })

  it("with a TTL of 0 an instance starts and reads on every call: a write that bypasses it is seen by the very next call", async () => {
    const peer = await gw.startPeer({ GATEWAY_ADMISSION_CACHE_TTL: "0" })
    try {
      const t = await tenant(1)
      expect((await t.ask(peer.call)).status).toBe(200)
      await gw.db.pool.query("UPDATE budgets SET is_suspended = true WHERE end_user_id = $1", [t.endUserId])
      expect((await t.ask(peer.call)).body.error?.code).toBe("budget_suspended")
      await gw.db.pool.query("UPDATE budgets SET is_suspended = false WHERE end_user_id = $1", [t.endUserId])
      expect((await t.ask(peer.call)).status).toBe(200)
      // A write through the other instance's API (which drops only its own cached state).
      await gw.call("PATCH", t.budgetPath, { key: t.platformKey, body: { is_suspended: true } })
      expect((await t.ask(peer.call)).body.error?.code).toBe("budget_suspended")
    } finally {
      await peer.close()
    }
  })
})

// Operator and platform endpoints: creating platforms, reading and merging settings.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
beforeAll(async () => {
  gw = await startGateway()
})
afterAll(async () => {
  await gw?.close()
})

describe("operator platforms", () => {
  it("creates a platform with its first platform key, shown once", async () => {
    const res = await gw.call("POST", "/v1/admin/platforms", {
      key: gw.adminKey,
      body: { name: "Acme", settings: { default_budget_usd: 25 } }
    })
    expect(res.status).toBe(201)
    expect(res.body.platform).toMatchObject({ name: "Acme", settings: { default_budget_usd: 25 }, skills_enabled: false })
    expect(res.body.api_key.raw_key).toMatch(/^sk-plat_[0-9A-Za-z]{40}$/)
    expect(res.body.api_key.key_prefix).toBe(res.body.api_key.raw_key.slice(0, 12))
    expect(res.body.api_key.scopes).toEqual(["inference"])

    const one = await gw.call("GET", `/v1/admin/platforms/${res.body.platform.id}`, { key: gw.adminKey })
    expect(one.status).toBe(200)
    expect(one.body.id).toBe(res.body.platform.id)
    expect(JSON.stringify(one.body)).not.toContain("raw_key")
  })

  it("lists platforms with pagination", async () => {
    await createPlatform(gw, { name: "P-a" })
    await createPlatform(gw, { name: "P-b" })
    const page1 = await gw.call("GET", "/v1/admin/platforms?limit=2&page=1", { key: gw.adminKey })
    expect(page1.status).toBe(200)
    expect(page1.body.data).toHaveLength(2)
    expect(page1.body.limit).toBe(2)
    expect(page1.body.page).toBe(1)
    expect(page1.body.total).toBeGreaterThanOrEqual(3)
    const beyond = await gw.call("GET", "/v1/admin/platforms?limit=2&page=999", { key: gw.adminKey })
    expect(beyond.body.data).toEqual([])
    expect(beyond.body.total).toBe(page1.body.total)
  })

  it("refuses platform keys, end-user-less callers and bad bodies", async () => {
    const { platformKey } = await createPlatform(gw)
    const asPlatform = await gw.call("GET", "/v1/admin/platforms", { key: platformKey })
    expect(asPlatform.status).toBe(403)
    expect(asPlatform.body.error.code).toBe("forbidden")
    const noKey = await gw.call("POST", "/v1/admin/platforms", { body: { name: "x" } })
    expect(noKey.status).toBe(401)
    expect(noKey.body.error.code).toBe("missing_api_key")
    const noName = await gw.call("POST", "/v1/admin/platforms", { key: gw.adminKey, body: {} })
    expect(noName.status).toBe(422)
    expect(noName.body.error).toMatchObject({ code: "validation_error", param: "name" })
    const unknown = await gw.call("GET", "/v1/admin/platforms/00000000-0000-0000-0000-000000000000", { key: gw.adminKey })
    expect(unknown.status).toBe(404)
    expect(unknown.body.error.code).toBe("not_found")
  })
})

describe("platform settings", () => {
  it("reads and merges settings; null removes a field", async () => {
    const { platformId, platformKey } = await createPlatform(gw, { name: "S", settings: { default_budget_usd: 5 } })
    const get = await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })
    expect(get.status).toBe(200)
    expect(get.body.settings).toEqual({ default_budget_usd: 5 })

    const patch1 = await gw.call("PATCH", `/v1/platforms/${platformId}`, {
      key: platformKey,
      body: { settings: { end_user_wallet: { enabled: true, unit: "credits" } } }
    })
    expect(patch1.status).toBe(200)
    expect(patch1.body.settings).toEqual({ default_budget_usd: 5, end_user_wallet: { enabled: true, unit: "credits" } })

    const patch2 = await gw.call("PATCH", `/v1/platforms/${platformId}`, {
      key: platformKey,
      body: { settings: { default_budget_usd: null, end_user_wallet: { enabled: false } }, skills_enabled: true }
    })
    expect(patch2.body.settings).toEqual({ end_user_wallet: { enabled: false, unit: "credits" } })
    expect(patch2.body.skills_enabled).toBe(true)
  })

  it("rejects unknown and ill-typed settings with 422 naming the field", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const cases: Array<[unknown, string]> = [
      [{ settings: { default_budget_usd: 0 } }, "settings.default_budget_usd"],
      [{ settings: { default_budget_usd: "10" } }, "settings.default_budget_usd"],
      [{ settings: { no_such_setting: true } }, "settings.no_such_setting"],
      [{ settings: { end_user_wallet: { enabled: "yes" } } }, "settings.end_user_wallet.enabled"],
      [{ settings: { default_rate_limits: { rpm_limit: -1 } } }, "settings.default_rate_limits.rpm_limit"]
    ]
    for (const [body, param] of cases) {
      const res = await gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body })
      expect(res.status, JSON.stringify(body)).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param, type: "invalid_request_error" })
    }
    const after = await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })
    expect(after.body.settings).toEqual({})
  })

  it("keeps tenants apart: another platform is 404, end-user keys are 403", async () => {
    const a = await createPlatform(gw)
    const b = await createPlatform(gw)
    const cross = await gw.call("GET", `/v1/platforms/${b.platformId}`, { key: a.platformKey })
    expect(cross.status).toBe(404)
    const crossPatch = await gw.call("PATCH", `/v1/platforms/${b.platformId}`, { key: a.platformKey, body: { name: "pwned" } })
    expect(crossPatch.status).toBe(404)
    const eu = await gw.call("POST", `/v1/platforms/${a.platformId}/end-users`, { key: a.platformKey, body: { external_id: "u" } })
    const asEndUser = await gw.call("GET", `/v1/platforms/${a.platformId}`, { key: eu.body.api_key.raw_key })
    expect(asEndUser.status).toBe(403)
    expect(asEndUser.body.error.code).toBe("forbidden")
  })
})

// Authentication: the whole matrix of keys (missing, malformed, unknown, revoked, deleted,
// expired, inactive end user, wrong kind, other tenant) and revocation taking effect on the
// very next request, on this instance and on another one sharing the database.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let a: { platformId: string; platformKey: string }
let b: { platformId: string; platformKey: string }
beforeAll(async () => {
  gw = await startGateway()
  a = await createPlatform(gw, { name: "A" })
  b = await createPlatform(gw, { name: "B" })
})
afterAll(async () => {
  await gw?.close()
})

const platformGet = (key: string | undefined, platformId = a.platformId, headers?: Record<string, string>) =>
  gw.call("GET", `/v1/platforms/${platformId}`, { key, ...(headers ? { headers } : {}) })

const newPlatformKey = async (body: Record<string, unknown> = {}) => {
  const res = await gw.call("POST", `/v1/platforms/${a.platformId}/api-keys`, { key: a.platformKey, body })
  expect(res.status).toBe(201)
  return { id: res.body.id as string, raw: res.body.raw_key as string }
}

describe("key matrix", () => {
  it("no key, malformed header, unknown key -> 401", async () => {
    const none = await platformGet(undefined)
    expect(none.status).toBe(401)
    expect(none.body.error.code).toBe("missing_api_key")

    for (const header of ["Token abc", "Bearer", "Bearer a b", "Basic dXNlcjpwYXNz"]) {
      const res = await platformGet(undefined, a.platformId, { authorization: header })
      expect(res.status, header).toBe(401)
      expect(res.body.error.code, header).toBe(header === "Bearer" ? "missing_api_key" : "invalid_api_key")
    }
    const unknown = await platformGet("sk-plat_" + "x".repeat(40))
    expect(unknown.status).toBe(401)
    expect(unknown.body.error.code).toBe("invalid_api_key")
    const wrongAdmin = await platformGet("sk-admin_" + "y".repeat(40))
    expect(wrongAdmin.status).toBe(401)
  })

  it("a working key: 200 and the scheme is case-insensitive", async () => {
    expect((await platformGet(a.platformKey)).status).toBe(200)
    const lower = await platformGet(undefined, a.platformId, { authorization: `bearer ${a.platformKey}` })
    expect(lower.status).toBe(200)
  })

  it("revoked (PATCH is_active false) -> 401 on the very next request, even when cached", async () => {
    const key = await newPlatformKey()
    expect((await platformGet(key.raw)).status).toBe(200) // now cached
    const patch = await gw.call("PATCH", `/v1/platforms/${a.platformId}/api-keys/${key.id}`, {
      key: a.platformKey,
      body: { is_active: false }
    })
    expect(patch.status).toBe(200)
    expect(patch.body.is_active).toBe(false)
    const after = await platformGet(key.raw)
    expect(after.status).toBe(401)
    expect(after.body.error.code).toBe("invalid_api_key")
    // Re-enabled by the platform: works again.
    await gw.call("PATCH", `/v1/platforms/${a.platformId}/api-keys/${key.id}`, { key: a.platformKey, body: { is_active: true } })
    expect((await platformGet(key.raw)).status).toBe(200)
  })

  it("deleted -> 401 on the very next request", async () => {
    const key = await newPlatformKey()
    expect((await platformGet(key.raw)).status).toBe(200)
    const del = await gw.call("DELETE", `/v1/platforms/${a.platformId}/api-keys/${key.id}`, { key: a.platformKey })
    expect(del.status).toBe(204)
    const after = await platformGet(key.raw)
    expect(after.status).toBe(401)
    expect(after.body.error.code).toBe("invalid_api_key")
  })

  it("expired -> 401 api_key_expired, also when it was cached while valid", async () => {
    const expiresAt = new Date(Date.now() + 1500)
    const key = await newPlatformKey({ expires_at: expiresAt.toISOString() })
    expect((await platformGet(key.raw)).status).toBe(200)
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt.getTime() - Date.now()) + 200))
    const after = await platformGet(key.raw)
    expect(after.status).toBe(401)
    expect(after.body.error.code).toBe("api_key_expired")
  })

  it("inactive end user -> 403 forbidden at once; reactivated -> works", async () => {
    const eu = await createEndUser(gw, a.platformId, a.platformKey, "inactive-user")
    // A working end-user key on a management route authenticates, then is refused as the wrong kind.
    const probe = await gw.call("GET", `/v1/platforms/${a.platformId}`, { key: eu.endUserKey })
    expect(probe.status).toBe(403)
    expect(probe.body.error.message).not.toMatch(/deactivated/)
    await gw.call("PATCH", `/v1/platforms/${a.platformId}/end-users/${eu.endUserId}`, {
      key: a.platformKey,
      body: { is_active: false }
    })
    const denied = await gw.call("GET", `/v1/platforms/${a.platformId}`, { key: eu.endUserKey })
    expect(denied.status).toBe(403)
    expect(denied.body.error.message).toMatch(/deactivated/)
    await gw.call("PATCH", `/v1/platforms/${a.platformId}/end-users/${eu.endUserId}`, {
      key: a.platformKey,
      body: { is_active: true }
    })
    const again = await gw.call("GET", `/v1/platforms/${a.platformId}`, { key: eu.endUserKey })
    expect(again.body.error.message).not.toMatch(/deactivated/)
  })

  it("wrong key kind -> 403 forbidden", async () => {
    const eu = await createEndUser(gw, a.platformId, a.platformKey, "kind-user")
    const euOnManagement = await gw.call("GET", `/v1/platforms/${a.platformId}/end-users`, { key: eu.endUserKey })
    expect(euOnManagement.status).toBe(403)
    expect(euOnManagement.body.error.code).toBe("forbidden")
    const pkOnAdmin = await gw.call("GET", "/v1/admin/platforms", { key: a.platformKey })
    expect(pkOnAdmin.status).toBe(403)
    const adminOnPlatform = await gw.call("GET", `/v1/platforms/${a.platformId}`, { key: gw.adminKey })
    expect(adminOnPlatform.status).toBe(403)
  })

  it("other tenant -> 404, never 403", async () => {
    const res = await gw.call("GET", `/v1/platforms/${b.platformId}/end-users`, { key: a.platformKey })
    expect(res.status).toBe(404)
    expect(res.body.error.code).toBe("not_found")
  })
})

describe("revocation across instances", () => {
  it("a key revoked on one instance fails on the other at once", async () => {
    const peer = await gw.startPeer()
    const key = await newPlatformKey()
    const eu = await createEndUser(gw, a.platformId, a.platformKey, "peer-user")
    // Warm the peer's cache with both keys.
    expect((await peer.call("GET", `/v1/platforms/${a.platformId}`, { key: key.raw })).status).toBe(200)
    // (an authenticated end-user key on a management route is 403; an unknown key would be 401)
    expect((await peer.call("GET", `/v1/platforms/${a.platformId}`, { key: eu.endUserKey })).status).toBe(403)

    // The other instance learns by Postgres NOTIFY: milliseconds, so allow a short poll.
    await gw.call("PATCH", `/v1/platforms/${a.platformId}/api-keys/${key.id}`, { key: a.platformKey, body: { is_active: false } })
    await expect.poll(async () => (await peer.call("GET", `/v1/platforms/${a.platformId}`, { key: key.raw })).status, { timeout: 1000, interval: 20 })
      .toBe(401)

    await gw.call("DELETE", `/v1/platforms/${a.platformId}/end-users/${eu.endUserId}`, { key: a.platformKey })
    await expect.poll(async () => (await peer.call("GET", `/v1/platforms/${a.platformId}`, { key: eu.endUserKey })).body.error?.code, {
      timeout: 1000,
      interval: 20
    }).toBe("invalid_api_key")
  })
})

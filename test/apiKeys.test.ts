// API keys of a platform: create, list, read, patch, revoke, delete, expiry, last_used_at, tenant isolation.
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
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

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

/** A platform key of `platformId` can read that platform (200); a dead key gets 401. */
const platformKeyWorks = (platformId: string, key: string) => gw.call("GET", `/v1/platforms/${platformId}`, { key })

const keysPath = (platformId: string) => `/v1/platforms/${platformId}/api-keys`

const countRows = async (platformId: string) => {
  const keys = await gw.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM api_keys WHERE platform_id = $1", [platformId])
  const users = await gw.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM end_users WHERE platform_id = $1", [platformId])
  return { keys: keys.rows[0]?.n, users: users.rows[0]?.n }
}

describe("creating keys", () => {
  it("creates a platform key with defaults; the secret is shown once and works", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const before = Date.now()
    const res = await gw.call("POST", keysPath(platformId), { key: platformKey, body: {} })
    expect(res.status).toBe(201)
    const key = res.body
    expect(key.raw_key).toMatch(/^sk-plat_[0-9A-Za-z]{40}$/)
    expect(key.key_prefix).toBe(key.raw_key.slice(0, 12))
    expect(key).toMatchObject({
      platform_id: platformId,
      name: "default",
      scopes: ["inference"],
      is_active: true,
      last_used_at: null,
      expires_at: null
    })
    expect(key.id).toMatch(/^[0-9a-f-]{36}$/)
    expect(key).not.toHaveProperty("end_user_id")
    expect(Date.parse(key.created_at)).toBeGreaterThanOrEqual(before - 5_000)
    expect(JSON.stringify(key)).not.toMatch(/hash/i)

    const used = await platformKeyWorks(platformId, key.raw_key)
    expect(used.status).toBe(200)
    expect(used.body.id).toBe(platformId)

    // The table keeps the hash and prefix only, never the secret.
    const row = await gw.db.pool.query("SELECT * FROM api_keys WHERE id = $1", [key.id])
    expect(row.rows).toHaveLength(1)
    expect(JSON.stringify(row.rows[0])).not.toContain(key.raw_key)
  })

  it("honours name, scopes and a future expires_at", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const expiresAt = new Date(Date.now() + 24 * 3600 * 1000).toISOString()
    const res = await gw.call("POST", keysPath(platformId), {
      key: platformKey,
      body: { name: "ci-bot", scopes: ["inference", "read:logs"], expires_at: expiresAt }
    })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ name: "ci-bot", scopes: ["inference", "read:logs"], is_active: true })
    expect(Date.parse(res.body.expires_at)).toBe(Date.parse(expiresAt))
    const name100 = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "n".repeat(100) } })
    expect(name100.status).toBe(201)
    expect(name100.body.name).toBe("n".repeat(100))
    const again = await platformKeyWorks(platformId, res.body.raw_key)
    expect(again.status).toBe(200)
  })

  it("creates an end-user key when end_user_id is given", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const { endUserId } = await createEndUser(gw, platformId, platformKey, "eu-key-owner")
    const res = await gw.call("POST", keysPath(platformId), {
      key: platformKey,
      body: { end_user_id: endUserId, name: "mobile" }
    })
    expect(res.status).toBe(201)
    expect(res.body.raw_key).toMatch(/^sk-eu_[0-9A-Za-z]{40}$/)
    expect(res.body.key_prefix).toBe(res.body.raw_key.slice(0, 12))
    expect(res.body).toMatchObject({
      platform_id: platformId,
      end_user_id: endUserId,
      name: "mobile",
      scopes: ["inference"],
      is_active: true,
      expires_at: null
    })
    expect(res.body).not.toHaveProperty("last_used_at")
    // It authenticates as an end-user key: management endpoints answer 403, not 401.
    const asEndUser = await gw.call("GET", `/v1/platforms/${platformId}`, { key: res.body.raw_key })
    expectError(asEndUser, 403, "forbidden")

    const listed = await gw.call("GET", `${keysPath(platformId)}?type=end_user`, { key: platformKey })
    expect(listed.status).toBe(200)
    expect(listed.body.data.map((k: { id: string }) => k.id)).toContain(res.body.id)
  })

  it("answers 404 param end_user_id for an unknown, malformed or foreign end user", async () => {
    const a = await createPlatform(gw)
    const b = await createPlatform(gw)
    const foreign = await createEndUser(gw, b.platformId, b.platformKey, "b-user")
    const before = await countRows(a.platformId)
    for (const endUserId of [UNKNOWN_ID, "not-a-uuid", foreign.endUserId]) {
      const res = await gw.call("POST", keysPath(a.platformId), { key: a.platformKey, body: { end_user_id: endUserId } })
      expectError(res, 404, "not_found", "end_user_id")
    }
    expect(await countRows(a.platformId)).toEqual(before)
  })

  it("rejects bad bodies with 422 naming the field and stores nothing", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const before = await countRows(platformId)
    const past = new Date(Date.now() - 60_000).toISOString()
    const cases: Array<[unknown, string]> = [
      [{ name: "" }, "name"],
      [{ name: "x".repeat(101) }, "name"],
      [{ name: 42 }, "name"],
      [{ scopes: ["Not A Scope"] }, "scopes.0"],
      [{ scopes: ["inference", 7] }, "scopes.1"],
      [{ scopes: "inference" }, "scopes"],
      [{ expires_at: past }, "expires_at"],
      [{ expires_at: "not-a-date" }, "expires_at"],
      [{ expires_at: 1893456000 }, "expires_at"],
      [{ is_admin: true }, "is_admin"],
      [{ name: "ok", raw_key: "sk-plat_chosen" }, "raw_key"]
    ]
    for (const [body, param] of cases) {
      const res = await gw.call("POST", keysPath(platformId), { key: platformKey, body })
      expectError(res, 422, "validation_error", param)
      expect(res.body.error.type).toBe("invalid_request_error")
    }
    expect(await countRows(platformId)).toEqual(before)
  })

  it("answers 400 for a body that is not JSON and stores nothing", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const before = await countRows(platformId)
    const res = await gw.call("POST", keysPath(platformId), {
      key: platformKey,
      rawBody: "{\"name\": ",
      headers: { "content-type": "application/json" }
    })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe("invalid_json")
    expect(await countRows(platformId)).toEqual(before)
  })
})

describe("listing and reading keys", () => {
  it("lists platform keys by default and end-user keys with type=end_user, paginated", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created: Array<string> = []
    for (const name of ["k1", "k2", "k3"]) {
      const res = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name } })
      created.push(res.body.id)
    }
    await createEndUser(gw, platformId, platformKey, "lister-1")
    await createEndUser(gw, platformId, platformKey, "lister-2")

    const all = await gw.call("GET", keysPath(platformId), { key: platformKey })
    expect(all.status).toBe(200)
    expect(Object.keys(all.body).sort()).toEqual(["data", "limit", "page", "total"])
    expect(all.body).toMatchObject({ total: 4, page: 1, limit: 20 })
    expect(all.body.data).toHaveLength(4)
    for (const key of all.body.data) {
      expect(key).not.toHaveProperty("raw_key")
      expect(key).not.toHaveProperty("end_user_id")
      expect(key).toHaveProperty("last_used_at")
      expect(JSON.stringify(key)).not.toMatch(/hash/i)
    }
    expect(all.body.data.map((k: { id: string }) => k.id)).toEqual(expect.arrayContaining(created))

    const explicit = await gw.call("GET", `${keysPath(platformId)}?type=platform`, { key: platformKey })
    expect(explicit.body.total).toBe(4)

    const eu = await gw.call("GET", `${keysPath(platformId)}?type=end_user`, { key: platformKey })
    expect(eu.status).toBe(200)
    expect(eu.body.total).toBe(2)
    for (const key of eu.body.data) {
      expect(key.end_user_id).toMatch(/^[0-9a-f-]{36}$/)
      expect(key).not.toHaveProperty("raw_key")
    }

    const page1 = await gw.call("GET", `${keysPath(platformId)}?limit=3&page=1`, { key: platformKey })
    const page2 = await gw.call("GET", `${keysPath(platformId)}?limit=3&page=2`, { key: platformKey })
    expect(page1.body).toMatchObject({ total: 4, page: 1, limit: 3 })
    expect(page1.body.data).toHaveLength(3)
    expect(page2.body).toMatchObject({ total: 4, page: 2, limit: 3 })
    expect(page2.body.data).toHaveLength(1)
    const ids = [...page1.body.data, ...page2.body.data].map((k: { id: string }) => k.id)
    expect(new Set(ids).size).toBe(4)

    const beyond = await gw.call("GET", `${keysPath(platformId)}?page=50`, { key: platformKey })
    expect(beyond.status).toBe(200)
    expect(beyond.body).toMatchObject({ data: [], total: 4, page: 50 })

    const max = await gw.call("GET", `${keysPath(platformId)}?limit=100`, { key: platformKey })
    expect(max.status).toBe(200)
    expect(max.body.limit).toBe(100)
  })

  it("rejects bad list parameters with 422 naming the parameter", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const cases: Array<[string, string]> = [
      ["page=0", "page"],
      ["page=-1", "page"],
      ["page=1.5", "page"],
      ["page=abc", "page"],
      ["limit=0", "limit"],
      ["limit=101", "limit"],
      ["limit=2.5", "limit"],
      ["limit=lots", "limit"],
      ["type=admin", "type"]
    ]
    for (const [query, param] of cases) {
      const res = await gw.call("GET", `${keysPath(platformId)}?${query}`, { key: platformKey })
      expectError(res, 422, "validation_error", param)
    }
  })

  it("reads one key as metadata only; unknown and malformed ids are 404", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "reader" } })
    const one = await gw.call("GET", `${keysPath(platformId)}/${created.body.id}`, { key: platformKey })
    expect(one.status).toBe(200)
    const { raw_key: _raw, ...metadata } = created.body
    expect(one.body).toEqual(metadata)
    expect(one.body).not.toHaveProperty("raw_key")
    expect(JSON.stringify(one.body)).not.toContain(created.body.raw_key)
    expect(JSON.stringify(one.body)).not.toMatch(/hash/i)

    const { endUserKey, body: euBody } = await createEndUser(gw, platformId, platformKey, "read-me")
    const euOne = await gw.call("GET", `${keysPath(platformId)}/${euBody.api_key.id}`, { key: platformKey })
    expect(euOne.status).toBe(200)
    expect(euOne.body).toMatchObject({ id: euBody.api_key.id, end_user_id: euBody.id, is_active: true })
    expect(JSON.stringify(euOne.body)).not.toContain(endUserKey)

    for (const id of [UNKNOWN_ID, "not-a-uuid", "12345", `${created.body.id}x`]) {
      const res = await gw.call("GET", `${keysPath(platformId)}/${id}`, { key: platformKey })
      expectError(res, 404, "not_found")
    }
  })
})

describe("changing, revoking and deleting keys", () => {
  it("renames a key and revokes it: the very next request is 401; re-enabling restores it", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "temp" } })
    const raw = created.body.raw_key as string
    const id = created.body.id as string
    expect((await platformKeyWorks(platformId, raw)).status).toBe(200) // now cached

    const renamed = await gw.call("PATCH", `${keysPath(platformId)}/${id}`, { key: platformKey, body: { name: "renamed" } })
    expect(renamed.status).toBe(200)
    expect(renamed.body).toMatchObject({ id, name: "renamed", is_active: true })
    expect(renamed.body).not.toHaveProperty("raw_key")
    expect((await platformKeyWorks(platformId, raw)).status).toBe(200)

    const revoked = await gw.call("PATCH", `${keysPath(platformId)}/${id}`, { key: platformKey, body: { is_active: false } })
    expect(revoked.status).toBe(200)
    expect(revoked.body).toMatchObject({ id, name: "renamed", is_active: false })
    expectError(await platformKeyWorks(platformId, raw), 401, "invalid_api_key")
    expectError(await gw.call("GET", keysPath(platformId), { key: raw }), 401, "invalid_api_key")

    // Still visible to the platform as an inactive key.
    const read = await gw.call("GET", `${keysPath(platformId)}/${id}`, { key: platformKey })
    expect(read.body.is_active).toBe(false)

    const restored = await gw.call("PATCH", `${keysPath(platformId)}/${id}`, { key: platformKey, body: { is_active: true } })
    expect(restored.status).toBe(200)
    expect(restored.body.is_active).toBe(true)
    expect((await platformKeyWorks(platformId, raw)).status).toBe(200)
  })

  it("a platform key can revoke itself", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "self" } })
    const raw = created.body.raw_key as string
    const res = await gw.call("PATCH", `${keysPath(platformId)}/${created.body.id}`, { key: raw, body: { is_active: false } })
    expect(res.status).toBe(200)
    expectError(await platformKeyWorks(platformId, raw), 401, "invalid_api_key")
    expect((await platformKeyWorks(platformId, platformKey)).status).toBe(200)
  })

  it("patches end-user keys only with type=end_user", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const { endUserKey, body } = await createEndUser(gw, platformId, platformKey, "patch-eu")
    const keyId = body.api_key.id as string
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: endUserKey }), 403, "forbidden")

    const noType = await gw.call("PATCH", `${keysPath(platformId)}/${keyId}`, { key: platformKey, body: { is_active: false } })
    expectError(noType, 404, "not_found")
    const platformType = await gw.call("PATCH", `${keysPath(platformId)}/${keyId}?type=platform`, {
      key: platformKey,
      body: { is_active: false }
    })
    expectError(platformType, 404, "not_found")
    // Nothing changed: the key still authenticates.
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: endUserKey }), 403, "forbidden")

    const revoked = await gw.call("PATCH", `${keysPath(platformId)}/${keyId}?type=end_user`, {
      key: platformKey,
      body: { is_active: false, name: "revoked-eu" }
    })
    expect(revoked.status).toBe(200)
    expect(revoked.body).toMatchObject({ id: keyId, end_user_id: body.id, is_active: false, name: "revoked-eu" })
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: endUserKey }), 401, "invalid_api_key")

    const restored = await gw.call("PATCH", `${keysPath(platformId)}/${keyId}?type=end_user`, {
      key: platformKey,
      body: { is_active: true }
    })
    expect(restored.body.is_active).toBe(true)
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: endUserKey }), 403, "forbidden")

    // A platform key is not found under type=end_user.
    const first = await gw.call("GET", keysPath(platformId), { key: platformKey })
    const platformKeyId = first.body.data[0].id as string
    const wrongType = await gw.call("PATCH", `${keysPath(platformId)}/${platformKeyId}?type=end_user`, {
      key: platformKey,
      body: { name: "nope" }
    })
    expectError(wrongType, 404, "not_found")
  })

  it("rejects bad patch bodies with 422 and changes nothing", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "stable" } })
    const path = `${keysPath(platformId)}/${created.body.id}`
    const cases: Array<[unknown, string]> = [
      [{ name: "" }, "name"],
      [{ name: "y".repeat(101) }, "name"],
      [{ is_active: "false" }, "is_active"],
      [{ is_active: 0 }, "is_active"],
      [{ scopes: ["inference"] }, "scopes"],
      [{ expires_at: new Date(Date.now() + 3600_000).toISOString() }, "expires_at"]
    ]
    for (const [body, param] of cases) {
      expectError(await gw.call("PATCH", path, { key: platformKey, body }), 422, "validation_error", param)
    }
    const typeBad = await gw.call("PATCH", `${path}?type=nope`, { key: platformKey, body: { name: "z" } })
    expectError(typeBad, 422, "validation_error", "type")
    const after = await gw.call("GET", path, { key: platformKey })
    expect(after.body).toMatchObject({ name: "stable", is_active: true, expires_at: null, scopes: ["inference"] })
    expect((await platformKeyWorks(platformId, created.body.raw_key)).status).toBe(200)
    const unknown = await gw.call("PATCH", `${keysPath(platformId)}/${UNKNOWN_ID}`, { key: platformKey, body: { name: "z" } })
    expectError(unknown, 404, "not_found")
    const malformed = await gw.call("PATCH", `${keysPath(platformId)}/nope`, { key: platformKey, body: { name: "z" } })
    expectError(malformed, 404, "not_found")
  })

  it("deletes a platform key: 204, 401 on next use, gone from reads, second delete 404", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "doomed" } })
    const raw = created.body.raw_key as string
    const id = created.body.id as string
    expect((await platformKeyWorks(platformId, raw)).status).toBe(200) // cached

    const del = await gw.call("DELETE", `${keysPath(platformId)}/${id}`, { key: platformKey })
    expect(del.status).toBe(204)
    expect(del.body).toBeNull()
    expectError(await platformKeyWorks(platformId, raw), 401, "invalid_api_key")

    expectError(await gw.call("GET", `${keysPath(platformId)}/${id}`, { key: platformKey }), 404, "not_found")
    const list = await gw.call("GET", keysPath(platformId), { key: platformKey })
    expect(list.body.data.map((k: { id: string }) => k.id)).not.toContain(id)
    expect(list.body.total).toBe(1)
    expectError(await gw.call("DELETE", `${keysPath(platformId)}/${id}`, { key: platformKey }), 404, "not_found")
    const patch = await gw.call("PATCH", `${keysPath(platformId)}/${id}`, { key: platformKey, body: { is_active: true } })
    expectError(patch, 404, "not_found")
    // Re-enabling a deleted key is impossible: it stays dead.
    expectError(await platformKeyWorks(platformId, raw), 401, "invalid_api_key")

    for (const bad of [UNKNOWN_ID, "not-a-uuid"]) {
      expectError(await gw.call("DELETE", `${keysPath(platformId)}/${bad}`, { key: platformKey }), 404, "not_found")
    }
  })

  it("deletes end-user keys only with type=end_user; the user and other keys survive", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const user = await createEndUser(gw, platformId, platformKey, "eu-del")
    const second = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { end_user_id: user.endUserId } })
    const keyId = user.body.api_key.id as string
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: user.endUserKey }), 403, "forbidden")

    expectError(await gw.call("DELETE", `${keysPath(platformId)}/${keyId}`, { key: platformKey }), 404, "not_found")
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: user.endUserKey }), 403, "forbidden")

    const del = await gw.call("DELETE", `${keysPath(platformId)}/${keyId}?type=end_user`, { key: platformKey })
    expect(del.status).toBe(204)
    expect(del.body).toBeNull()
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: user.endUserKey }), 401, "invalid_api_key")
    expectError(await gw.call("GET", `${keysPath(platformId)}/${keyId}`, { key: platformKey }), 404, "not_found")
    const list = await gw.call("GET", `${keysPath(platformId)}?type=end_user`, { key: platformKey })
    expect(list.body.total).toBe(1)
    expect(list.body.data.map((k: { id: string }) => k.id)).toEqual([second.body.id])
    expectError(await gw.call("DELETE", `${keysPath(platformId)}/${keyId}?type=end_user`, { key: platformKey }), 404, "not_found")

    // The other key of that user still authenticates, and the user still exists.
    expectError(await gw.call("GET", `/v1/platforms/${platformId}`, { key: second.body.raw_key }), 403, "forbidden")
    const stillThere = await gw.call("GET", `/v1/platforms/${platformId}/end-users/${user.endUserId}`, { key: platformKey })
    expect(stillThere.status).toBe(200)

    // A platform key is not deleted under type=end_user.
    const platformKeys = await gw.call("GET", keysPath(platformId), { key: platformKey })
    const platformKeyId = platformKeys.body.data[0].id as string
    expectError(await gw.call("DELETE", `${keysPath(platformId)}/${platformKeyId}?type=end_user`, { key: platformKey }), 404, "not_found")
    expect((await platformKeyWorks(platformId, platformKey)).status).toBe(200)
  })
})

describe("concurrent changes", () => {
  it("parallel deletes of one key: exactly one 204, the rest 404", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "contested" } })
    const results = await Promise.all(
      Array.from({ length: 6 }, () => gw.call("DELETE", `${keysPath(platformId)}/${created.body.id}`, { key: platformKey }))
    )
    expect(results.filter((r) => r.status === 204)).toHaveLength(1)
    for (const r of results.filter((r) => r.status !== 204)) expectError(r, 404, "not_found")
    expectError(await platformKeyWorks(platformId, created.body.raw_key), 401, "invalid_api_key")
    const list = await gw.call("GET", keysPath(platformId), { key: platformKey })
    expect(list.body.total).toBe(1)
  })

  it("keys created in parallel are all distinct and all work", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: `p-${i}` } }))
    )
    expect(results.map((r) => r.status)).toEqual(Array(10).fill(201))
    expect(new Set(results.map((r) => r.body.raw_key)).size).toBe(10)
    expect(new Set(results.map((r) => r.body.id)).size).toBe(10)
    for (const r of results) expect((await platformKeyWorks(platformId, r.body.raw_key)).status).toBe(200)
    const list = await gw.call("GET", keysPath(platformId), { key: platformKey })
    expect(list.body.total).toBe(11)
  })
})

describe("expiry and usage", () => {
  it("an expired key answers 401 api_key_expired, also when it was cached", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const expiresAt = new Date(Date.now() + 1_500)
    const created = await gw.call("POST", keysPath(platformId), {
      key: platformKey,
      body: { name: "short-lived", expires_at: expiresAt.toISOString() }
    })
    expect(created.status).toBe(201)
    const raw = created.body.raw_key as string
    expect((await platformKeyWorks(platformId, raw)).status).toBe(200)
    await sleep(Math.max(0, expiresAt.getTime() - Date.now()) + 300)
    expectError(await platformKeyWorks(platformId, raw), 401, "api_key_expired")
    expectError(await gw.call("GET", keysPath(platformId), { key: raw }), 401, "api_key_expired")
    // The record still shows the expiry; the issuing key is unaffected.
    const read = await gw.call("GET", `${keysPath(platformId)}/${created.body.id}`, { key: platformKey })
    expect(Date.parse(read.body.expires_at)).toBe(expiresAt.getTime())
  })

  it("sets last_used_at on a platform key after it is used", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "tracked" } })
    const path = `${keysPath(platformId)}/${created.body.id}`
    expect(created.body.last_used_at).toBeNull()
    await sleep(1_200) // a flush passes: still unused
    expect((await gw.call("GET", path, { key: platformKey })).body.last_used_at).toBeNull()

    const usedAt = Date.now()
    expect((await platformKeyWorks(platformId, created.body.raw_key)).status).toBe(200)
    let lastUsed: string | null = null
    const deadline = Date.now() + 5_000
    while (lastUsed === null && Date.now() < deadline) {
      await sleep(200)
      lastUsed = (await gw.call("GET", path, { key: platformKey })).body.last_used_at
    }
    expect(lastUsed).not.toBeNull()
    const ts = Date.parse(lastUsed as string)
    expect(ts).toBeGreaterThanOrEqual(usedAt - 1_000)
    expect(ts).toBeLessThanOrEqual(Date.now() + 1_000)
  })
})

describe("authentication and tenant isolation", () => {
  it("answers 401 for missing, unknown and malformed keys", async () => {
    const { platformId } = await createPlatform(gw)
    expectError(await gw.call("GET", keysPath(platformId)), 401, "missing_api_key")
    expectError(await gw.call("POST", keysPath(platformId), { body: {} }), 401, "missing_api_key")
    const fake = `sk-plat_${"A".repeat(40)}`
    expectError(await gw.call("GET", keysPath(platformId), { key: fake }), 401, "invalid_api_key")
    expectError(await gw.call("GET", keysPath(platformId), { key: `sk-eu_${"b".repeat(40)}` }), 401, "invalid_api_key")
    const basic = await gw.call("GET", keysPath(platformId), { headers: { authorization: "Basic dXNlcjpwYXNz" } })
    expectError(basic, 401, "invalid_api_key")
  })

  it("another platform's keys and ids are 404 on every endpoint; end-user and operator keys are 403", async () => {
    const a = await createPlatform(gw)
    const b = await createPlatform(gw)
    const bKey = await gw.call("POST", keysPath(b.platformId), { key: b.platformKey, body: { name: "b-secret" } })
    const bUser = await createEndUser(gw, b.platformId, b.platformKey, "b-user")
    const bEuKeyId = bUser.body.api_key.id as string
    const aUser = await createEndUser(gw, a.platformId, a.platformKey, "a-user")
    const before = await countRows(b.platformId)

    // A's key on B's paths.
    const onB: Array<[string, string, unknown]> = [
      ["GET", keysPath(b.platformId), undefined],
      ["GET", `${keysPath(b.platformId)}?type=end_user`, undefined],
      ["POST", keysPath(b.platformId), { name: "intruder" }],
      ["POST", keysPath(b.platformId), { end_user_id: bUser.endUserId }],
      ["GET", `${keysPath(b.platformId)}/${bKey.body.id}`, undefined],
      ["PATCH", `${keysPath(b.platformId)}/${bKey.body.id}`, { is_active: false }],
      ["PATCH", `${keysPath(b.platformId)}/${bEuKeyId}?type=end_user`, { is_active: false }],
      ["DELETE", `${keysPath(b.platformId)}/${bKey.body.id}`, undefined],
      ["DELETE", `${keysPath(b.platformId)}/${bEuKeyId}?type=end_user`, undefined]
    ]
    for (const [method, path, body] of onB) {
      const res = await gw.call(method, path, { key: a.platformKey, body })
      expectError(res, 404, "not_found")
    }
    // B's key ids under A's own path.
    const underA: Array<[string, string, unknown]> = [
      ["GET", `${keysPath(a.platformId)}/${bKey.body.id}`, undefined],
      ["GET", `${keysPath(a.platformId)}/${bEuKeyId}`, undefined],
      ["PATCH", `${keysPath(a.platformId)}/${bKey.body.id}`, { is_active: false }],
      ["PATCH", `${keysPath(a.platformId)}/${bEuKeyId}?type=end_user`, { is_active: false }],
      ["DELETE", `${keysPath(a.platformId)}/${bKey.body.id}`, undefined],
      ["DELETE", `${keysPath(a.platformId)}/${bEuKeyId}?type=end_user`, undefined]
    ]
    for (const [method, path, body] of underA) {
      const res = await gw.call(method, path, { key: a.platformKey, body })
      expectError(res, 404, "not_found")
    }
    // A's list never shows B's keys.
    const aList = await gw.call("GET", keysPath(a.platformId), { key: a.platformKey })
    const aEuList = await gw.call("GET", `${keysPath(a.platformId)}?type=end_user`, { key: a.platformKey })
    const aIds = [...aList.body.data, ...aEuList.body.data].map((k: { id: string }) => k.id)
    expect(aIds).not.toContain(bKey.body.id)
    expect(aIds).not.toContain(bEuKeyId)
    for (const key of [...aList.body.data, ...aEuList.body.data]) expect(key.platform_id).toBe(a.platformId)

    // End-user keys (own platform or not) and the operator key: 403 forbidden.
    const ownPaths: Array<[string, string, unknown]> = [
      ["GET", keysPath(a.platformId), undefined],
      ["POST", keysPath(a.platformId), { name: "eu-made" }],
      ["GET", `${keysPath(a.platformId)}/${aUser.body.api_key.id}`, undefined],
      ["PATCH", `${keysPath(a.platformId)}/${aUser.body.api_key.id}?type=end_user`, { name: "x" }],
      ["DELETE", `${keysPath(a.platformId)}/${aUser.body.api_key.id}?type=end_user`, undefined],
      ["GET", keysPath(b.platformId), undefined]
    ]
    for (const [method, path, body] of ownPaths) {
      expectError(await gw.call(method, path, { key: aUser.endUserKey, body }), 403, "forbidden")
      expectError(await gw.call(method, path, { key: gw.adminKey, body }), 403, "forbidden")
    }

    // Nothing of B changed, and B's keys still work.
    expect(await countRows(b.platformId)).toEqual(before)
    expect((await platformKeyWorks(b.platformId, bKey.body.raw_key)).status).toBe(200)
    expectError(await gw.call("GET", `/v1/platforms/${b.platformId}`, { key: bUser.endUserKey }), 403, "forbidden")
    const bRead = await gw.call("GET", `${keysPath(b.platformId)}/${bKey.body.id}`, { key: b.platformKey })
    expect(bRead.body).toMatchObject({ name: "b-secret", is_active: true })
    // A's own end-user key is untouched too.
    const aEuRead = await gw.call("GET", `${keysPath(a.platformId)}/${aUser.body.api_key.id}`, { key: a.platformKey })
    expect(aEuRead.body).toMatchObject({ is_active: true, name: aUser.body.api_key.name })
  })

  it("malformed platform ids are 404", async () => {
    const { platformKey } = await createPlatform(gw)
    for (const pid of ["not-a-uuid", UNKNOWN_ID]) {
      expectError(await gw.call("GET", keysPath(pid), { key: platformKey }), 404, "not_found")
      expectError(await gw.call("POST", keysPath(pid), { key: platformKey, body: {} }), 404, "not_found")
    }
  })

  it("revocation reaches a second gateway instance that had the key cached", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const peer = await gw.startPeer()
    await waitForListeners(gw.db.pool, 2)
    try {
      const created = await gw.call("POST", keysPath(platformId), { key: platformKey, body: { name: "shared" } })
      const raw = created.body.raw_key as string
      expect((await peer.call("GET", `/v1/platforms/${platformId}`, { key: raw })).status).toBe(200) // cached on the peer
      const revoked = await gw.call("PATCH", `${keysPath(platformId)}/${created.body.id}`, { key: platformKey, body: { is_active: false } })
      expect(revoked.status).toBe(200)
      let status = 200
      const deadline = Date.now() + 2_000
      while (status !== 401 && Date.now() < deadline) {
        status = (await peer.call("GET", `/v1/platforms/${platformId}`, { key: raw })).status
        if (status !== 401) await sleep(50)
      }
      expect(status).toBe(401)
    } finally {
      await peer.close()
    }
  })
})

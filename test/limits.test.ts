// Request limits: JSON nesting depth (64 levels of arrays/objects, checked before parsing),
// the 10 MiB body cap, and per-user rate limits that extra keys of the same user cannot bypass.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let platform: { platformId: string; platformKey: string }
beforeAll(async () => {
  gw = await startGateway()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  await admin("/v1/admin/models", {
    slug: "mock-echo",
    providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }]
  })
  platform = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platform.platformId}/provider-keys/mock`, { key: platform.platformKey, body: { api_key: "mock-key" } })
  await admin(`/v1/admin/platforms/${platform.platformId}/platform-wallet/topup`, { amount_usd: 10 })
})
afterAll(async () => {
  await gw?.close()
})

const usersNamed = async (externalId: string) =>
  (await gw.db.pool.query("SELECT count(*)::int AS n FROM end_users WHERE external_id = $1", [externalId])).rows[0].n as number

/** An end-user create body whose JSON nests `depth` levels: the outer object, metadata, then arrays. */
const nestedBody = (externalId: string, depth: number, inner = "") =>
  `{"external_id":"${externalId}","metadata":{"k":${"[".repeat(depth - 2)}${inner}${"]".repeat(depth - 2)}}}`

const postRaw = (rawBody: string, contentType = "application/json") =>
  gw.call("POST", `/v1/platforms/${platform.platformId}/end-users`, {
    key: platform.platformKey,
    rawBody,
    headers: { "content-type": contentType }
  })

describe("JSON depth limit (64)", () => {
  it("depth 64 is read as JSON (not a 400)", async () => {
    const res = await postRaw(nestedBody("depth-64", 64))
    // 201 today; a 422 from a stricter metadata rule would be fine too, a 400 would not.
    expect([201, 422]).toContain(res.status)
    expect(res.body?.error?.code).not.toBe("invalid_json")
  })

  it("depth 65 and far deeper: 400 invalid_json naming the limit, nothing stored", async () => {
    for (const [name, depth] of [["depth-65", 65], ["depth-100k", 100_000]] as const) {
      const res = await postRaw(nestedBody(name, depth), "application/json; charset=utf-8")
      expect(res.status, name).toBe(400)
      expect(res.body.error.code, name).toBe("invalid_json")
      expect(res.body.error.message, name).toContain("64")
      expect(await usersNamed(name), name).toBe(0)
    }
    // Objects count like arrays.
    const objects = `{"external_id":"depth-obj","metadata":${"{\"a\":".repeat(64)}1${"}".repeat(64)}}`
    const res = await postRaw(objects)
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe("invalid_json")
    expect(await usersNamed("depth-obj")).toBe(0)
  })

  it("brackets inside strings do not count; escapes do not end a string early", async () => {
    // 200 opening brackets inside a string value, behind an escaped quote: still one string.
    const inString = `{"external_id":"brackets","metadata":{"s":"\\"${"[{".repeat(100)}\\\\"}}`
    const ok = await postRaw(inString)
    expect(ok.status).toBe(201)
    expect(ok.body.metadata.s).toBe(`"${"[{".repeat(100)}\\`)
    // A string ending in an escaped backslash closes there: the real nesting after it counts.
    const escapedEnd = `{"external_id":"escaped-end","metadata":{"a":"\\\\","k":${"[".repeat(63)}${"]".repeat(63)}}}`
    const res = await postRaw(escapedEnd)
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe("invalid_json")
  })

  it("the check runs before authentication and routing work (no key: still 400)", async () => {
    const res = await gw.call("POST", `/v1/platforms/${platform.platformId}/end-users`, {
      rawBody: nestedBody("no-key", 65),
      headers: { "content-type": "application/json" }
    })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe("invalid_json")
  })
})

describe("body size", () => {
  it("a body over 10 MiB: 413 payload_too_large", async () => {
    const res = await postRaw(`{"external_id":"big","metadata":{"blob":"${"a".repeat(10 * 1024 * 1024)}"}}`)
    expect(res.status).toBe(413)
    expect(res.body.error.code).toBe("payload_too_large")
  })
})

describe("rate limits belong to the end user, not the key", () => {
  const chat = (key: string) =>
    gw.call("POST", "/v1/chat/completions", {
      key,
      body: { model: "mock-echo", messages: [{ role: "user", content: "hi" }] }
    })

  const newKey = async (endUserId: string) => {
    const res = await gw.call("POST", `/v1/platforms/${platform.platformId}/api-keys`, {
      key: platform.platformKey,
      body: { end_user_id: endUserId }
    })
    expect(res.status).toBe(201)
    return res.body.raw_key as string
  }

  it("three keys of one user share rpm 3; new keys cannot escape it; another user is unaffected", async () => {
    const user = await createEndUser(gw, platform.platformId, platform.platformKey, "limited")
    const other = await createEndUser(gw, platform.platformId, platform.platformKey, "bystander")
    const keys = [user.endUserKey, await newKey(user.endUserId), await newKey(user.endUserId)]
    const put = await gw.call("PUT", `/v1/platforms/${platform.platformId}/end-users/${user.endUserId}/rate-limits`, {
      key: platform.platformKey,
      body: { rpm_limit: 3 }
    })
    expect(put.status).toBe(200)

    for (const [i, key] of keys.entries()) {
      const res = await chat(key)
      expect(res.status, `call ${i + 1}`).toBe(200)
      expect(res.headers.get("x-ratelimit-limit-requests")).toBe("3")
      expect(res.headers.get("x-ratelimit-remaining-requests")).toBe(String(2 - i))
    }
    for (const key of keys) {
      const res = await chat(key)
      expect(res.status).toBe(429)
      expect(res.body.error.code).toBe("rate_limit_exceeded")
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0)
    }
    // Bypass attempts: a fresh key, and the "same external_id again" path that mints one.
    expect((await chat(await newKey(user.endUserId))).status).toBe(429)
    const again = await gw.call("POST", `/v1/platforms/${platform.platformId}/end-users`, {
      key: platform.platformKey,
      body: { external_id: "limited" }
    })
    expect(again.status).toBe(200)
    expect((await chat(again.body.api_key.raw_key)).status).toBe(429)
    // The Responses API draws on the same per-user window.
    const responses = await gw.call("POST", "/v1/responses", { key: keys[1]!, body: { model: "mock-echo", input: "hi" } })
    expect(responses.status).toBe(429)

    // Another user of the same platform is not affected.
    for (let i = 0; i < 4; i++) expect((await chat(other.endUserKey)).status).toBe(200)

    // Exactly three admissions of the limited user reached the ledger.
    const logs = await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE end_user_id = $1", [user.endUserId])
    expect(logs.rows[0].n).toBe(3)
  })
})

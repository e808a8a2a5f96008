// Capability provider credentials from the catalog file: the header reaches the provider it is
// bound to (and only at that URL), its value comes from the environment at call time, a missing
// value releases the run without calling, and no endpoint or stored row ever holds the secret.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { CatalogFile } from "../schemas/Capabilities.js"
import { type FakeCapabilityProvider, startFakeCapabilityProvider } from "./fakes/FakeCapabilityProvider.js"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

const SECRET = "sk-cap-3f9a1c77e2b04d5a"
let gw: Gateway
let fake: FakeCapabilityProvider
let dir: string
const uid: Record<string, string> = {}

const provider = (slug: string, url: string, extra: Record<string, unknown> = {}) => ({
  slug,
  name: `Provider ${slug}`,
  description: `Keyed test provider ${slug}`,
  url,
  call_method: "POST",
  min_price_usd: 0.01,
  median_price_usd: 0.02,
  max_price_usd: 0.03,
  availability: "healthy",
  ...extra
})

beforeAll(async () => {
  fake = await startFakeCapabilityProvider()
  dir = mkdtempSync(join(tmpdir(), "gateway-catalog-"))
  const catalog = join(dir, "capabilities.json")
  writeFileSync(catalog, JSON.stringify({
    capabilities: [{
      capability: { slug: "keyed-search", name: "Keyed search", description: "Search behind an API key" },
      providers: [
        provider("keyed", `${fake.url}/echo-headers?cost=0.015`, { auth: { header: "authorization", env: "KEYED_API_KEY", scheme: "Bearer" } }),
        provider("raw-header", `${fake.url}/echo-headers`, { auth: { header: "x-api-key", env: "KEYED_API_KEY" } }),
        provider("unset", `${fake.url}/echo-headers`, { auth: { header: "authorization", env: "UNSET_API_KEY", scheme: "Bearer" } }),
        provider("plain", `${fake.url}/echo-headers`)
      ]
    }]
  }))
  gw = await startGateway({
    env: { GATEWAY_CAPABILITY_CATALOG: catalog, GATEWAY_ALLOW_PRIVATE_URLS: "true", KEYED_API_KEY: SECRET }
  })
  const { platformKey } = await createPlatform(gw)
  const shelf = ok(await gw.call("GET", "/v1/capabilities/keyed-search", { key: platformKey }))
  for (const p of shelf.body.providers) uid[p.slug] = p.uid
}, 60_000)
afterAll(async () => {
  await gw?.close()
  await fake?.close()
  rmSync(dir, { recursive: true, force: true })
})

const tenant = async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
  ok(await gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body: { settings: { capabilities: { enabled: true } } } }))
  const eu = await createEndUser(gw, platformId, platformKey, "user")
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
  return { platformId, platformKey, ...eu }
}

const run = (key: string, slug: string) =>
  gw.call("POST", "/v1/capabilities/run", { key, body: { capability: uid[slug], input: { query: "q" } } })

/** The headers of the fake's last call. */
const lastHeaders = () => fake.calls.at(-1)!.headers

describe("catalog file credentials", () => {
  it("sends the header to its provider (with the scheme, or bare), and the answer cannot echo it back", async () => {
    const t = await tenant()
    const res = ok(await run(t.endUserKey, "keyed"))
    expect(lastHeaders().authorization).toBe(`Bearer ${SECRET}`)
    expect(res.body).toMatchObject({ final_state: "billed", cost_usd: 0.015 })
    // The fake echoes its request headers: the secret is replaced before the answer is kept.
    expect(res.body.result.headers.authorization).toBe("Bearer [redacted]")
    expect(JSON.stringify(res.body)).not.toContain(SECRET)

    ok(await run(t.endUserKey, "raw-header"))
    expect(lastHeaders()["x-api-key"]).toBe(SECRET)
    expect(lastHeaders().authorization).toBeUndefined()
  })

  it("sends nothing to a provider without auth", async () => {
    const t = await tenant()
    ok(await run(t.endUserKey, "plain"))
    expect(lastHeaders().authorization).toBeUndefined()
    expect(JSON.stringify(lastHeaders())).not.toContain(SECRET)
  })

  it("an unset variable: the provider is not called and the run is released, nothing charged", async () => {
    const t = await tenant()
    const calls = fake.calls.length
    const res = ok(await run(t.endUserKey, "unset"))
    expect(fake.calls.length).toBe(calls)
    expect(res.body).toMatchObject({ final_state: "released", ok: false, status: null, cost_usd: 0, charged_end_user: false })
    expect(res.body.result.error).toMatchObject({ type: "credential_missing", message: expect.stringContaining("no credential configured") })
    expect(JSON.stringify(res.body)).not.toContain("UNSET_API_KEY")
  })

  it("an operator upsert that moves the provider's URL moves it away from the credential", async () => {
    const t = await tenant()
    const admin = ok(await gw.call("POST", "/v1/admin/capabilities/providers", {
      key: gw.adminKey,
      body: {
        capability: { slug: "keyed-search", name: "Keyed search", description: "Search behind an API key" },
        providers: [provider("raw-header", `${fake.url}/ok`)]
      }
    }))
    expect(admin.body.providers[0].uid).toBe(uid["raw-header"])
    ok(await run(t.endUserKey, "raw-header"))
    expect(fake.calls.at(-1)!.path).toBe("/ok")
    expect(lastHeaders()["x-api-key"]).toBeUndefined()
  })

  it("the operator API takes no auth field", async () => {
    const res = await gw.call("POST", "/v1/admin/capabilities/providers", {
      key: gw.adminKey,
      body: {
        capability: { slug: "keyed-search", name: "Keyed search" },
        providers: [provider("sneaky", "https://example.com/x", { auth: { header: "authorization", env: "GATEWAY_ENCRYPTION_KEY" } })]
      }
    })
    expect(res.status).toBe(422)
  })

  it("no endpoint and no stored row holds the secret", async () => {
    const t = await tenant()
    ok(await run(t.endUserKey, "keyed"))
    const reads = [
      gw.call("GET", "/v1/capabilities", { key: t.endUserKey }),
      gw.call("GET", "/v1/capabilities/keyed-search", { key: t.endUserKey }),
      gw.call("GET", "/v1/capabilities/keyed-search", { key: t.platformKey }),
      gw.call("POST", "/v1/capabilities/search", { key: t.endUserKey, body: { query: "keyed search" } }),
      gw.call("GET", `/v1/platforms/${t.platformId}/logs`, { key: t.platformKey }),
      gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/transactions`, { key: t.platformKey }),
      gw.call("GET", "/openapi.json")
    ]
    for (const res of await Promise.all(reads)) {
      expect(res.status).toBe(200)
      expect(JSON.stringify(res.body)).not.toContain(SECRET)
    }
    const tables = ["capability_providers", "capability_runs", "inference_logs", "budget_transactions", "capabilities"]
    for (const table of tables) {
      const { rows } = await gw.db.pool.query(`SELECT * FROM ${table}`)
      expect(JSON.stringify(rows)).not.toContain(SECRET)
      expect(JSON.stringify(rows)).not.toContain("KEYED_API_KEY")
    }
  })
})

describe("catalog file shape", () => {
  const decode = Schema.decodeUnknownEither(CatalogFile)
  const file = (p: Record<string, unknown>) => ({ capabilities: [{ capability: { slug: "c", name: "C" }, providers: [provider("p", "https://example.com/x", p)] }] })

  it("accepts auth with a header, an env name and an optional scheme; refuses the rest", () => {
    expect(decode(file({ auth: { header: "authorization", env: "X_KEY", scheme: "Bearer" } }))._tag).toBe("Right")
    expect(decode(file({ auth: { header: "x-api-key", env: "X_KEY" } }))._tag).toBe("Right")
    expect(decode(file({ auth: { header: "content-type", env: "X_KEY" } }))._tag).toBe("Left")
    expect(decode(file({ auth: { header: "bad header", env: "X_KEY" } }))._tag).toBe("Left")
    expect(decode(file({ auth: { header: "authorization", env: "not-a-name" } }))._tag).toBe("Left")
    expect(decode(file({ auth: { header: "authorization", env: "X_KEY", value: "inline secret" } }))._tag).toBe("Left")
  })

  it("refuses mock:// URLs: only demo mode seeds in-process providers", () => {
    expect(decode({ capabilities: [{ capability: { slug: "c", name: "C" }, providers: [provider("p", "mock://demo-search")] }] })._tag).toBe("Left")
  })
})

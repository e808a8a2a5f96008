// Operator catalog (providers, models, GATEWAY_CONFIG), platform provider keys (encrypted,
// hint only), GET /v1/models visibility and owned_by, and the platform wallet.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const configDir = mkdtempSync(join(tmpdir(), "gateway-config-"))
const configFile = join(configDir, "gateway.yaml")
writeFileSync(configFile, `
providers:
  - { slug: fileprov, kind: openai, base_url: "https://llm.example.com/v1" }
models:
  - slug: file-model
    providers:
      - { provider: fileprov, provider_model_id: gpt-x, input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6 }
`)

let gw: Gateway
beforeAll(async () => {
  gw = await startGateway({ env: { GATEWAY_CONFIG: configFile } })
})
afterAll(async () => {
  await gw?.close()
  rmSync(configDir, { recursive: true, force: true })
})

const admin = (method: string, path: string, body?: unknown) => gw.call(method, path, { key: gw.adminKey, body })

describe("catalog", () => {
  it("GATEWAY_CONFIG is applied at start, and again idempotently by a second instance", async () => {
    const models = await admin("GET", "/v1/admin/models")
    expect(models.body.data).toEqual([
      expect.objectContaining({
        slug: "file-model",
        providers: [expect.objectContaining({ provider: "fileprov", provider_model_id: "gpt-x", input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6 })]
      })
    ])
    const peer = await gw.startPeer()
    await peer.close()
    const again = await gw.db.pool.query("SELECT (SELECT count(*) FROM providers)::int AS p, (SELECT count(*) FROM model_providers)::int AS mp")
    expect(again.rows[0]).toEqual({ p: 1, mp: 1 })
  })

  it("upserts providers and models; unknown providers are 422; platform keys are 403", async () => {
    const created = await admin("POST", "/v1/admin/providers", { slug: "p-a", kind: "openai", base_url: "https://a.example/v1" })
    expect(created.status).toBe(200)
    expect(created.body).toMatchObject({ slug: "p-a", kind: "openai" })
    const updated = await admin("POST", "/v1/admin/providers", { slug: "p-a", kind: "anthropic", base_url: "https://a2.example/v1" })
    expect(updated.body).toMatchObject({ id: created.body.id, kind: "anthropic", base_url: "https://a2.example/v1" })
    expect((await admin("POST", "/v1/admin/providers", { slug: "p-b", kind: "bogus", base_url: "https://b" })).status).toBe(422)
    const model = await admin("POST", "/v1/admin/models", {
      slug: "m-1",
      providers: [{ provider: "p-a", provider_model_id: "claude-x", priority: 1, weight: 2 }]
    })
    expect(model.status).toBe(200)
    expect(model.body.providers).toEqual([
      { provider: "p-a", provider_model_id: "claude-x", priority: 1, weight: 2, enabled: true, input_usd_per_mtok: 0, output_usd_per_mtok: 0, cache_read_usd_per_mtok: null, cache_write_usd_per_mtok: null }
    ])
    const unknown = await admin("POST", "/v1/admin/models", { slug: "m-2", providers: [{ provider: "nope", provider_model_id: "x" }] })
    expect(unknown.status).toBe(422)
    expect(unknown.body.error.param).toBe("providers")
    const { platformKey } = await createPlatform(gw)
    expect((await gw.call("POST", "/v1/admin/providers", { key: platformKey, body: { slug: "x", kind: "mock", base_url: "http://x" } })).status).toBe(403)
  })

  it("/v1/models lists only models whose enabled provider has an active key; owned_by = lowest priority", async () => {
    await admin("POST", "/v1/admin/providers", { slug: "cheap", kind: "openai", base_url: "https://cheap.example/v1" })
    await admin("POST", "/v1/admin/providers", { slug: "premium", kind: "anthropic", base_url: "https://premium.example/v1" })
    await admin("POST", "/v1/admin/models", {
      slug: "shared-model",
      providers: [
        { provider: "premium", provider_model_id: "p-model", priority: 0 },
        { provider: "cheap", provider_model_id: "c-model", priority: 5 }
      ]
    })
    await admin("POST", "/v1/admin/models", {
      slug: "disabled-model",
      providers: [{ provider: "cheap", provider_model_id: "d", enabled: false }]
    })
    const { platformId, platformKey } = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "models-user")
    const list = (key: string) => gw.call("GET", "/v1/models", { key })

    expect((await list(platformKey)).body).toEqual({ object: "list", data: [] })

    const put = await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/cheap`, { key: platformKey, body: { api_key: "sk-cheap-secret-1234" } })
    expect(put.status).toBe(200)
    expect(put.body).toMatchObject({ provider: "cheap", key_hint: "1234", is_active: true })
    expect(JSON.stringify(put.body)).not.toContain("secret")
    const stored = await gw.db.pool.query("SELECT key_encrypted FROM platform_provider_keys")
    expect(stored.rows.every((r) => !String(r.key_encrypted).includes("sk-cheap"))).toBe(true)

    const withCheap = await list(eu.endUserKey)
    expect(withCheap.status).toBe(200)
    expect(withCheap.body.data).toEqual([{ id: "shared-model", object: "model", created: expect.any(Number), owned_by: "cheap" }])

    await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/premium`, { key: platformKey, body: { api_key: "sk-prem-9999" } })
    expect((await list(platformKey)).body.data[0].owned_by).toBe("premium")

    expect((await gw.call("GET", `/v1/platforms/${platformId}/provider-keys/premium`, { key: platformKey })).body.key_hint).toBe("9999")
    expect((await gw.call("DELETE", `/v1/platforms/${platformId}/provider-keys/premium`, { key: platformKey })).status).toBe(204)
    expect((await list(platformKey)).body.data[0].owned_by).toBe("cheap")
    expect((await gw.call("GET", `/v1/platforms/${platformId}/provider-keys/premium`, { key: platformKey })).status).toBe(404)
    expect((await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/nope`, { key: platformKey, body: { api_key: "k" } })).status).toBe(404)

    // Another platform sees nothing of this one's keys.
    const other = await createPlatform(gw)
    expect((await list(other.platformKey)).body.data).toEqual([])
    expect((await gw.call("GET", "/v1/models", { key: gw.adminKey })).status).toBe(403)
  })
})

describe("platform wallet", () => {
  it("starts at 0; the operator tops it up exactly; platforms read their own only", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const empty = await gw.call("GET", `/v1/platforms/${platformId}/platform-wallet`, { key: platformKey })
    expect(empty.body.balance_usd).toBe(0)
    await admin("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { amount_usd: 0.1, reason: "a" })
    const topped = await admin("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { amount_usd: 0.2 })
    expect(topped.body.balance_usd).toBe(0.3)
    const rows = await gw.db.pool.query(
      "SELECT balance_after::text FROM platform_wallet_transactions WHERE platform_id = $1 ORDER BY seq",
      [platformId]
    )
    expect(rows.rows.map((r) => r.balance_after)).toEqual(["0.1", "0.3"])
    expect((await admin("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { amount_usd: 0 })).status).toBe(422)
    expect((await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: platformKey, body: { amount_usd: 5 } })).status).toBe(403)
    const other = await createPlatform(gw)
    expect((await gw.call("GET", `/v1/platforms/${platformId}/platform-wallet`, { key: other.platformKey })).status).toBe(404)
  })
})

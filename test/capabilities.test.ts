// Capabilities end to end over real HTTP: seed catalog and operator upsert, policy states and
// filters, full-text search, access and payment refusals, run outcomes against a fake provider,
// holds under concurrency, and recovery of holds left open by a crash. Money is compared exactly.
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeCapabilityProvider, startFakeCapabilityProvider } from "./fakes/FakeCapabilityProvider.js"
import { type ApiResponse, createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let fake: FakeCapabilityProvider
/** Provider slug -> uid of the test capability `test-cap`. */
const uid: Record<string, string> = {}

const provider = (slug: string, path: string, prices: [number, number, number], extra: Record<string, unknown> = {}) => ({
  slug,
  name: `Provider ${slug}`,
  description: `Test provider ${slug}`,
  url: `${fake.url}${path}`,
  call_method: "POST",
  protocol: "http",
  min_price_usd: prices[0],
  median_price_usd: prices[1],
  max_price_usd: prices[2],
  rating: 4,
  availability: "healthy",
  input_example: { q: "x" },
  input_schema: { type: "object" },
  ...extra
})

const testCatalog = () => ({
  capability: { slug: "test-cap", name: "Test capability", description: "Zebra quokka testing", domains: ["testing"], minted_by: "classifier" },
  providers: [
    provider("cheap", "/ok", [0.05, 0.1, 0.2], { rating: 3.5 }),
    provider("dear", "/ok", [0.5, 1, 2], { rating: 5, availability: "unknown" }),
    provider("unrated", "/ok", [0.01, 0.02, 0.03], { rating: null, availability: "down" }),
    provider("failing", "/fail", [0.1, 0.2, 0.3]),
    provider("slow", "/slow", [0.1, 0.2, 0.3]),
    provider("reporting", "/ok?cost=0.0123", [0.05, 0.1, 0.3]),
    provider("greedy", "/ok?cost=5", [0.05, 0.1, 0.3]),
    provider("okfalse", "/okfalse", [0.05, 0.1, 0.3]),
    provider("parallel", "/delay?ms=300", [0.1, 0.2, 0.3])
  ]
})

beforeAll(async () => {
  fake = await startFakeCapabilityProvider()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_CAPABILITY_TIMEOUT: "500ms" } })
  const res = await gw.call("POST", "/v1/admin/capabilities/providers", { key: gw.adminKey, body: testCatalog() })
  if (res.status !== 200) throw new Error(`catalog upsert: ${res.status} ${JSON.stringify(res.body)}`)
  for (const p of res.body.providers) uid[p.slug] = p.uid
})
afterAll(async () => {
  await gw?.close()
  await fake?.close()
})

interface Tenant {
  platformId: string
  platformKey: string
  endUserId: string
  endUserKey: string
}

const tenant = async (
  options: { wallet?: number; budget?: Record<string, unknown> | null; capabilities?: Record<string, unknown> | null } = {}
): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  if ((options.wallet ?? 10) > 0) {
    await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: options.wallet ?? 10 } })
  }
  const eu = await createEndUser(gw, platformId, platformKey, "user")
  if (options.budget !== null) {
    const b = await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: options.budget ?? { max_usd: 5 } })
    if (b.status !== 201) throw new Error(`budget: ${b.status} ${JSON.stringify(b.body)}`)
  }
  const t = { platformId, platformKey, ...eu }
  if (options.capabilities !== null) await setPolicy(t, options.capabilities ?? { enabled: true })
  return t
}

const setPolicy = async (t: Tenant, capabilities: Record<string, unknown>) => {
  const res = await gw.call("PATCH", `/v1/platforms/${t.platformId}`, { key: t.platformKey, body: { settings: { capabilities } } })
  if (res.status !== 200) throw new Error(`policy: ${res.status} ${JSON.stringify(res.body)}`)
}

const run = (t: Tenant, body: Record<string, unknown>) => gw.call("POST", "/v1/capabilities/run", { key: t.endUserKey, body })
const search = (key: string, body: Record<string, unknown>) => gw.call("POST", "/v1/capabilities/search", { key, body })

const expectError = (res: ApiResponse, status: number, code: string) => {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code })
}

/** Exact money: numeric values as Postgres prints them after normalisation. */
const money = async (t: Tenant) => {
  const q = async (text: string, params: Array<unknown>) => (await gw.db.pool.query(text, params)).rows[0]
  const budget = await q("SELECT trim_scale(used_usd)::text AS used FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [t.endUserId])
  const wallet = await q("SELECT trim_scale(balance_usd)::text AS balance FROM platform_wallets WHERE platform_id = $1", [t.platformId])
  const debits = await q(
    "SELECT count(*)::int AS n, trim_scale(coalesce(sum(amount_usd), 0))::text AS sum FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'",
    [t.platformId]
  )
  const logs = await q(
    "SELECT count(*)::int AS n, trim_scale(coalesce(sum(estimated_cost_usd), 0))::text AS sum FROM inference_logs WHERE platform_id = $1 AND request_type = 'capability'",
    [t.platformId]
  )
  const open = await q("SELECT count(*)::int AS n FROM capability_runs WHERE platform_id = $1 AND state = 'open'", [t.platformId])
  return { used: budget?.used ?? null, wallet: wallet?.balance ?? "0", debits: debits.n, debitSum: debits.sum, logs: logs.n, logSum: logs.sum, open: open.n }
}

describe("catalog", () => {
  it("seeds the catalog file at start and lists the shelf for any platform or end-user key", async () => {
    const t = await tenant({ capabilities: null })
    for (const key of [t.platformKey, t.endUserKey]) {
      const res = await gw.call("GET", "/v1/capabilities", { key })
      expect(res.status).toBe(200)
      expect(res.body.enabled).toBe(false)
      const slugs = res.body.capabilities.map((c: { slug: string }) => c.slug)
      expect(slugs).toEqual(expect.arrayContaining(["web-search", "web-scrape", "company-enrichment", "email-verification", "image-generation", "translation"]))
      const webSearch = res.body.capabilities.find((c: { slug: string }) => c.slug === "web-search")
      expect(webSearch).toEqual({
        slug: "web-search",
        name: "Web search",
        description: expect.any(String),
        provider_count: 4,
        in_policy_count: 4,
        min_price_usd: 0.001,
        minted_by: "seed",
        domains: ["research", "news", "seo"]
      })
    }
    expectError(await gw.call("GET", "/v1/capabilities", { key: gw.adminKey }), 403, "forbidden")
    expectError(await gw.call("GET", "/v1/capabilities"), 401, "missing_api_key")
  })

  it("operator upsert keeps uids stable, is admin-only and validates", async () => {
    const again = await gw.call("POST", "/v1/admin/capabilities/providers", { key: gw.adminKey, body: testCatalog() })
    expect(again.status).toBe(200)
    expect(again.body.capability).toMatchObject({ slug: "test-cap", minted_by: "classifier", is_active: true })
    for (const p of again.body.providers) expect(p.uid).toBe(uid[p.slug])
    expect(uid.cheap).toMatch(/^cap_[0-9a-f-]{36}$/)
    const t = await tenant()
    expectError(await gw.call("POST", "/v1/admin/capabilities/providers", { key: t.platformKey, body: testCatalog() }), 403, "forbidden")
    expectError(await gw.call("POST", "/v1/admin/capabilities/providers", { key: t.endUserKey, body: testCatalog() }), 403, "forbidden")
    const unpriced = { capability: { slug: "x-cap", name: "X" }, providers: [{ slug: "p", url: "https://p.example/x" }] }
    expectError(await gw.call("POST", "/v1/admin/capabilities/providers", { key: gw.adminKey, body: unpriced }), 422, "validation_error")
    const unordered = { capability: { slug: "x-cap", name: "X" }, providers: [{ slug: "p", url: "https://p.example/x", min_price_usd: 2, max_price_usd: 1 }] }
    expectError(await gw.call("POST", "/v1/admin/capabilities/providers", { key: gw.adminKey, body: unordered }), 422, "validation_error")
    const badUrl = { capability: { slug: "x-cap", name: "X" }, providers: [{ slug: "p", url: "ftp://p.example", max_price_usd: 1 }] }
    expectError(await gw.call("POST", "/v1/admin/capabilities/providers", { key: gw.adminKey, body: badUrl }), 422, "validation_error")
    // A seed re-run (every start) never overwrites what the operator wrote.
    const seeded = (await gw.call("GET", "/v1/capabilities/web-search", { key: t.platformKey })).body.providers
    const bright = seeded.find((p: { slug: string }) => p.slug === "brightsearch")
    await gw.call("POST", "/v1/admin/capabilities/providers", {
      key: gw.adminKey,
      body: {
        capability: { slug: "web-search", name: "Web search", domains: ["research", "news", "seo"] },
        providers: [{ slug: "brightsearch", url: "https://api.example-search.com/v2/search", min_price_usd: 0.002, median_price_usd: 0.004, max_price_usd: 0.008, rating: 4.6, availability: "healthy" }]
      }
    })
    const peer = await gw.startPeer()
    try {
      const after = (await peer.call("GET", "/v1/capabilities/web-search", { key: t.platformKey })).body.providers
      const brightAfter = after.find((p: { slug: string }) => p.slug === "brightsearch")
      expect(brightAfter.uid).toBe(bright.uid)
      expect(brightAfter.url).toBe("https://api.example-search.com/v2/search")
    } finally {
      await peer.close()
    }
  })
})

describe("policy and provider lists", () => {
  it("computes policy states with denylist > allowlist > ceiling precedence", async () => {
    const t = await tenant({ capabilities: { enabled: true, max_price_usd: 1, denylist: ["cheap"] } })
    const states = async () => {
      const res = await gw.call("GET", "/v1/capabilities/test-cap", { key: t.endUserKey })
      expect(res.status).toBe(200)
      return Object.fromEntries(res.body.providers.map((p: { slug: string; policy_state: string }) => [p.slug, p.policy_state]))
    }
    expect(await states()).toEqual({
      cheap: "denylisted",
      dear: "above_ceiling", // max 2 > ceiling 1
      unrated: "in_policy",
      failing: "in_policy",
      slow: "in_policy",
      reporting: "in_policy",
      greedy: "in_policy",
      okfalse: "in_policy",
      parallel: "in_policy"
    })
    // Allowlist by qualified slug, by uid and (cheap) by slug: the denylist still wins.
    await setPolicy(t, { allowlist: ["test-cap/reporting", uid.failing, "cheap", "dear"] })
    expect(await states()).toMatchObject({
      cheap: "denylisted",
      dear: "above_ceiling",
      reporting: "in_policy",
      failing: "in_policy",
      slow: "not_allowlisted",
      unrated: "not_allowlisted"
    })
    const shelf = await gw.call("GET", "/v1/capabilities", { key: t.platformKey })
    expect(shelf.body.enabled).toBe(true)
    expect(shelf.body.capabilities.find((c: { slug: string }) => c.slug === "test-cap")).toMatchObject({ provider_count: 9, in_policy_count: 2, min_price_usd: 0.01 })
    expect(shelf.body.capabilities.find((c: { slug: string }) => c.slug === "web-search")).toMatchObject({ in_policy_count: 0 })
    // A whole capability by slug; `null` removes the allowlist again.
    await setPolicy(t, { allowlist: null, denylist: ["test-cap"] })
    expect(new Set(Object.values(await states()))).toEqual(new Set(["denylisted"]))
  })

  it("sorts, filters and limits providers; 404 and 422 as documented", async () => {
    const t = await tenant()
    const list = async (query: string) => {
      const res = await gw.call("GET", `/v1/capabilities/test-cap${query}`, { key: t.platformKey })
      expect(res.status).toBe(200)
      return res.body.providers.map((p: { slug: string }) => p.slug)
    }
    const byCost = await list("")
    expect(byCost[0]).toBe("unrated") // median 0.02
    expect(byCost.at(-1)).toBe("dear") // median 1
    expect((await list("?sort=rating"))[0]).toBe("dear") // rating 5
    expect((await list("?sort=rating")).at(-1)).toBe("unrated") // unrated last
    // Equal prices: better rating first, then slug (cheap is rated 3.5, the others 4).
    expect(await list("?max_cost=0.1&sort=cost")).toEqual(["unrated", "greedy", "okfalse", "reporting", "cheap"])
    expect(await list("?min_rating=3.6")).not.toContain("cheap")
    expect(await list("?min_rating=0")).not.toContain("unrated")
    const verified = await list("?verified_only=true")
    expect(verified).not.toContain("dear")
    expect(verified).not.toContain("unrated")
    expect(await list("?limit=2")).toEqual(byCost.slice(0, 2))
    expect((await list("?limit=1000")).length).toBe(9) // clamped to the server cap (100)
    const one = (await gw.call("GET", "/v1/capabilities/test-cap?limit=1", { key: t.endUserKey })).body
    expect(one).toMatchObject({ slug: "test-cap", name: "Test capability", description: "Zebra quokka testing", enabled: true })
    expect(one.providers[0]).toEqual({
      uid: uid.unrated,
      slug: "unrated",
      name: "Provider unrated",
      description: "Test provider unrated",
      url: `${fake.url}/ok`,
      min_price_usd: 0.01,
      median_price_usd: 0.02,
      max_price_usd: 0.03,
      rating: null,
      availability: "down",
      last_synced_at: null,
      policy_state: "in_policy",
      call_method: "POST",
      input_example: { q: "x" },
      input_schema: { type: "object" }
    })
    expectError(await gw.call("GET", "/v1/capabilities/no-such-thing", { key: t.platformKey }), 404, "not_found")
    for (const q of ["sort=price", "limit=0", "limit=1.5", "min_rating=6", "max_cost=-1", "verified_only=maybe", "max_cost=abc"]) {
      expectError(await gw.call("GET", `/v1/capabilities/test-cap?${q}`, { key: t.platformKey }), 422, "validation_error")
    }
    // Inactive capabilities are unknown.
    await gw.call("POST", "/v1/admin/capabilities/providers", {
      key: gw.adminKey,
      body: { capability: { slug: "retired-cap", name: "Retired", is_active: false }, providers: [provider("p", "/ok", [0.1, 0.1, 0.1])] }
    })
    expectError(await gw.call("GET", "/v1/capabilities/retired-cap", { key: t.platformKey }), 404, "not_found")
  })
})

describe("search", () => {
  it("ranks the seed catalog with full-text search and keeps only in-policy, runnable providers", async () => {
    const t = await tenant()
    const top = async (query: string, limit?: number) => {
      const res = await search(t.endUserKey, limit === undefined ? { query } : { query, limit })
      expect(res.status).toBe(200)
      return res.body.candidates as Array<{ uid: string; slug: string; cost_usd: number; protocol: string; rating: number | null; url: string }>
    }
    const email = await top("verify an email address is deliverable")
    expect(email.slice(0, 3).map((c) => c.slug).sort()).toEqual(["bounceguard", "mailcheckr", "verifyhub"])
    expect(email.length).toBeLessThanOrEqual(8)
    expect(email[0]).toEqual({
      uid: expect.stringMatching(/^cap_/),
      slug: expect.any(String),
      name: expect.any(String),
      description: expect.any(String),
      url: expect.any(String),
      cost_usd: expect.any(Number),
      protocol: "http",
      rating: expect.any(Number)
    })
    expect((await top("translate text into German"))[0]!.slug).toMatch(/^(linguabridge|polyglot-pro|quicktrans)$/)
    expect((await top("company firmographics enrichment"))[0]!.slug).toMatch(/^(firmograph|bizlookup|leadlens|opencorp-data)$/)
    const images = await top("generate an image from a prompt", 25)
    expect(images.map((c) => c.slug)).not.toContain("dreamframe") // availability down: not runnable
    const pixel = images.find((c) => c.slug === "pixelforge")!
    expect(pixel.cost_usd).toBe(0.08) // what a run reserves: the max price
    expect(await top("zzzzqqqq nothing matches")).toEqual([])
    // websearch syntax and odd characters never reach Postgres as a syntax error.
    for (const q of ["\"web search\" -news or scrape", "'; DROP TABLE capabilities; --", "& | ! <-> ( ) :*", "the of and"]) {
      expect((await search(t.endUserKey, { query: q })).status).toBe(200)
    }
    expect((await top("web", 1)).length).toBe(1)
    // Policy filtering.
    await setPolicy(t, { denylist: ["mailcheckr"], max_price_usd: 0.006 })
    const filtered = (await top("verify an email address is deliverable", 25)).map((c) => c.slug)
    expect(filtered).toContain("bounceguard") // max 0.005
    expect(filtered).not.toContain("mailcheckr") // denylisted
    expect(filtered).not.toContain("verifyhub") // max 0.01 > 0.006
  })

  it("403 for platform keys, keys without inference scope and disabled platforms; 422 for bad bodies", async () => {
    const t = await tenant()
    expectError(await search(t.platformKey, { query: "web" }), 403, "forbidden")
    expectError(await search(gw.adminKey, { query: "web" }), 403, "forbidden")
    const noScope = await gw.call("POST", `/v1/platforms/${t.platformId}/api-keys`, { key: t.platformKey, body: { end_user_id: t.endUserId, scopes: ["read"] } })
    expect(noScope.status).toBe(201)
    expectError(await search(noScope.body.raw_key, { query: "web" }), 403, "insufficient_scope")
    const off = await tenant({ capabilities: null })
    expectError(await search(off.endUserKey, { query: "web" }), 403, "capabilities_disabled")
    await setPolicy(off, { enabled: false })
    expectError(await search(off.endUserKey, { query: "web" }), 403, "capabilities_disabled")
    for (const body of [{}, { query: "" }, { query: "   " }, { query: "x".repeat(501) }, { query: "web", limit: 0 }, { query: "web", limit: 26 }, { query: "web", extra: 1 }]) {
      expectError(await search(t.endUserKey, body), 422, "validation_error")
    }
    expect((await search(t.endUserKey, { query: "x".repeat(500), limit: 25 })).status).toBe(200)
  })
})

describe("run: refusals", () => {
  it("403 and 404 before anything is held", async () => {
    const t = await tenant()
    const calls = fake.calls.length
    expectError(await gw.call("POST", "/v1/capabilities/run", { key: t.platformKey, body: { capability: uid.cheap } }), 403, "forbidden")
    const off = await tenant({ capabilities: { enabled: false } })
    expectError(await run(off, { capability: uid.cheap, input: null }), 403, "capabilities_disabled")
    expectError(await run(t, { capability: "cap_nope" }), 404, "not_found")
    expectError(await run(t, { capability: `cap_${randomUUID()}` }), 404, "not_found")
    expectError(await run(t, { capability: "test-cap" }), 404, "not_found")
    for (const body of [{}, { capability: "" }, { capability: "x".repeat(201) }, { capability: uid.cheap, max_pay: 0 }, { capability: uid.cheap, input: [1] }, { capability: uid.cheap, extra: true }]) {
      expectError(await run(t, body), 422, "validation_error")
    }
    expect(fake.calls.length).toBe(calls)
    expect(await money(t)).toMatchObject({ used: "0", wallet: "10", debits: 0, logs: 0, open: 0 })
  })

  it("402 with the policy and balance codes; the provider is never called", async () => {
    const t = await tenant({ capabilities: { enabled: true, max_price_usd: 1, denylist: ["cheap"], allowlist: ["cheap", "dear", "failing"] } })
    const calls = fake.calls.length
    expectError(await run(t, { capability: uid.cheap }), 402, "capability_denylisted")
    expectError(await run(t, { capability: uid.slow }), 402, "capability_not_allowlisted")
    expectError(await run(t, { capability: uid.dear }), 402, "capability_above_ceiling")
    // max_pay only tightens: below the typical (median) price is refused.
    expectError(await run(t, { capability: uid.failing, max_pay: 0.1 }), 402, "capability_above_ceiling")

    const none = await tenant({ budget: null })
    expectError(await run(none, { capability: uid.cheap }), 402, "no_budget")
    const deleted = await tenant()
    await gw.call("DELETE", `/v1/platforms/${deleted.platformId}/end-users/${deleted.endUserId}/budget`, { key: deleted.platformKey })
    expectError(await run(deleted, { capability: uid.cheap }), 402, "no_budget")
    const suspended = await tenant()
    await gw.call("PATCH", `/v1/platforms/${suspended.platformId}/end-users/${suspended.endUserId}/budget`, { key: suspended.platformKey, body: { is_suspended: true } })
    expectError(await run(suspended, { capability: uid.cheap }), 402, "budget_suspended")
    const small = await tenant({ budget: { max_usd: 0.15 } })
    expectError(await run(small, { capability: uid.cheap }), 402, "budget_exhausted") // hold 0.20 > 0.15
    const poor = await tenant({ wallet: 0 })
    expectError(await run(poor, { capability: uid.cheap }), 402, "wallet_insufficient")
    expect(fake.calls.length).toBe(calls)
    for (const x of [t, none, deleted, suspended, small, poor]) expect((await money(x)).open).toBe(0)
  })
})

describe("run: outcomes", () => {
  it("success: billed at the median price, one debit row, wallet debit and a capability log row", async () => {
    const t = await tenant()
    const before = fake.calls.length
    const res = await run(t, { capability: uid.cheap, input: { q: "hello", n: 2 } })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      capability: "test-cap",
      ok: true,
      final_state: "billed",
      status: 200,
      cost_usd: 0.1,
      charged_end_user: true,
      run_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      result: { ok: true, echo: { q: "hello", n: 2 }, method: "POST", query: {} }
    })
    const call = fake.calls[before]!
    expect(call.headers["x-gateway-run-id"]).toBe(res.body.run_id)
    expect(call.headers["content-type"]).toBe("application/json")
    expect(await money(t)).toEqual({ used: "0.1", wallet: "9.9", debits: 1, debitSum: "0.1", logs: 1, logSum: "0.1", open: 0 })
    const debit = (await gw.db.pool.query("SELECT reason, metadata, actor_type FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'", [t.platformId])).rows[0]
    expect(debit).toEqual({
      reason: "capability_run",
      metadata: { run_id: res.body.run_id, capability: "test-cap", provider: uid.cheap, provider_slug: "cheap" },
      actor_type: "end_user_key"
    })
    const row = (await gw.db.pool.query(
      "SELECT state, trim_scale(hold_usd)::text AS hold, trim_scale(cost_usd)::text AS cost, status, ok, settled_at IS NOT NULL AS settled FROM capability_runs WHERE id = $1 AND platform_id = $2",
      [res.body.run_id, t.platformId]
    )).rows[0]
    expect(row).toEqual({ state: "billed", hold: "0.2", cost: "0.1", status: 200, ok: true, settled: true })
    const log = await gw.call("GET", `/v1/platforms/${t.platformId}/logs`, { key: t.platformKey })
    expect(log.body.data[0]).toMatchObject({ request_type: "capability", estimated_cost_usd: "0.1", status: "success", billing_status: "billed", end_user_id: t.endUserId })
  })

  it("uses the provider's x-cost-usd, capped at the hold; max_pay caps the hold; ok:false is still billed", async () => {
    const t = await tenant()
    const reported = await run(t, { capability: uid.reporting, input: {} })
    expect(reported.body).toMatchObject({ final_state: "billed", ok: true, cost_usd: 0.0123, charged_end_user: true })
    const greedy = await run(t, { capability: uid.greedy, input: {} })
    expect(greedy.body).toMatchObject({ final_state: "billed", cost_usd: 0.3 }) // reported 5, hold 0.3
    const capped = await run(t, { capability: uid.greedy, input: {}, max_pay: 0.15 })
    expect(capped.body).toMatchObject({ final_state: "billed", cost_usd: 0.15 })
    const hold = (await gw.db.pool.query("SELECT trim_scale(hold_usd)::text AS h FROM capability_runs WHERE id = $1", [capped.body.run_id])).rows[0].h
    expect(hold).toBe("0.15")
    const okFalse = await run(t, { capability: uid.okfalse, input: {} })
    expect(okFalse.body).toMatchObject({ final_state: "billed", ok: false, status: 200, cost_usd: 0.1, charged_end_user: true, result: { ok: false, reason: "no results" } })
    expect(await money(t)).toEqual({ used: "0.5623", wallet: "9.4377", debits: 4, debitSum: "0.5623", logs: 4, logSum: "0.5623", open: 0 })
  })

  it("provider 500: failed and charged by default; released and free with charge_failed_calls false", async () => {
    const t = await tenant()
    const charged = await run(t, { capability: uid.failing, input: { q: 1 } })
    expect(charged.status).toBe(200)
    expect(charged.body).toEqual({
      capability: "test-cap",
      ok: false,
      final_state: "failed",
      status: 500,
      cost_usd: 0.2,
      charged_end_user: true,
      run_id: expect.any(String),
      result: { error: "boom" }
    })
    expect(await money(t)).toEqual({ used: "0.2", wallet: "9.8", debits: 1, debitSum: "0.2", logs: 1, logSum: "0.2", open: 0 })

    await setPolicy(t, { charge_failed_calls: false })
    const free = await run(t, { capability: uid.failing, input: { q: 1 } })
    expect(free.body).toMatchObject({ ok: false, final_state: "released", status: 500, cost_usd: 0, charged_end_user: false, result: { error: "boom" } })
    expect(await money(t)).toEqual({ used: "0.2", wallet: "9.8", debits: 1, debitSum: "0.2", logs: 2, logSum: "0.2", open: 0 })
    const state = (await gw.db.pool.query("SELECT state FROM capability_runs WHERE id = $1", [free.body.run_id])).rows[0].state
    expect(state).toBe("released")
  })

  it("timeout: released, nothing charged, the hold is gone", async () => {
    const t = await tenant()
    const started = Date.now()
    const res = await run(t, { capability: uid.slow, input: {} })
    expect(Date.now() - started).toBeLessThan(3000)
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({
      capability: "test-cap",
      ok: false,
      final_state: "released",
      status: null,
      cost_usd: 0,
      charged_end_user: false,
      result: { error: { type: "timeout" } }
    })
    expect(await money(t)).toMatchObject({ used: "0", wallet: "10", debits: 0, open: 0 })
  })

  it("SSRF guard: without GATEWAY_ALLOW_PRIVATE_URLS a loopback provider is refused, released and free", async () => {
    const t = await tenant()
    const calls = fake.calls.length
    const peer = await gw.startPeer({ GATEWAY_ALLOW_PRIVATE_URLS: "false" })
    try {
      const res = await peer.call("POST", "/v1/capabilities/run", { key: t.endUserKey, body: { capability: uid.cheap, input: {} } })
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ final_state: "released", ok: false, status: null, cost_usd: 0, charged_end_user: false, result: { error: { type: "url_refused" } } })
    } finally {
      await peer.close()
    }
    expect(fake.calls.length).toBe(calls)
    expect(await money(t)).toMatchObject({ used: "0", wallet: "10", debits: 0, open: 0 })
  })

  it("GET providers get the input as query parameters", async () => {
    await gw.call("POST", "/v1/admin/capabilities/providers", {
      key: gw.adminKey,
      body: { capability: { slug: "get-cap", name: "GET capability" }, providers: [provider("getter", "/ok", [0.01, 0.01, 0.01], { call_method: "GET" })] }
    })
    const t = await tenant()
    const shelf = await gw.call("GET", "/v1/capabilities/get-cap", { key: t.endUserKey })
    const res = await run(t, { capability: shelf.body.providers[0].uid, input: { email: "a@b.example", deep: { x: 1 } } })
    expect(res.body).toMatchObject({ final_state: "billed", result: { method: "GET", echo: null, query: { email: "a@b.example", deep: "{\"x\":1}" } } })
  })
})

describe("holds", () => {
  it("parallel runs never hold more than the budget: 1.00 / 0.30 -> 3 run, 7 refused", async () => {
    const t = await tenant({ budget: { max_usd: 1 } })
    const results = await Promise.all(Array.from({ length: 10 }, () => run(t, { capability: uid.parallel, input: {} })))
    const ok = results.filter((r) => r.status === 200)
    const refused = results.filter((r) => r.status === 402)
    expect(ok.length).toBe(3)
    expect(refused.length).toBe(7)
    for (const r of refused) expect(r.body.error.code).toBe("budget_exhausted")
    for (const r of ok) expect(r.body).toMatchObject({ final_state: "billed", cost_usd: 0.2 })
    expect(await money(t)).toEqual({ used: "0.6", wallet: "9.4", debits: 3, debitSum: "0.6", logs: 3, logSum: "0.6", open: 0 })
    const within = (await gw.db.pool.query("SELECT used_usd <= max_usd AS ok FROM budgets WHERE end_user_id = $1", [t.endUserId])).rows[0].ok
    expect(within).toBe(true)
  })

  it("parallel runs of a platform's end users never hold more than its wallet: 1.00 / 0.30 -> 3 run, 7 refused", async () => {
    const t = await tenant({ wallet: 1 })
    const others = await Promise.all(Array.from({ length: 9 }, async (_, i) => {
      const eu = await createEndUser(gw, t.platformId, t.platformKey, `user-${i}`)
      const b = await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${eu.endUserId}/budget`, { key: t.platformKey, body: { max_usd: 5 } })
      if (b.status !== 201) throw new Error(`budget: ${b.status} ${JSON.stringify(b.body)}`)
      return { ...t, ...eu }
    }))
    const results = await Promise.all([t, ...others].map((user) => run(user, { capability: uid.parallel, input: {} })))
    const ok = results.filter((r) => r.status === 200)
    const refused = results.filter((r) => r.status === 402)
    expect(ok.length).toBe(3)
    expect(refused.length).toBe(7)
    for (const r of refused) expect(r.body.error.code).toBe("wallet_insufficient")
    const wallet = (await gw.db.pool.query("SELECT trim_scale(balance_usd)::text AS balance FROM platform_wallets WHERE platform_id = $1", [t.platformId])).rows[0].balance
    expect(wallet).toBe("0.4")
  })

  it("an open hold counts against the budget; recovery releases one left by a crash", async () => {
    const t = await tenant({ budget: { max_usd: 1 } })
    const budgetId = (await gw.db.pool.query("SELECT id FROM budgets WHERE end_user_id = $1", [t.endUserId])).rows[0].id
    // A run that crashed between hold and settlement: open, 0.90 held, expiring in the future.
    const crashed = (await gw.db.pool.query(
      `INSERT INTO capability_runs (platform_id, end_user_id, budget_id, capability_id, provider_id, hold_usd, state, expires_at)
       SELECT $1, $2, $3, p.capability_id, p.id, 0.9, 'open', now() + interval '1 hour' FROM capability_providers p WHERE p.id = $4
       RETURNING id`,
      [t.platformId, t.endUserId, budgetId, uid.cheap!.slice(4)]
    )).rows[0].id
    expectError(await run(t, { capability: uid.cheap, input: {} }), 402, "budget_exhausted") // 1 - 0.9 < 0.2
    // Its deadline passes (timeout + grace); a restarted instance recovers it at start.
    await gw.db.pool.query("UPDATE capability_runs SET expires_at = now() - interval '1 second' WHERE id = $1", [crashed])
    // The sweep's former name (plain milliseconds), still read when GATEWAY_CAPABILITY_SWEEP is unset.
    const peer = await gw.startPeer({ GATEWAY_CAPABILITY_SWEEP_MS: "100" })
    try {
      const row = (await gw.db.pool.query("SELECT state, trim_scale(cost_usd)::text AS cost, error_message FROM capability_runs WHERE id = $1", [crashed])).rows[0]
      expect(row).toMatchObject({ state: "released", cost: "0", error_message: expect.stringContaining("recovery") })
      // The periodic sweep finds later ones too.
      const second = (await gw.db.pool.query(
        `INSERT INTO capability_runs (platform_id, end_user_id, budget_id, capability_id, provider_id, hold_usd, state, expires_at)
         SELECT platform_id, end_user_id, budget_id, capability_id, provider_id, 0.5, 'open', now() - interval '1 second'
         FROM capability_runs WHERE id = $1 RETURNING id`,
        [crashed]
      )).rows[0].id
      await expect.poll(async () => (await gw.db.pool.query("SELECT state FROM capability_runs WHERE id = $1", [second])).rows[0].state, { timeout: 5000 }).toBe("released")
      // Remaining is whole again: the full budget can be held and spent.
      const res = await peer.call("POST", "/v1/capabilities/run", { key: t.endUserKey, body: { capability: uid.cheap, input: {} } })
      expect(res.body).toMatchObject({ final_state: "billed", cost_usd: 0.1 })
      expect(await money(t)).toMatchObject({ used: "0.1", wallet: "9.9", debits: 1, open: 0 })
    } finally {
      await peer.close()
    }
  })
})

// The platform setting budget_enforcement: "reserve" holds each call's maximum cost on the budget
// and the wallet at admission, so concurrent calls on two instances never spend past max_usd;
// "optimistic" (the default) admits while remaining_usd > 0. Reservations show in the budget
// read, settlement or a failed call releases them, and an expired one holds nothing.
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { type ApiResponse, createEndUser, createPlatform, type Gateway, ok, type Peer, startGateway } from "./support/Gateway.js"

let gw: Gateway
let peer: Peer
let upstream: FakeUpstream

// 1 USD per million prompt tokens, 1000 per million completion tokens (0.001 USD a token): with
// max_tokens 100 a call may cost 0.1 USD plus its prompt. The fake reports 1 prompt token and 100
// completion tokens, so a served call costs 0.100001 USD, within what it reserved.
const MAX_TOKENS = 100
const CALL_COST = 0.100001
/** Covers one call's maximum cost, not two. */
const BUDGET_USD = 0.15

beforeAll(async () => {
  upstream = await startFakeOpenAi()
  gw = await startGateway()
  peer = await gw.startPeer()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "fake", kind: "openai", base_url: upstream.url })
  await admin("/v1/admin/models", {
    slug: "fake-model",
    providers: [{ provider: "fake", provider_model_id: "fake-1", input_usd_per_mtok: 1, output_usd_per_mtok: 1000 }]
  })
})

afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

interface Tenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
}

const tenant = async (enforcement: "optimistic" | "reserve" | undefined): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  if (enforcement !== undefined) {
    ok(await gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body: { settings: { budget_enforcement: enforcement } } }))
  }
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/fake`, { key: platformKey, body: { api_key: "fake-key" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  const eu = await createEndUser(gw, platformId, platformKey, "user")
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: BUDGET_USD } }), 201)
  return { platformId, platformKey, endUserId: eu.endUserId, endUserKey: eu.endUserKey }
}

const chat = (via: Gateway | Peer, key: string, stream = false) =>
  via.call("POST", "/v1/chat/completions", {
    key,
    body: { model: "fake-model", messages: [{ role: "user", content: "Say hi" }], max_tokens: MAX_TOKENS, stream }
  })

/** The budget as GET shows it, once both instances wrote what they queued (each read waits for its own). */
const budgetOf = async (t: Tenant) => {
  const path = `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`
  ok(await peer.call("GET", path, { key: t.platformKey }))
  return ok(await gw.call("GET", path, { key: t.platformKey })).body
}

/** 20 calls at once, split over the two instances. */
const burst = (t: Tenant) => Promise.all(Array.from({ length: 20 }, (_, i) => chat(i % 2 === 0 ? gw : peer, t.endUserKey)))

const refusedAsExhausted = (responses: ReadonlyArray<ApiResponse>) =>
  responses.filter((r) => r.status === 402).every((r) => r.body.error.code === "budget_exhausted")

describe("budget_enforcement", () => {
  it("reserve: 20 concurrent calls on two instances against a budget for one call never spend past max_usd", async () => {
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS }, responseDelayMs: 200 })
    const t = await tenant("reserve")
    const responses = await burst(t)
    expect(responses.every((r) => r.status === 200 || r.status === 402)).toBe(true)
    expect(refusedAsExhausted(responses)).toBe(true)
    // After one call the budget no longer covers a maximum cost: exactly one is served.
    expect(responses.filter((r) => r.status === 200)).toHaveLength(1)
    const budget = await budgetOf(t)
    expect(budget.used_usd).toBeCloseTo(CALL_COST, 9)
    expect(budget.used_usd).toBeLessThanOrEqual(budget.max_usd)
    expect(budget.reserved_usd).toBe(0)
    const left = await gw.db.pool.query("SELECT count(*)::int AS n FROM budget_reservations WHERE platform_id = $1", [t.platformId])
    expect(left.rows[0].n).toBe(0)
  })

  it("optimistic (default): the same calls are refused only once the budget is spent, so it can overspend", async () => {
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS }, responseDelayMs: 200 })
    const t = await tenant(undefined)
    const responses = await burst(t)
    expect(responses.every((r) => r.status === 200 || r.status === 402)).toBe(true)
    expect(refusedAsExhausted(responses)).toBe(true)
    const served = responses.filter((r) => r.status === 200).length
    expect(served).toBeGreaterThanOrEqual(1)
    const budget = await budgetOf(t)
    // Every served call is billed in full, past max_usd if need be; a refusal means the budget was spent.
    expect(budget.used_usd).toBeCloseTo(served * CALL_COST, 9)
    if (served < responses.length) expect(budget.used_usd).toBeGreaterThanOrEqual(BUDGET_USD)
    expect(budget.reserved_usd).toBe(0)
  })

  it("reserve: a call in flight shows its reservation in reserved_usd and remaining_usd; settled, it shows the cost", async () => {
    const t = await tenant("reserve")
    upstream.reset()
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS }, responseDelayMs: 3_000 })
    const pending = chat(peer, t.endUserKey)
    // The upstream has the request: admission, and so the reservation, came first.
    await upstream.waitFor((f) => f.requests.length >= 1)
    const during = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey })).body
    expect(during.reserved_usd).toBeGreaterThanOrEqual(0.1)
    expect(during.used_usd).toBe(0)
    expect(during.remaining_usd).toBeCloseTo(BUDGET_USD - during.reserved_usd, 9)
    const wallet = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/wallet`, { key: t.platformKey })).body
    expect(wallet.usd_ledger.reserved_usd).toBe(during.reserved_usd)
    expect(wallet.usd_ledger.remaining_usd).toBe(during.remaining_usd)
    ok(await pending)
    const after = await budgetOf(t)
    const walletAfter = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/wallet`, { key: t.platformKey })).body
    expect(walletAfter.usd_ledger.reserved_usd).toBe(0)
    expect(after.reserved_usd).toBe(0)
    expect(after.used_usd).toBeCloseTo(CALL_COST, 9)
    expect(after.remaining_usd).toBeCloseTo(BUDGET_USD - CALL_COST, 9)
  })

  it("reserve: a call whose upstream fails releases its reservation; a platform-key call and a stream settle theirs", async () => {
    const t = await tenant("reserve")
    upstream.setBehavior({ fail: { status: 500, times: 100 } })
    const failed = await chat(gw, t.endUserKey)
    expect(failed.status).toBe(502)
    const budget = await budgetOf(t)
    expect(budget.reserved_usd).toBe(0)
    expect(budget.remaining_usd).toBeCloseTo(BUDGET_USD - budget.used_usd, 9)
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS } })
    ok(await chat(peer, t.platformKey))
    const streamed = ok(await chat(peer, t.endUserKey, true))
    expect(streamed.body).toContain("[DONE]")
    expect((await budgetOf(t)).used_usd).toBeCloseTo(CALL_COST, 9)
    const left = await gw.db.pool.query("SELECT count(*)::int AS n FROM budget_reservations WHERE platform_id = $1", [t.platformId])
    expect(left.rows[0].n).toBe(0)
  })

  it("reserve: an expired reservation (a crashed call's) holds nothing; a live one counts", async () => {
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS } })
    const t = await tenant("reserve")
    const { rows: [row] } = await gw.db.pool.query("SELECT id FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [t.endUserId])
    // A crashed call's reservation: past its expiry, 100 USD.
    await gw.db.pool.query(
      "INSERT INTO budget_reservations (id, platform_id, budget_id, amount_usd, expires_at) VALUES ($1, $2, $3, 100, now() - interval '1 minute')",
      [randomUUID(), t.platformId, row.id]
    )
    const expired = await budgetOf(t)
    expect(expired.reserved_usd).toBe(0)
    expect(expired.remaining_usd).toBe(BUDGET_USD)

    // A live reservation leaves 0.05 USD, less than a call's maximum cost.
    const live = randomUUID()
    await gw.db.pool.query(
      "INSERT INTO budget_reservations (id, platform_id, budget_id, amount_usd, expires_at) VALUES ($1, $2, $3, 0.1, now() + interval '1 hour')",
      [live, t.platformId, row.id]
    )
    const held = await budgetOf(t)
    expect(held.reserved_usd).toBe(0.1)
    expect(held.remaining_usd).toBeCloseTo(BUDGET_USD - 0.1, 9)
    const refused = await chat(peer, t.endUserKey)
    expect(refused.status).toBe(402)
    expect(refused.body.error.code).toBe("budget_exhausted")

    // Gone (its call settled), the expired one alone holds nothing: the call is served.
    await gw.db.pool.query("DELETE FROM budget_reservations WHERE id = $1", [live])
    ok(await chat(gw, t.endUserKey))
    expect((await budgetOf(t)).used_usd).toBeCloseTo(CALL_COST, 9)
  })

  it("reserve: a call that names no completion cap is sent with the one its reservation priced; optimistic sends it as asked", async () => {
    upstream.setBehavior({ usage: { prompt: 1, completion: 1 } })
    const sent = async (t: Tenant) => {
      upstream.requests.length = 0
      ok(await gw.call("POST", "/v1/chat/completions", { key: t.endUserKey, body: { model: "fake-model", messages: [{ role: "user", content: "Say hi" }] } }))
      const body = upstream.requests.at(-1)?.body
      return { max_tokens: body?.max_tokens, max_completion_tokens: body?.max_completion_tokens }
    }
    // The budget must cover the default cap's price (4096 tokens at 0.001 USD).
    const reserved = await tenant("reserve")
    ok(await gw.call("PATCH", `/v1/platforms/${reserved.platformId}/end-users/${reserved.endUserId}/budget`, { key: reserved.platformKey, body: { max_usd: 5 } }))
    expect(await sent(reserved)).toEqual({ max_tokens: undefined, max_completion_tokens: 4096 })
    // A cap the client names is sent as named.
    upstream.requests.length = 0
    ok(await chat(gw, reserved.endUserKey))
    expect(upstream.requests.at(-1)?.body).toMatchObject({ max_tokens: MAX_TOKENS })
    expect(upstream.requests.at(-1)?.body.max_completion_tokens).toBeUndefined()

    const optimistic = await tenant(undefined)
    expect(await sent(optimistic)).toEqual({ max_tokens: undefined, max_completion_tokens: undefined })
  })

  it("reserve: tool definitions and images count in the reserved prompt, so calls that carry them cannot fit in less", async () => {
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS } })
    const t = await tenant("reserve")
    // About 60,000 tokens of tool definitions: 0.06 USD of prompt on top of the 0.1 of completion,
    // more than the 0.15 budget holds. Without them the same call fits.
    const tools = [{ type: "function", function: { name: "lookup", description: " word".repeat(60_000) } }]
    const body = (extra: Record<string, unknown>) => ({
      model: "fake-model",
      messages: [{ role: "user", content: "Say hi" }],
      max_tokens: MAX_TOKENS,
      ...extra
    })
    const withTools = await gw.call("POST", "/v1/chat/completions", { key: t.endUserKey, body: body({ tools }) })
    expect(withTools.status).toBe(402)
    expect(withTools.body.error.code).toBe("budget_exhausted")
    // 40 images at 1,600 tokens each: 0.064 USD of prompt, too much as well.
    const image = { type: "image_url", image_url: { url: "https://example.com/cat.png" } }
    const withImages = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: body({ messages: [{ role: "user", content: [{ type: "text", text: "Describe" }, ...Array.from({ length: 40 }, () => image)] }] })
    })
    expect(withImages.status).toBe(402)
    expect(withImages.body.error.code).toBe("budget_exhausted")
    ok(await gw.call("POST", "/v1/chat/completions", { key: t.endUserKey, body: body({}) }))
  })

  it("reserve: an open capability run's hold counts against the wallet, not only reservations", async () => {
    upstream.setBehavior({ usage: { prompt: 1, completion: MAX_TOKENS } })
    const t = await tenant("reserve")
    // A paid run in flight holds 9.95 of the wallet's 10 USD (on no budget: the wallet alone),
    // leaving 0.05, less than a call's maximum cost.
    const { rows: [run] } = await gw.db.pool.query(
      `INSERT INTO capability_runs (platform_id, end_user_id, capability_id, provider_id, hold_usd, state, expires_at)
       VALUES ($1, $2, $3, $4, 9.95, 'open', now() + interval '1 hour') RETURNING id`,
      [t.platformId, t.endUserId, randomUUID(), randomUUID()]
    )
    const refused = await chat(peer, t.endUserKey)
    expect(refused.status).toBe(402)
    expect(refused.body.error.code).toBe("wallet_insufficient")
    const reserved = await gw.db.pool.query("SELECT count(*)::int AS n FROM budget_reservations WHERE platform_id = $1", [t.platformId])
    expect(reserved.rows[0].n).toBe(0)

    // The run settles (released): the wallet is free again and the call is served.
    await gw.db.pool.query("UPDATE capability_runs SET state = 'released', settled_at = now() WHERE id = $1", [run.id])
    ok(await chat(gw, t.endUserKey))
    expect((await budgetOf(t)).used_usd).toBeCloseTo(CALL_COST, 9)
  })
})

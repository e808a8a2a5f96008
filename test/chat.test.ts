// Chat completions end to end with the official openai SDK against the mock provider: answers,
// streams, the five pre-flight checks in order (nothing reaches the upstream or moves money on
// a refusal), and exact settlement across ledger, wallet and logs under concurrency.
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { chatFronts, createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
/** A real HTTP upstream for the refusal tests: it must never see a request. */
let upstream: FakeUpstream
describe.each(chatFronts)("served by the %s", (_front, frontRoute) => {
  beforeAll(async () => {
    upstream = await startFakeOpenAi()
    gw = await startGateway({ env: { GATEWAY_CHAT_FRONT_ROUTE: frontRoute } })
    const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
    await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
    await admin("/v1/admin/providers", { slug: "fake", kind: "openai", base_url: upstream.url })
    await admin("/v1/admin/models", {
      slug: "fake-model",
      providers: [{ provider: "fake", provider_model_id: "fake-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }]
    })
    // 1 USD per million prompt tokens, 2 USD per million completion tokens.
    await admin("/v1/admin/models", {
      slug: "mock-echo",
      providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }]
    })
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  interface Tenant {
    platformId: string
    platformKey: string
    endUserId: string
    endUserKey: string
    client: OpenAI
  }

  const tenant = async (options: { wallet?: number; budget?: Record<string, unknown> | null } = {}): Promise<Tenant> => {
    const { platformId, platformKey } = await createPlatform(gw)
    await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "mock-key" } })
    await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/fake`, { key: platformKey, body: { api_key: "fake-key" } })
    if ((options.wallet ?? 10) > 0) {
      await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: options.wallet ?? 10 } })
    }
    const eu = await createEndUser(gw, platformId, platformKey, "user")
    if (options.budget !== null) {
      await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, {
        key: platformKey,
        body: options.budget ?? { max_usd: 5 }
      })
    }
    return { platformId, platformKey, ...eu, client: new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }) }
  }

  const money = async (t: Tenant) => {
    const budget = await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [t.endUserId])
    const wallet = await gw.db.pool.query("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1", [t.platformId])
    const logs = await gw.db.pool.query(
      "SELECT count(*)::int AS n, coalesce(sum(estimated_cost_usd), 0)::text AS cost FROM inference_logs WHERE platform_id = $1",
      [t.platformId]
    )
    const debits = await gw.db.pool.query(
      "SELECT count(*)::int AS n, coalesce(sum(amount_usd), 0)::text AS sum FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'",
      [t.platformId]
    )
    return {
      used: budget.rows[0]?.used_usd ?? null,
      wallet: wallet.rows[0]?.balance_usd ?? "0",
      logs: logs.rows[0].n as number,
      logCost: logs.rows[0].cost as string,
      debits: debits.rows[0].n as number,
      debitSum: debits.rows[0].sum as string
    }
  }

  describe("chat completions with the openai SDK", () => {
    it("non-stream: answer, usage, settlement in ledger, wallet and log", async () => {
      const t = await tenant()
      const res = await t.client.chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: "hello there" }] })
      expect(res.object).toBe("chat.completion")
      expect(res.model).toBe("mock-echo")
      expect(res.choices[0]!.message).toMatchObject({ role: "assistant", content: "echo: hello there" })
      expect(res.choices[0]!.finish_reason).toBe("stop")
      // mock usage: ceil(11 chars / 4) = 3 prompt, 3 words completion
      expect(res.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 })
      // cost = 3 * 1/1e6 + 3 * 2/1e6 = 0.000009
      const m = await money(t)
      expect(m).toMatchObject({ used: "0.000009", wallet: "9.999991", logs: 1, logCost: "0.000009", debits: 1, debitSum: "0.000009" })
      const log = await gw.call("GET", `/v1/platforms/${t.platformId}/logs?model=mock-echo&end_user_id=${t.endUserId}`, { key: t.platformKey })
      expect(log.status).toBe(200)
      expect(log.body).toMatchObject({ total: 1, page: 1, limit: 20 })
      expect(log.body.data[0]).toMatchObject({ request_type: "chat.completion", estimated_cost_usd: "0.000009", end_user_id: t.endUserId })
      expect((await gw.call("GET", `/v1/platforms/${t.platformId}/logs?model=other`, { key: t.platformKey })).body.total).toBe(0)
      const row = (await gw.db.pool.query("SELECT * FROM inference_logs WHERE platform_id = $1", [t.platformId])).rows[0]
      expect(row).toMatchObject({
        request_type: "chat.completion",
        end_user_id: t.endUserId,
        provider_model_id: "echo-1",
        prompt_tokens: 3,
        completion_tokens: 3,
        total_tokens: 6,
        status: "success",
        token_count_method: "reported",
        billing_status: "billed"
      })
    })

    it("stream with include_usage: role chunk first, content, usage chunk, then [DONE]", async () => {
      const t = await tenant()
      const stream = await t.client.chat.completions.create({
        model: "mock-echo",
        messages: [{ role: "user", content: "one two three" }],
        stream: true,
        stream_options: { include_usage: true }
      })
      const chunks = []
      for await (const chunk of stream) chunks.push(chunk)
      expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant")
      expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("echo: one two three")
      const last = chunks.at(-1)!
      expect(last.choices).toEqual([])
      expect(last.usage).toEqual({ prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 })
      const raw = await fetch(`${gw.baseUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${t.endUserKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "mock-echo", messages: [{ role: "user", content: "x" }], stream: true })
      })
      expect(raw.headers.get("content-type")).toContain("text/event-stream")
      const text = await raw.text()
      expect(text.trim().endsWith("data: [DONE]")).toBe(true)
      expect(text).not.toContain("\"usage\":{") // no usage chunk unless asked
      await expect.poll(async () => (await money(t)).logs).toBe(2)
      expect((await money(t)).debits).toBe(2)
    })

    it("a message that quotes a special token's spelling is counted as text, not refused", async () => {
      const t = await tenant()
      const res = await t.client.chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: "what is <|endoftext|>?" }] })
      expect(res.choices[0]!.message.content).toBe("echo: what is <|endoftext|>?")
      expect((await money(t)).logs).toBe(1)
    })

    it("JSON mode passes through", async () => {
      const t = await tenant()
      const res = await t.client.chat.completions.create({
        model: "mock-echo",
        messages: [{ role: "user", content: "hi" }],
        response_format: { type: "json_object" }
      })
      expect(JSON.parse(res.choices[0]!.message.content!)).toEqual({ echo: "hi" })
    })
  })

  describe("pre-flight checks", () => {
    // Refusals go to the real HTTP fake, which must see no request at all.
    const ask = (t: Tenant, extra: Record<string, unknown> = {}) =>
      gw.call("POST", "/v1/chat/completions", {
        key: t.endUserKey,
        body: { model: "fake-model", messages: [{ role: "user", content: "hi" }], ...extra }
      })
    const upstreamUntouched = () => expect(upstream.requests).toHaveLength(0)

    it("1. unknown model: 404 model_not_found; no inference scope: 403 insufficient_scope", async () => {
      upstream.reset()
      const t = await tenant()
      const res = await ask(t, { model: "no-such-model" })
      expect(res.status).toBe(404)
      expect(res.body.error).toMatchObject({ code: "model_not_found", param: "model" })
      const key = await gw.call("POST", `/v1/platforms/${t.platformId}/api-keys`, { key: t.platformKey, body: { end_user_id: t.endUserId, scopes: [] } })
      const noScope = await gw.call("POST", "/v1/chat/completions", {
        key: key.body.raw_key,
        body: { model: "mock-echo", messages: [{ role: "user", content: "hi" }] }
      })
      expect(noScope.status).toBe(403)
      expect(noScope.body.error.code).toBe("insufficient_scope")
      expect(await money(t)).toMatchObject({ logs: 0, debits: 0, wallet: "10" })
      upstreamUntouched()
    })

    it("2. rate limit: 429 with retry-after, before suspension (order)", async () => {
      upstream.reset()
      const t = await tenant()
      await gw.call("PATCH", `/v1/platforms/${t.platformId}`, { key: t.platformKey, body: { settings: { default_rate_limits: { rpm_limit: 1 } } } })
      const first = await ask(t)
      expect(first.status).toBe(200)
      expect(first.headers.get("x-ratelimit-limit-requests")).toBe("1")
      expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("0")
      await gw.call("PATCH", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey, body: { is_suspended: true } })
      const second = await ask(t)
      expect(second.status).toBe(429)
      expect(second.body.error.code).toBe("rate_limit_exceeded")
      expect(Number(second.headers.get("retry-after"))).toBeGreaterThan(0)
      expect(upstream.requests).toHaveLength(1) // only the admitted call
      expect((await money(t)).logs).toBe(1)
    })

    it("3. suspended budget: 402 budget_suspended", async () => {
      upstream.reset()
      const t = await tenant()
      await gw.call("PATCH", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey, body: { is_suspended: true } })
      const res = await ask(t)
      expect(res.status).toBe(402)
      expect(res.body.error).toMatchObject({ code: "budget_suspended", type: "insufficient_quota" })
      expect(await money(t)).toMatchObject({ logs: 0, debits: 0, used: "0", wallet: "10" })
      upstreamUntouched()
    })

    it("4. exhausted budget: 402 budget_exhausted", async () => {
      upstream.reset()
      const t = await tenant({ budget: { max_usd: 1 } })
      await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/debit`, { key: t.platformKey, body: { amount_usd: 1 } })
      const res = await ask(t)
      expect(res.status).toBe(402)
      expect(res.body.error).toMatchObject({ code: "budget_exhausted", param: "usd_ledger" })
      expect(await money(t)).toMatchObject({ logs: 0, debits: 1, used: "1", wallet: "10" })
      upstreamUntouched()
    })

    it("4b. an open capability hold counts against remaining_usd", async () => {
      upstream.reset()
      const t = await tenant({ budget: { max_usd: 1 } })
      const { rows: [budget] } = await gw.db.pool.query("SELECT id FROM budgets WHERE end_user_id = $1", [t.endUserId])
      const { rows: [provider] } = await gw.db.pool.query("SELECT id, capability_id FROM capability_providers LIMIT 1")
      await gw.db.pool.query(
        `INSERT INTO capability_runs (platform_id, end_user_id, budget_id, capability_id, provider_id, hold_usd, expires_at)
         VALUES ($1, $2, $3, $4, $5, 1, now() + interval '1 hour')`,
        [t.platformId, t.endUserId, budget.id, provider.capability_id, provider.id]
      )
      const res = await ask(t)
      expect(res.status).toBe(402)
      expect(res.body.error).toMatchObject({ code: "budget_exhausted", param: "usd_ledger" })
      upstreamUntouched()
    })

    it("5. platform wallet below the estimate: 402 wallet_insufficient", async () => {
      upstream.reset()
      const t = await tenant({ wallet: 0 })
      const res = await ask(t, { max_tokens: 100 })
      expect(res.status).toBe(402)
      expect(res.body.error.code).toBe("wallet_insufficient")
      expect(await money(t)).toMatchObject({ logs: 0, debits: 0 })
      upstreamUntouched()
    })

    it("mcp tools are 422 unsupported_tool_type; bad parameters are 422 naming the field", async () => {
      upstream.reset()
      const t = await tenant()
      const mcp = await ask(t, { tools: [{ type: "mcp", server_label: "github", server_url: "http://x/mcp/github" }] })
      expect(mcp.status).toBe(422)
      expect(mcp.body.error).toMatchObject({ code: "unsupported_tool_type", param: "tools.0.type" })
      for (const [extra, param] of [
        [{ temperature: 2.5 }, "temperature"],
        [{ frequency_penalty: -3 }, "frequency_penalty"],
        [{ stop: ["a", "b", "c", "d", "e"] }, "stop"],
        [{ messages: [] }, "messages"]
      ] as const) {
        const res = await ask(t, extra)
        expect(res.status, JSON.stringify(extra)).toBe(422)
        expect(String(res.body.error.param)).toContain(param)
      }
      expect(await money(t)).toMatchObject({ logs: 0, debits: 0 })
      upstreamUntouched()
    })

    it("a platform key may call inference: wallet only, no budget row", async () => {
      const t = await tenant()
      const client = new OpenAI({ apiKey: t.platformKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
      const res = await client.chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: "hey" }] })
      expect(res.choices[0]!.message.content).toBe("echo: hey")
      // "hey": 1 prompt token, "echo: hey": 2 completion tokens -> 1 * 1e-6 + 2 * 2e-6
      expect(await money(t)).toMatchObject({ logs: 1, debits: 0, used: "0", wallet: "9.999995" })
    })
  })

  describe("concurrency", () => {
    it("100 concurrent calls: ledger debits = log costs = wallet change, exactly", async () => {
      const t = await tenant({ budget: { max_usd: 100 } })
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) =>
        t.client.chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: `message number ${i}` }] })
      ))
      expect(results).toHaveLength(100)
      const m = await money(t)
      expect(m.logs).toBe(100)
      expect(m.debits).toBe(100)
      expect(m.debitSum).toBe(m.logCost)
      expect(m.used).toBe(m.logCost)
      const wallet = await gw.db.pool.query(
        "SELECT (10 - balance_usd) = $2::numeric AS exact FROM platform_wallets WHERE platform_id = $1",
        [t.platformId, m.logCost]
      )
      expect(wallet.rows[0].exact).toBe(true)
    })
  })
})

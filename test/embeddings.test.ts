// Embeddings end to end with the official openai SDK: POST /v1/embeddings on the mock and on an
// `openai` upstream (the fake), float and base64 encodings, dimensions, the five checks (a refusal
// reaches no upstream and bills nothing), failover, exact settlement (budget debit row, wallet,
// log row of type `embedding`), and models that serve chat or embeddings only.
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockVector } from "../layers/pipeline/upstream/MockEmbeddings.js"
import { FAKE_EMBEDDING_DIMENSIONS, FAKE_EMBEDDING_TOKENS_PER_INPUT, fakeVector, type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
let primary: FakeUpstream
let secondary: FakeUpstream

/** A decimal string without trailing zeros, so equal amounts compare equal whatever their scale. */
const dec = (value: string) => (value.includes(".") ? value.replace(/0+$/, "").replace(/\.$/, "") : value)

/** The float32 values of a vector: what the gateway answers for `float` and encodes for `base64`. */
const f32 = (vector: ReadonlyArray<number>) => vector.map(Math.fround)

beforeAll(async () => {
  primary = await startFakeOpenAi()
  secondary = await startFakeOpenAi()
  gw = await startGateway()
  const admin = async (path: string, body: unknown) => ok(await gw.call("POST", path, { key: gw.adminKey, body }))
  await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  await admin("/v1/admin/providers", { slug: "primary", kind: "openai", base_url: primary.url })
  await admin("/v1/admin/providers", { slug: "secondary", kind: "openai", base_url: secondary.url })
  // 0.02 USD per million input tokens (OpenAI's text-embedding-3-small price).
  await admin("/v1/admin/models", {
    slug: "mock-embed",
    serves: ["embeddings"],
    providers: [{ provider: "mock", provider_model_id: "mock-embed-1", input_usd_per_mtok: "0.02" }]
  })
  // 0.13 USD per million input tokens; the secondary provider is the failover.
  await admin("/v1/admin/models", {
    slug: "fake-embed",
    serves: ["embeddings"],
    providers: [
      { provider: "primary", provider_model_id: "text-embedding-a", priority: 0, input_usd_per_mtok: "0.13" },
      { provider: "secondary", provider_model_id: "text-embedding-b", priority: 1, input_usd_per_mtok: "0.13" }
    ]
  })
  await admin("/v1/admin/models", {
    slug: "mock-chat",
    providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }]
  })
})

afterAll(async () => {
  await gw?.close()
  await primary?.close()
  await secondary?.close()
})

interface Tenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly client: OpenAI
}

const tenant = async (budgetUsd = 5): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  for (const provider of ["mock", "primary", "secondary"]) {
    ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/${provider}`, { key: platformKey, body: { api_key: `${provider}-key` } }))
  }
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  const eu = await createEndUser(gw, platformId, platformKey, "user")
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: budgetUsd } }), 201)
  return { platformId, platformKey, ...eu, client: new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }) }
}

/** The budget as GET shows it (reserved_usd: what calls in flight hold). */
const budgetOf = async (t: Tenant) =>
  ok(await gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey })).body

const money = async (t: Tenant) => {
  const budget = await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [t.endUserId])
  const wallet = await gw.db.pool.query("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1", [t.platformId])
  const logs = await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1", [t.platformId])
  return { used: dec(budget.rows[0].used_usd), wallet: dec(wallet.rows[0].balance_usd), logs: logs.rows[0].n as number }
}

const embed = (t: Tenant, body: unknown) => gw.call("POST", "/v1/embeddings", { key: t.endUserKey, body })

describe("embeddings on the mock", () => {
  it("single input with the SDK's default (base64, decoded by the SDK): the mock's vector, usage, exact settlement", async () => {
    const t = await tenant()
    const text = "hello embeddings"
    const sent: Array<any> = []
    const recording = new OpenAI({
      apiKey: t.endUserKey,
      baseURL: `${gw.baseUrl}/v1`,
      maxRetries: 0,
      fetch: (url, init) => {
        sent.push(JSON.parse(String(init?.body)))
        return fetch(url, init)
      }
    })
    const res = await recording.embeddings.create({ model: "mock-embed", input: text })
    expect(sent).toEqual([{ model: "mock-embed", input: text, encoding_format: "base64" }])
    expect(res.object).toBe("list")
    expect(res.model).toBe("mock-embed")
    expect(res.data).toHaveLength(1)
    expect(res.data[0]).toMatchObject({ object: "embedding", index: 0 })
    expect(res.data[0]!.embedding).toEqual(f32(mockVector(text, 16)))
    // mock usage: ceil(16 chars / 4) = 4 tokens
    expect(res.usage).toEqual({ prompt_tokens: 4, total_tokens: 4 })

    // cost = 4 x 0.02 / 1e6 = 0.00000008 USD, on the budget, the wallet and the log row alike
    expect(await money(t)).toEqual({ used: "0.00000008", wallet: "9.99999992", logs: 1 })
    const ledger = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/transactions`, { key: t.platformKey }))
    const debits = ledger.body.data.filter((row: any) => row.type === "debit")
    expect(debits).toHaveLength(1)
    expect(debits[0]).toMatchObject({ amount_usd: 0.00000008, actor_type: "end_user_key" })
    expect(debits[0].metadata).toMatchObject({ model: "mock-embed", prompt_tokens: 4, completion_tokens: 0 })
    const row = (await gw.db.pool.query("SELECT *, estimated_cost_usd::text AS cost FROM inference_logs WHERE platform_id = $1", [t.platformId])).rows[0]
    expect(row).toMatchObject({
      request_type: "embedding",
      end_user_id: t.endUserId,
      model_slug: "mock-embed",
      provider_model_id: "mock-embed-1",
      prompt_tokens: 4,
      completion_tokens: 0,
      total_tokens: 4,
      status: "success",
      token_count_method: "reported"
    })
    expect(dec(row.cost)).toBe("0.00000008")
    const logs = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/logs?model=mock-embed`, { key: t.platformKey }))
    expect(logs.body.data[0]).toMatchObject({ request_type: "embedding", estimated_cost_usd: "0.00000008" })
  })

  it("array input, float and base64: one vector per text in order, both encodings the same float32 values", async () => {
    const t = await tenant()
    const input = ["first text", "a second, longer text", "first text"]
    const float = await t.client.embeddings.create({ model: "mock-embed", input, encoding_format: "float" })
    expect(float.data.map((d) => d.index)).toEqual([0, 1, 2])
    expect(float.data.map((d) => d.embedding)).toEqual(input.map((text) => f32(mockVector(text, 16))))
    // The same text gives the same vector wherever it is in the batch.
    expect(float.data[2]!.embedding).toEqual(float.data[0]!.embedding)
    // ceil(10/4) + ceil(21/4) + ceil(10/4) = 3 + 6 + 3
    expect(float.usage).toEqual({ prompt_tokens: 12, total_tokens: 12 })

    // The SDK asks for base64 by default and decodes it.
    const decoded = await t.client.embeddings.create({ model: "mock-embed", input })
    expect(decoded.data.map((d) => d.embedding)).toEqual(float.data.map((d) => d.embedding))

    // base64 on the wire: the little-endian float32 bytes.
    const raw = ok(await embed(t, { model: "mock-embed", input, encoding_format: "base64" }))
    const littleEndian = (vector: ReadonlyArray<number>) => Buffer.from(new Float32Array(vector).buffer).toString("base64")
    expect(raw.body.data.map((d: any) => d.embedding)).toEqual(input.map((text) => littleEndian(mockVector(text, 16))))
    const bytes = Buffer.from(raw.body.data[1].embedding, "base64")
    expect(Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4))).toEqual(float.data[1]!.embedding)

    // Three calls, each billed on its 12 tokens: 36 x 0.02 / 1e6.
    expect(await money(t)).toEqual({ used: "0.00000072", wallet: "9.99999928", logs: 3 })
  })

  it("dimensions: vectors of the asked length, unit length; out of range is 422 naming the field", async () => {
    const t = await tenant()
    for (const dimensions of [8, 40]) {
      const res = await t.client.embeddings.create({ model: "mock-embed", input: "shorter", dimensions, encoding_format: "float" })
      expect(res.data[0]!.embedding).toHaveLength(dimensions)
      expect(res.data[0]!.embedding).toEqual(f32(mockVector("shorter", dimensions)))
      expect(Math.hypot(...res.data[0]!.embedding)).toBeCloseTo(1, 5)
    }
    const bad = await embed(t, { model: "mock-embed", input: "x", dimensions: 0 })
    expect(bad.status).toBe(422)
    expect(bad.body.error).toMatchObject({ param: "dimensions", type: "invalid_request_error" })
    expect(await money(t)).toMatchObject({ logs: 2 })
  })

  it("input the gateway does not serve: 422 naming the field, nothing billed", async () => {
    const t = await tenant()
    const cases: ReadonlyArray<readonly [unknown, string]> = [
      [[1, 2, 3], "input.0"],
      [[[1, 2], [3]], "input.0"],
      [["fine", [7]], "input.1"],
      [[], "input"],
      ["", "input"],
      [["ok", ""], "input.1"]
    ]
    for (const [input, param] of cases) {
      const res = await embed(t, { model: "mock-embed", input })
      expect(res.status, JSON.stringify(input)).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param })
    }
    const tokens = await embed(t, { model: "mock-embed", input: [[1, 2]] })
    expect(tokens.body.error.message).toContain("token ids are not supported")
    const missing = await embed(t, { model: "mock-embed" })
    expect(missing.status).toBe(422)
    expect(missing.body.error.param).toBe("input")
    expect(await money(t)).toEqual({ used: "0", wallet: "10", logs: 0 })
  })
})

describe("models declare what they serve", () => {
  it("a chat model asked for embeddings, and an embeddings model asked for chat: 422 model_not_supported, nothing billed", async () => {
    const t = await tenant()
    const chatModel = await embed(t, { model: "mock-chat", input: "hi" })
    expect(chatModel.status).toBe(422)
    expect(chatModel.body.error).toMatchObject({ code: "model_not_supported", param: "model" })
    expect(chatModel.body.error.message).toContain("not embeddings")
    await expect(t.client.embeddings.create({ model: "mock-chat", input: "hi" })).rejects.toMatchObject({ status: 422 })

    const embeddingModel = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: { model: "mock-embed", messages: [{ role: "user", content: "hi" }] }
    })
    expect(embeddingModel.status).toBe(422)
    expect(embeddingModel.body.error).toMatchObject({ code: "model_not_supported", param: "model" })
    const responses = await gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "mock-embed", input: "hi" } })
    expect(responses.status).toBe(422)
    expect(responses.body.error.code).toBe("model_not_supported")
    expect(await money(t)).toEqual({ used: "0", wallet: "10", logs: 0 })
  })

  it("the admin API takes and shows `serves`; chat by default; an embeddings model needs providers that can embed", async () => {
    const listed = ok(await gw.call("GET", "/v1/admin/models", { key: gw.adminKey })).body.data
    expect(listed.find((m: any) => m.slug === "mock-embed").serves).toEqual(["embeddings"])
    expect(listed.find((m: any) => m.slug === "mock-chat").serves).toEqual(["chat"])

    ok(await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "claude", kind: "anthropic", base_url: "http://anthropic.invalid" } }))
    const refused = await gw.call("POST", "/v1/admin/models", {
      key: gw.adminKey,
      body: { slug: "claude-embed", serves: ["embeddings"], providers: [{ provider: "claude", provider_model_id: "c-1" }] }
    })
    expect(refused.status).toBe(422)
    expect(refused.body.error).toMatchObject({ param: "providers" })
    expect(refused.body.error.message).toContain("cannot serve embeddings")

    const both = ok(await gw.call("POST", "/v1/admin/models", {
      key: gw.adminKey,
      body: { slug: "both-ways", serves: ["chat", "embeddings"], providers: [{ provider: "mock", provider_model_id: "both-1" }] }
    }))
    expect(both.body.serves).toEqual(["chat", "embeddings"])
    for (const serves of [[], ["images"], ["chat", "chat"]]) {
      const bad = await gw.call("POST", "/v1/admin/models", {
        key: gw.adminKey,
        body: { slug: "bad-serves", serves, providers: [{ provider: "mock", provider_model_id: "x" }] }
      })
      expect(bad.status, JSON.stringify(serves)).toBe(422)
      expect(bad.body.error.param).toMatch(/^serves/)
    }
  })
})

describe("embeddings on an openai upstream", () => {
  it("passes model, texts, float encoding and dimensions through; bills the reported input tokens", async () => {
    primary.reset()
    secondary.reset()
    const t = await tenant()
    const res = await t.client.embeddings.create({ model: "fake-embed", input: ["alpha", "beta"], dimensions: 6, user: "u-1" })
    expect(res.data.map((d) => d.embedding)).toEqual(["alpha", "beta"].map((text) => f32(fakeVector(text, 6))))
    expect(res.usage).toEqual({ prompt_tokens: 2 * FAKE_EMBEDDING_TOKENS_PER_INPUT, total_tokens: 2 * FAKE_EMBEDDING_TOKENS_PER_INPUT })
    expect(primary.requests).toHaveLength(1)
    expect(primary.requests[0]!.path).toBe("/v1/embeddings")
    expect(primary.requests[0]!.headers.authorization).toBe("Bearer primary-key")
    expect(primary.requests[0]!.body).toEqual({ model: "text-embedding-a", input: ["alpha", "beta"], encoding_format: "float", dimensions: 6, user: "u-1" })
    expect(secondary.requests).toHaveLength(0)
    // 20 x 0.13 / 1e6 = 0.0000026
    expect(await money(t)).toEqual({ used: "0.0000026", wallet: "9.9999974", logs: 1 })
  })

  it("fails over to the next provider on a 503; the log row names the one that served", async () => {
    primary.reset()
    secondary.reset()
    primary.setBehavior({ fail: { status: 503, times: 1 } })
    const t = await tenant()
    const res = await t.client.embeddings.create({ model: "fake-embed", input: "failover", encoding_format: "float" })
    expect(res.data[0]!.embedding).toEqual(f32(fakeVector("failover", FAKE_EMBEDDING_DIMENSIONS)))
    expect(primary.requests).toHaveLength(1)
    expect(secondary.requests).toHaveLength(1)
    expect(secondary.requests[0]!.body.model).toBe("text-embedding-b")
    const row = (await gw.db.pool.query("SELECT provider_model_id, request_type FROM inference_logs WHERE platform_id = $1", [t.platformId])).rows
    expect(row).toEqual([{ provider_model_id: "text-embedding-b", request_type: "embedding" }])
    expect(await money(t)).toEqual({ used: "0.0000013", wallet: "9.9999987", logs: 1 })
  })

  it("every provider failing: 502, nothing billed", async () => {
    primary.reset()
    secondary.reset()
    primary.setBehavior({ fail: { status: 500, times: 1 } })
    secondary.setBehavior({ fail: { status: 500, times: 1 } })
    const t = await tenant()
    const res = await embed(t, { model: "fake-embed", input: "nobody home" })
    expect(res.status).toBe(502)
    expect(res.body.error.code).toBe("upstream_error")
    expect(await money(t)).toEqual({ used: "0", wallet: "10", logs: 0 })
  })

  it("an exhausted budget: 402 budget_exhausted, no upstream call, nothing billed", async () => {
    primary.reset()
    secondary.reset()
    const t = await tenant(1)
    ok(await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/debit`, { key: t.platformKey, body: { amount_usd: 1 } }))
    const res = await embed(t, { model: "fake-embed", input: "too late" })
    expect(res.status).toBe(402)
    expect(res.body.error).toMatchObject({ code: "budget_exhausted", param: "usd_ledger", type: "insufficient_quota" })
    await expect(t.client.embeddings.create({ model: "fake-embed", input: "too late" })).rejects.toMatchObject({ status: 402, code: "budget_exhausted" })
    expect(primary.requests).toHaveLength(0)
    expect(secondary.requests).toHaveLength(0)
    expect(await money(t)).toEqual({ used: "1", wallet: "10", logs: 0 })
  })

  it("reserve mode: the call reserves its input's cost, settles exactly and releases; a failed call releases too", async () => {
    primary.reset()
    secondary.reset()
    const t = await tenant()
    ok(await gw.call("PATCH", `/v1/platforms/${t.platformId}`, { key: t.platformKey, body: { settings: { budget_enforcement: "reserve" } } }))
    const served = ok(await embed(t, { model: "fake-embed", input: ["one", "two", "three"] }))
    expect(served.body.usage).toEqual({ prompt_tokens: 30, total_tokens: 30 })
    // 30 x 0.13 / 1e6
    expect(await money(t)).toEqual({ used: "0.0000039", wallet: "9.9999961", logs: 1 })
    expect((await budgetOf(t)).reserved_usd).toBe(0)

    primary.setBehavior({ fail: { status: 500, times: 1 } })
    secondary.setBehavior({ fail: { status: 500, times: 1 } })
    expect((await embed(t, { model: "fake-embed", input: "lost" })).status).toBe(502)
    expect((await budgetOf(t)).reserved_usd).toBe(0)
    expect(await money(t)).toEqual({ used: "0.0000039", wallet: "9.9999961", logs: 1 })
  })
})

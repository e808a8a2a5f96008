// Text Postgres cannot store (NUL, unpaired UTF-16 surrogates) over real HTTP: refused with a
// 422 naming the field before anything is billed or called; an upstream answer holding it is
// stored with U+FFFD and answered; a response that cannot be stored after its call was billed is
// still answered (never a 500 that says nothing was applied).
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
let oa: FakeUpstream

interface Tenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly client: OpenAI
}

beforeAll(async () => {
  oa = await startFakeOpenAi()
  gw = await startGateway()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  ok(await admin("/v1/admin/providers", { slug: "oa", kind: "openai", base_url: oa.url }))
  for (const slug of ["gpt-fake", "gpt-nostore"]) {
    ok(await admin("/v1/admin/models", { slug, providers: [{ provider: "oa", provider_model_id: "gpt-x", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] }))
  }
  // Responses of this model cannot be stored: the way to make storing fail after billing.
  await gw.db.pool.query("ALTER TABLE responses ADD CONSTRAINT test_no_store CHECK (model <> 'gpt-nostore')")
})
afterAll(async () => {
  await gw?.close()
  await oa?.close()
})

const tenant = async (name: string): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/oa`, { key: platformKey, body: { api_key: "k-oa" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  const eu = await createEndUser(gw, platformId, platformKey, name)
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
  return { platformId, platformKey, ...eu, client: new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }) }
}

/** What a billed call leaves behind: log rows, the budget's use, the wallet's balance, stored responses. */
const footprint = async (t: Tenant) => {
  const one = async (sql: string) => (await gw.db.pool.query(sql, [t.platformId])).rows
  return {
    logs: await one("SELECT billing_status, request_type FROM inference_logs WHERE platform_id = $1"),
    used: (await one("SELECT used_usd::text FROM budgets WHERE platform_id = $1"))[0]?.used_usd,
    wallet: (await one("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1"))[0]?.balance_usd,
    responses: await one("SELECT id, output_items FROM responses WHERE platform_id = $1")
  }
}

describe("refused before anything is billed", () => {
  it("/v1/responses: a lone surrogate or NUL anywhere in the request is 422 naming the field; no call, no log, no debit", async () => {
    const t = await tenant("refused")
    const before = await footprint(t)
    const calls = oa.requests.length
    const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
      [{ input: "hi \ud800 there" }, "input"],
      [{ input: "nul \u0000" }, "input"],
      [{ input: [{ role: "user", content: [{ type: "input_text", text: "lone low \udc00" }] }] }, "input.0.content.0.text"],
      [{ input: "ok", instructions: "\u0000" }, "instructions"],
      [{ input: "ok", thread_id: "t\ud83d" }, "thread_id"],
      [{ input: "ok", tools: [{ type: "function", name: "f", parameters: { type: "object", properties: { "k\u0000": {} } } }] }, "tools.0.parameters.properties.k\ufffd"]
    ]
    for (const [fields, param] of cases) {
      const res = await gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "gpt-fake", ...fields } })
      expect(res.status, JSON.stringify(fields)).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param })
    }
    expect(oa.requests.length).toBe(calls)
    expect(await footprint(t)).toEqual(before)
  })

  it("a surrogate pair is ordinary text: accepted, stored and billed once", async () => {
    const t = await tenant("pair")
    oa.setBehavior({})
    const res = await t.client.responses.create({ model: "gpt-fake", input: "smile \ud83d\ude00" })
    expect(res.status).toBe("completed")
    const after = await footprint(t)
    expect(after.logs).toEqual([{ billing_status: "billed", request_type: "response" }])
    expect(after.responses).toHaveLength(1)
  })

  it("chat completions refuse them too (the same messages as /v1/responses; no upstream can take them)", async () => {
    const t = await tenant("chat")
    const calls = oa.requests.length
    const res = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: { model: "gpt-fake", messages: [{ role: "system", content: "ok" }, { role: "user", content: "x\ud800" }] }
    })
    expect(res.status).toBe(422)
    expect(res.body.error).toMatchObject({ code: "validation_error", param: "messages.1.content" })
    expect(oa.requests.length).toBe(calls)
    expect((await footprint(t)).logs).toEqual([])
  })

  it("every stored field, not only inference: names, metadata keys, reasons", async () => {
    const t = await tenant("fields")
    const cases: ReadonlyArray<readonly [string, string, unknown, string]> = [
      ["POST", `/v1/platforms/${t.platformId}/end-users`, { external_id: "e\ud800" }, "external_id"],
      ["PATCH", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}`, { metadata: { nested: { "\udfff": 1 } } }, "metadata.nested.\ufffd"],
      ["POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/topup`, { amount_usd: 1, reason: "r\u0000" }, "reason"],
      ["POST", `/v1/platforms/${t.platformId}/api-keys`, { name: "\ud800" }, "name"]
    ]
    const before = await footprint(t)
    for (const [method, path, body, param] of cases) {
      const res = await gw.call(method, path, { key: t.platformKey, body })
      expect(res.status, path).toBe(422)
      expect(res.body.error).toMatchObject({ code: "validation_error", param })
    }
    expect(await footprint(t)).toEqual(before)
  })
})

describe("upstream output that Postgres cannot store", () => {
  it("non-stream: stored and answered with U+FFFD, billed once, 200", async () => {
    const t = await tenant("upstream-bad")
    oa.setBehavior({ reply: "bad \ud800 and \u0000 text" })
    try {
      const res = await t.client.responses.create({ model: "gpt-fake", input: "say something" })
      expect(res.output_text).toBe("bad \ufffd and \ufffd text")
      const after = await footprint(t)
      expect(after.logs).toEqual([{ billing_status: "billed", request_type: "response" }])
      expect(JSON.stringify(after.responses[0].output_items)).toContain("bad \ufffd and \ufffd text")
    } finally {
      oa.setBehavior({})
    }
  })

  it("stream: completes with response.completed, stored with U+FFFD, billed once", async () => {
    const t = await tenant("upstream-bad-stream")
    oa.setBehavior({ reply: "lone \udc00 low" })
    try {
      const stream = await t.client.responses.create({ model: "gpt-fake", input: "stream it", stream: true })
      const types: Array<string> = []
      for await (const event of stream) types.push(event.type)
      expect(types.at(-1)).toBe("response.completed")
      const after = await footprint(t)
      expect(after.logs).toEqual([{ billing_status: "billed", request_type: "response" }])
      expect(JSON.stringify(after.responses[0].output_items)).toContain("lone \ufffd low")
    } finally {
      oa.setBehavior({})
    }
  })

  it("a response that cannot be stored after its call was billed is answered, not a 500", async () => {
    const t = await tenant("no-store")
    const res = await gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "gpt-nostore", input: "hello" } })
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    expect(res.body.output[0].content[0].text).toBe("Hello from the fake upstream")
    const after = await footprint(t)
    expect(after.logs).toEqual([{ billing_status: "billed", request_type: "response" }])
    expect(after.responses).toEqual([])

    const stream = await t.client.responses.create({ model: "gpt-nostore", input: "again", stream: true })
    const types: Array<string> = []
    for await (const event of stream) types.push(event.type)
    expect(types.at(-1)).toBe("response.completed")
    expect((await footprint(t)).logs).toHaveLength(2)
  })
})

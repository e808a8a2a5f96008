// A hostile prompt does not hurt other tenants: a 200k-letter run without spaces is answered
// while another tenant's request is served; a prompt over GATEWAY_MAX_PROMPT_CHARS is refused
// with 422 context_length_exceeded before anything is counted, and changes nothing; an end user
// whose budget is exhausted gets its 402 without the tokenizer reading the prompt; a stream
// whose emitted text is one long run, cut short, is settled with its count.
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { countedCharacters, countTextTokens } from "../layers/platform/Tokenizer.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const MAX_PROMPT_CHARS = 300_000

let gw: Gateway
let upstream: FakeUpstream

beforeAll(async () => {
  upstream = await startFakeOpenAi()
  gw = await startGateway({ env: { GATEWAY_MAX_PROMPT_CHARS: String(MAX_PROMPT_CHARS) } })
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "fake", kind: "openai", base_url: upstream.url })
  await admin("/v1/admin/models", {
    slug: "fake-model",
    providers: [{ provider: "fake", provider_model_id: "fake-1", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }]
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

const tenant = async (budgetUsd = 5): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/fake`, { key: platformKey, body: { api_key: "fake-key" } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
  const eu = await createEndUser(gw, platformId, platformKey, "user")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: budgetUsd } })
  return { platformId, platformKey, ...eu }
}

const chat = (t: Tenant, content: string, extra: Record<string, unknown> = {}) =>
  gw.call("POST", "/v1/chat/completions", { key: t.endUserKey, body: { model: "fake-model", messages: [{ role: "user", content }], ...extra } })

/** What a refused call must leave as it was: the tenant's log rows, ledger rows, budget and wallet. */
const money = async (t: Tenant) => {
  const row = await gw.db.pool.query(
    `SELECT (SELECT count(*)::int FROM inference_logs WHERE platform_id = $1) AS logs,
       (SELECT count(*)::int FROM budget_transactions WHERE platform_id = $1) AS ledger,
       (SELECT count(*)::int FROM budget_transactions WHERE platform_id = $1 AND type = 'debit') AS debits,
       (SELECT used_usd::text FROM budgets WHERE end_user_id = $2 AND deleted_at IS NULL) AS used,
       (SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1) AS wallet`,
    [t.platformId, t.endUserId]
  )
  return row.rows[0]
}

/** Letters without a space, pseudo-random from `seed` (no cache makes them cheap: each test its own seed). */
const letterRun = (length: number, seed: number) => {
  let text = ""
  while (text.length < length) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
    text += String.fromCharCode(97 + (seed >>> 16) % 26)
  }
  return text
}

describe("a hostile prompt", () => {
  it("a 200k-letter prompt is answered, and another tenant's request meanwhile too", async () => {
    upstream.reset()
    const [hostile, other] = await Promise.all([tenant(), tenant()])
    const run = letterRun(200_000, 1)
    const [big, small] = await Promise.all([chat(hostile, run), chat(other, "What is the capital of France?")])
    expect(small.status).toBe(200)
    expect(small.body.choices[0].message.content).toBe("Hello from the fake upstream")
    expect(big.status).toBe(200)
    expect(big.body.choices[0].message.content).toBe("Hello from the fake upstream")
    // The upstream got the prompt whole.
    expect(upstream.requests.map((r) => r.body.messages[0].content.length).sort((a, b) => a - b)).toEqual([30, 200_000])
    expect(await money(hostile)).toMatchObject({ logs: 1, debits: 1 })
  })

  it("a prompt over GATEWAY_MAX_PROMPT_CHARS: 422 context_length_exceeded, nothing counted, called or written", async () => {
    upstream.reset()
    const t = await tenant()
    const before = await money(t)
    const counted = countedCharacters()
    // Text of messages and tool-call arguments counts; one character over the limit.
    const res = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: {
        model: "fake-model",
        messages: [
          { role: "user", content: "a ".repeat(MAX_PROMPT_CHARS / 4) },
          { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "b".repeat(MAX_PROMPT_CHARS / 2) } }] }
        ]
      }
    })
    expect(res.status).toBe(422)
    expect(res.body.error).toMatchObject({ code: "context_length_exceeded", param: "messages", type: "invalid_request_error" })
    expect(res.body.error.message).toContain(String(MAX_PROMPT_CHARS))
    expect(countedCharacters()).toBe(counted)
    expect(upstream.requests).toHaveLength(0)
    expect(await money(t)).toEqual(before)
    // At the limit itself, the call goes through.
    expect((await chat(t, "x".repeat(MAX_PROMPT_CHARS))).status).toBe(200)
  })

  it("the Responses API names `input` for a prompt over the limit", async () => {
    upstream.reset()
    const t = await tenant()
    const before = await money(t)
    const client = new OpenAI({ apiKey: t.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
    const refused = await client.responses.create({ model: "fake-model", input: "y".repeat(MAX_PROMPT_CHARS + 1) }).catch((e) => e)
    expect(refused).toBeInstanceOf(OpenAI.APIError)
    expect(refused).toMatchObject({ status: 422, code: "context_length_exceeded", param: "input" })
    expect(upstream.requests).toHaveLength(0)
    expect(await money(t)).toEqual(before)
  })

  it("an exhausted budget answers 402 without the tokenizer reading the prompt", async () => {
    upstream.reset()
    const t = await tenant(1)
    await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/debit`, { key: t.platformKey, body: { amount_usd: 1 } })
    const before = await money(t)
    const counted = countedCharacters()
    const res = await chat(t, letterRun(250_000, 2))
    expect(res.status).toBe(402)
    expect(res.body.error).toMatchObject({ code: "budget_exhausted" })
    expect(countedCharacters() - counted).toBeLessThan(1_000)
    expect(upstream.requests).toHaveLength(0)
    expect(await money(t)).toEqual(before)
  })

  it("a stream whose emitted text is one long run, cut short, is settled with that run's count", async () => {
    upstream.reset()
    const t = await tenant()
    const run = letterRun(200_000, 3)
    // One content chunk of 200k letters, then the body ends: no finish, no usage.
    upstream.setBehavior({ reply: run, endAfterChunks: 1 })
    const res = await chat(t, "Print a long blob.", { stream: true })
    expect(res.status).toBe(200)
    const streamed = String(res.body)
      .split("\n\n")
      .filter((line) => line.startsWith("data: {"))
      .map((line) => JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? "")
      .join("")
    expect(streamed).toBe(run)
    const [row] = (await gw.db.pool.query("SELECT * FROM inference_logs WHERE platform_id = $1", [t.platformId])).rows
    expect(row).toMatchObject({ token_count_method: "estimated", billing_status: "billed" })
    const whole = countTextTokens(run)
    expect(Math.abs(row.completion_tokens - whole)).toBeLessThan(whole * 0.01)
  })
})

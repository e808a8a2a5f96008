// Usage a provider reports is believed only within bounds (whole numbers from 0 to
// MAX_REPORTED_TOKENS): a negative or absurd count is replaced by the gateway's own count, the
// call is still logged and debited at an exact, positive cost, `billing_status: estimated`
// says so, and the log row keeps what the provider reported. The client sees the usage billed.
import { BigDecimal } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_REPORTED_TOKENS, usageInBounds } from "../layers/pipeline/Inference.js"
import { countPromptTokens, countTextTokens } from "../layers/platform/Tokenizer.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, type Gateway, provisionOpenAiModel, startGateway } from "./support/Gateway.js"

let gw: Gateway
let upstream: FakeUpstream
let platform: { readonly platformId: string; readonly platformKey: string }

beforeAll(async () => {
  upstream = await startFakeOpenAi()
  gw = await startGateway()
  // 1 USD per million tokens both ways.
  platform = await provisionOpenAiModel(gw, upstream.url, { provider: "fake", model: "fake-model" }, 10)
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

const endUser = async (name: string) => {
  const eu = await createEndUser(gw, platform.platformId, platform.platformKey, name)
  await gw.call("POST", `/v1/platforms/${platform.platformId}/end-users/${eu.endUserId}/budget`, { key: platform.platformKey, body: { max_usd: 5 } })
  return { ...eu, client: new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }) }
}

const REPLY = "Hello from the fake upstream"
const messages = [{ role: "user" as const, content: "Say hello." }]
/** The gateway's count of the call: the prompt estimate and the reply's tokens. */
const estimate = () => {
  const prompt = countPromptTokens(messages)
  const completion = countTextTokens(REPLY)
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
}
/** At 1 USD per million tokens both ways. */
const costOf = (tokens: number) => BigDecimal.make(BigInt(tokens), 6)

const settledOf = async (endUserId: string) => {
  const logs = (await gw.db.pool.query("SELECT * FROM inference_logs WHERE end_user_id = $1", [endUserId])).rows
  const debits = (await gw.db.pool.query(
    "SELECT amount_usd::text FROM budget_transactions WHERE budget_id = (SELECT id FROM budgets WHERE end_user_id = $1) AND type = 'debit'",
    [endUserId]
  )).rows
  const used = (await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1", [endUserId])).rows[0].used_usd as string
  return { logs, debits: debits.map((d) => d.amount_usd as string), used }
}

const expectBilledOnEstimate = async (endUserId: string, reported: { prompt: number; completion: number }, stream: boolean) => {
  const { logs, debits, used } = await settledOf(endUserId)
  const expected = estimate()
  expect(logs).toHaveLength(1)
  expect(logs[0]).toMatchObject({
    status: "success",
    token_count_method: "estimated",
    billing_status: "estimated",
    prompt_tokens: expected.prompt_tokens,
    completion_tokens: expected.completion_tokens,
    total_tokens: expected.total_tokens
  })
  expect(logs[0].error_message).toContain("reported usage out of bounds")
  expect(logs[0].metadata).toMatchObject({
    stream,
    reported_usage: { prompt_tokens: reported.prompt, completion_tokens: reported.completion, total_tokens: reported.prompt + reported.completion }
  })
  const cost = costOf(expected.total_tokens)
  expect(BigDecimal.greaterThan(cost, BigDecimal.make(0n, 0))).toBe(true)
  expect(BigDecimal.equals(BigDecimal.unsafeFromString(logs[0].estimated_cost_usd), cost)).toBe(true)
  expect(debits).toHaveLength(1)
  expect(BigDecimal.equals(BigDecimal.unsafeFromString(debits[0]!), cost)).toBe(true)
  expect(BigDecimal.equals(BigDecimal.unsafeFromString(used), cost)).toBe(true)
}

describe("the bounds", () => {
  it("each count a whole number from 0 to MAX_REPORTED_TOKENS; the total need not be the sum", () => {
    const usage = (prompt_tokens: number, completion_tokens: number, total_tokens = prompt_tokens + completion_tokens) => ({ prompt_tokens, completion_tokens, total_tokens })
    expect(usageInBounds(usage(0, 0))).toBe(true)
    expect(usageInBounds(usage(MAX_REPORTED_TOKENS, 0))).toBe(true)
    expect(usageInBounds(usage(120, 30, 200))).toBe(true) // cached or reasoning tokens counted apart
    expect(usageInBounds(usage(MAX_REPORTED_TOKENS + 1, 0))).toBe(false)
    expect(usageInBounds(usage(10, 10, MAX_REPORTED_TOKENS + 1))).toBe(false)
    expect(usageInBounds(usage(-1, 5))).toBe(false)
    expect(usageInBounds(usage(5, 1.5))).toBe(false)
    expect(usageInBounds(usage(5, Number.NaN))).toBe(false)
    expect(usageInBounds(usage(1e12, 1e12))).toBe(false)
  })
})

describe("reported usage out of bounds", () => {
  it("negative counts (non-streaming): billed on the gateway's count, logged as estimated", async () => {
    upstream.setBehavior({ usage: { prompt: -5, completion: -3 } })
    const user = await endUser("negative")
    const answer = await user.client.chat.completions.create({ model: "fake-model", messages })
    expect(answer.choices[0]!.message.content).toBe(REPLY)
    expect(answer.usage).toEqual(estimate())
    await expectBilledOnEstimate(user.endUserId, { prompt: -5, completion: -3 }, false)
  })

  it("a trillion tokens (non-streaming): the call is not lost, it is billed on the gateway's count", async () => {
    upstream.setBehavior({ usage: { prompt: 1e12, completion: 1e12 } })
    const user = await endUser("trillion")
    const answer = await user.client.chat.completions.create({ model: "fake-model", messages })
    expect(answer.usage).toEqual(estimate())
    await expectBilledOnEstimate(user.endUserId, { prompt: 1e12, completion: 1e12 }, false)
  })

  it("fractional counts (non-streaming): the answer is used, the usage is not believed", async () => {
    upstream.setBehavior({ usage: { prompt: 5.5, completion: 2.25 } })
    const user = await endUser("fractional")
    const answer = await user.client.chat.completions.create({ model: "fake-model", messages })
    expect(answer.choices[0]!.message.content).toBe(REPLY)
    expect(answer.usage).toEqual(estimate())
    await expectBilledOnEstimate(user.endUserId, { prompt: 5.5, completion: 2.25 }, false)
  })

  it("a trillion tokens in a stream's usage chunk: the client sees and is billed the gateway's count", async () => {
    upstream.setBehavior({ usage: { prompt: 1e12, completion: 1e12 } })
    const user = await endUser("stream")
    const stream = await user.client.chat.completions.create({ model: "fake-model", messages, stream: true, stream_options: { include_usage: true } })
    let text = ""
    let usage: unknown = null
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? ""
      if (chunk.usage) usage = chunk.usage
    }
    expect(text).toBe(REPLY)
    expect(usage).toEqual(estimate())
    await expectBilledOnEstimate(user.endUserId, { prompt: 1e12, completion: 1e12 }, true)
  })

  it("negative counts in a stream without include_usage: billed on the gateway's count, no usage relayed", async () => {
    upstream.setBehavior({ usage: { prompt: -1, completion: 7 } })
    const user = await endUser("stream-negative")
    const stream = await user.client.chat.completions.create({ model: "fake-model", messages, stream: true })
    const chunks = []
    for await (const chunk of stream) chunks.push(chunk)
    expect(chunks.some((c) => c.usage != null)).toBe(false)
    await expectBilledOnEstimate(user.endUserId, { prompt: -1, completion: 7 }, true)
  })

  it("usage within bounds is billed as reported", async () => {
    upstream.setBehavior({ usage: { prompt: 9_999_990, completion: 10 } })
    const user = await endUser("in-bounds")
    const answer = await user.client.chat.completions.create({ model: "fake-model", messages })
    expect(answer.usage).toEqual({ prompt_tokens: 9_999_990, completion_tokens: 10, total_tokens: 10_000_000 })
    const { logs, used } = await settledOf(user.endUserId)
    expect(logs[0]).toMatchObject({ token_count_method: "reported", billing_status: "billed", prompt_tokens: 9_999_990 })
    expect(logs[0].metadata.reported_usage).toBeUndefined()
    expect(used).toBe("10")
  })
})

// The hybrid tool loop of /v1/responses with the official SDK: tool-app calls run inline (mcp_call
// items, one `response` log row per turn, metered `mcp_tool` rows), a function tool returns at
// once, the 10-iteration cap, streamed mcp events, reconciliation against the wallet, and
// checks 2-5 on every turn (a refused turn ends the response incomplete with the refusal's code).
import { createServer, type Server } from "node:http"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { apiUrls, type FakeToolApis, oauthUrls, startFakeToolApis } from "./fakes/FakeToolApis.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let fake: FakeToolApis
let landing: OAuthLanding
let model: FakeUpstream
/** An upstream that asks for the first tool on every turn (drives the iteration cap). */
let looping: Server
let loopingUrl: string
let loopingCalls = 0
/** Runs before the looping upstream answers call `n` (1-based): a test's way to act between turns. */
let beforeLoopAnswer: (n: number) => Promise<void> = async () => {}

beforeAll(async () => {
  ;[fake, landing, model] = await Promise.all([startFakeToolApis(), startOAuthLanding(), startFakeOpenAi()])
  looping = createServer((req, res) => {
    let raw = ""
    req.on("data", (c) => (raw += c))
    req.on("end", async () => {
      loopingCalls++
      await beforeLoopAnswer(loopingCalls)
      const body = JSON.parse(raw)
      const tool = body.tools[0].function.name
      res.setHeader("content-type", "application/json")
      res.end(JSON.stringify({
        id: `chatcmpl-loop${loopingCalls}`,
        object: "chat.completion",
        created: 1,
        model: body.model,
        choices: [{ index: 0, finish_reason: "tool_calls", message: { role: "assistant", content: null, tool_calls: [{ id: `call_${loopingCalls}`, type: "function", function: { name: tool, arguments: "{}" } }] } }],
        usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 }
      }))
    })
  })
  await new Promise<void>((r) => looping.listen(0, "127.0.0.1", () => r()))
  const address = looping.address()
  loopingUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/v1`
  const env: Record<string, string> = { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_FREE_TOOL_CALLS: "0" }
  for (const app of ["github"] as const) {
    env[`TOOLAPP_GITHUB_API_URL`] = apiUrls(fake)[app]
    env[`TOOLAPP_GITHUB_AUTHORIZE_URL`] = oauthUrls(fake)[app].authorizeUrl
    env[`TOOLAPP_GITHUB_TOKEN_URL`] = oauthUrls(fake)[app].tokenUrl
  }
  gw = await startGateway({ env })
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 2 }
  await admin("/v1/admin/providers", { slug: "oa", kind: "openai", base_url: model.url })
  await admin("/v1/admin/providers", { slug: "loop", kind: "openai", base_url: loopingUrl })
  await admin("/v1/admin/models", { slug: "agent-model", providers: [{ provider: "oa", provider_model_id: "gpt-x", ...price }] })
  await admin("/v1/admin/models", { slug: "loop-model", providers: [{ provider: "loop", provider_model_id: "loop-x", ...price }] })
})
afterAll(async () => {
  await gw?.close()
  await Promise.all([fake?.close(), landing?.close(), model?.close()])
  await new Promise<void>((r) => looping?.close(() => r()))
})

/** A platform with github active, an end user connected to it through the real OAuth flow. */
const connectedUser = async (walletUsd = 10) => {
  const { platformId, platformKey } = await createPlatform(gw)
  for (const slug of ["oa", "loop"]) {
    await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/${slug}`, { key: platformKey, body: { api_key: "k" } })
  }
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: walletUsd } })
  await gw.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
    key: platformKey,
    body: { app_slug: "github", client_id: "client-github", client_secret: "secret-github", base_url: landing.url }
  })
  const eu = await createEndUser(gw, platformId, platformKey, "agent-user")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } })
  const start = await fetch(`${gw.toolsUrl}/oauth/authorize?app=github`, { headers: { authorization: `Bearer ${eu.endUserKey}` }, redirect: "manual" })
  const consent = await fetch(start.headers.get("location")!, { redirect: "manual" })
  const back = await fetch(consent.headers.get("location")!, { redirect: "manual" })
  expect(new URL(back.headers.get("location")!).searchParams.get("status")).toBe("connected")
  const config = await gw.call("GET", "/v1/me/mcp-config", { key: eu.endUserKey })
  const client = new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
  return { platformId, platformKey, ...eu, client, mcpTools: config.body.openai as Array<any> }
}

const rows = async (platformId: string) =>
  (await gw.db.pool.query("SELECT request_type, estimated_cost_usd::text AS cost FROM inference_logs WHERE platform_id = $1 ORDER BY created_at", [platformId])).rows

describe("hybrid loop", () => {
  it("runs tool-app calls inline: mcp_call items, a final answer, per-turn rows that reconcile with the wallet", async () => {
    const u = await connectedUser()
    model.reset()
    const res = await u.client.responses.create({ model: "agent-model", input: "list my repos", tools: u.mcpTools })
    expect(res.status).toBe("completed")
    expect(res.output.map((o) => o.type)).toEqual(["mcp_call", "message"])
    const call = res.output[0] as any
    expect(call).toMatchObject({ type: "mcp_call", server_label: "github", name: "github_list_repos", status: "completed" })
    expect(call.output).toContain("widgets")
    expect(res.output_text).toContain("done:")
    expect(model.requests[0]!.body.tools.map((t: any) => t.function.name)).toContain("github_get_issue")
    expect(fake.requestsFor("github").some((r) => r.path === "/user/repos")).toBe(true)
    // The hosted tool's key is write-only: not in the answer, the stored row or a read back.
    expect(JSON.stringify(res.tools)).not.toContain(u.endUserKey)
    expect(res.tools.some((t: any) => t.type === "mcp" && t.server_label === "github")).toBe(true)
    const stored = await gw.db.pool.query("SELECT request::text AS request FROM responses WHERE id = $1", [res.id])
    expect(stored.rows[0].request).not.toContain(u.endUserKey)
    expect(JSON.stringify(await u.client.responses.retrieve(res.id))).not.toContain(u.endUserKey)
    const logged = await rows(u.platformId)
    expect(logged.map((r) => r.request_type).sort()).toEqual(["mcp_tool", "response", "response"])
    const { rows: [check] } = await gw.db.pool.query(
      `SELECT (10 - (SELECT balance_usd FROM platform_wallets WHERE platform_id = $1))
        = (SELECT sum(estimated_cost_usd) FROM inference_logs WHERE platform_id = $1) AS reconciled`,
      [u.platformId]
    )
    expect(check.reconciled).toBe(true)
  })

  it("returns at once when the model calls a function tool; tool-app calls of that turn are not run", async () => {
    const u = await connectedUser()
    model.reset()
    const before = fake.requestsFor("github").length
    const res = await u.client.responses.create({
      model: "agent-model",
      input: "weather?",
      tools: [{ type: "function", name: "get_weather", parameters: { type: "object", properties: {} }, strict: false }, ...u.mcpTools]
    })
    expect(res.output.map((o) => o.type)).toEqual(["function_call"])
    expect(fake.requestsFor("github").length).toBe(before)
    expect((await rows(u.platformId)).map((r) => r.request_type)).toEqual(["response"])
  })

  it("stops after 10 iterations", async () => {
    const u = await connectedUser()
    loopingCalls = 0
    const res = await u.client.responses.create({ model: "loop-model", input: "go", tools: u.mcpTools })
    expect(loopingCalls).toBe(10)
    expect(res.status).toBe("incomplete")
    expect(res.output.filter((o) => o.type === "mcp_call")).toHaveLength(10)
    expect((await rows(u.platformId)).filter((r) => r.request_type === "response")).toHaveLength(10)
  })

  it("allowed_tools restricts what the model sees; a foreign authorization is refused", async () => {
    const u = await connectedUser()
    model.reset()
    await u.client.responses.create({ model: "agent-model", input: "x", tools: [{ ...u.mcpTools[0], allowed_tools: ["get_repo"] }] })
    expect(model.requests[0]!.body.tools.map((t: any) => t.function.name)).toEqual(["github_get_repo"])
    const other = await connectedUser()
    const res = await gw.call("POST", "/v1/responses", {
      key: u.endUserKey,
      body: { model: "agent-model", input: "x", tools: [{ ...u.mcpTools[0], authorization: `Bearer ${other.endUserKey}` }] }
    })
    expect(res.status).toBe(403)
    const approval = await gw.call("POST", "/v1/responses", {
      key: u.endUserKey,
      body: { model: "agent-model", input: "x", tools: [{ ...u.mcpTools[0], require_approval: "always" }] }
    })
    expect(approval.status).toBe(422)
  })

  it("streams the mcp events of the spec", async () => {
    const u = await connectedUser()
    model.reset()
    const raw = await fetch(`${gw.baseUrl}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${u.endUserKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "agent-model", input: "list my repos", tools: u.mcpTools, stream: true })
    })
    const messages = (await raw.text()).split("\n\n").filter((m) => m.startsWith("event: "))
    const names = messages.map((m) => m.split("\n")[0]!.slice(7))
    // Numbered in the order they are sent, from 0.
    const sequence = messages.map((m) => JSON.parse(m.split("\n").find((l) => l.startsWith("data: "))!.slice(6)).sequence_number)
    expect(sequence).toEqual(messages.map((_, i) => i))
    expect(names).toEqual([
      "response.created",
      "response.in_progress",
      "response.mcp_list_tools.in_progress",
      "response.mcp_list_tools.completed",
      "response.output_item.added",
      "response.mcp_call_arguments.delta",
      "response.mcp_call_arguments.done",
      "response.mcp_call.in_progress",
      "response.mcp_call.completed",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed"
    ])
  })
})

/** The response's SSE events, by name, and the last one's response object. */
const streamed = async (key: string, body: Record<string, unknown>) => {
  const raw = await fetch(`${gw.baseUrl}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true })
  })
  expect(raw.status).toBe(200)
  const messages = (await raw.text()).split("\n\n").filter((m) => m.startsWith("event: "))
  const data = messages.map((m) => JSON.parse(m.split("\n").find((l) => l.startsWith("data: "))!.slice(6)))
  return { names: data.map((d) => d.type as string), last: data.at(-1)!.response }
}

describe("checks on every turn", () => {
  const budgetPath = (u: { platformId: string; endUserId: string }) => `/v1/platforms/${u.platformId}/end-users/${u.endUserId}/budget`
  const used = async (endUserId: string) =>
    (await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [endUserId])).rows[0].used_usd

  it("a budget that covers one turn stops the loop: incomplete, budget_exhausted, the turn and its tool call billed, no further upstream call", async () => {
    for (const stream of [false, true]) {
      const u = await connectedUser()
      // Turn 1 (0.000012) and its tool call (0.001) fit; then nothing remains.
      expect((await gw.call("PATCH", budgetPath(u), { key: u.platformKey, body: { max_usd: 0.001 } })).status).toBe(200)
      loopingCalls = 0
      const body = { model: "loop-model", input: "go", tools: u.mcpTools }
      const res = stream ? (await streamed(u.endUserKey, body)).last : await u.client.responses.create(body)
      expect(loopingCalls).toBe(1)
      expect(res.status).toBe("incomplete")
      expect(res.incomplete_details).toEqual({ reason: "budget_exhausted" })
      expect(res.output.map((o: any) => [o.type, o.status])).toEqual([["mcp_call", "completed"]])
      expect(res.usage).toMatchObject({ input_tokens: 10, output_tokens: 1, total_tokens: 11 })
      expect((await rows(u.platformId)).map((r) => r.request_type).sort()).toEqual(["mcp_tool", "response"])
      expect(Number(await used(u.endUserId))).toBeCloseTo(0.001012, 12)
      const stored = await gw.db.pool.query("SELECT status FROM responses WHERE id = $1", [res.id])
      expect(stored.rows).toEqual([{ status: "incomplete" }])
      // Read back, it says why it stopped, as the answer did.
      expect(await u.client.responses.retrieve(res.id)).toMatchObject({ status: "incomplete", incomplete_details: { reason: "budget_exhausted" } })
    }
  })

  it("the turn's cost alone: turn 2 sees turn 1's queued cost, and the tool call between is refused unpaid", async () => {
    const u = await connectedUser()
    expect((await gw.call("PATCH", budgetPath(u), { key: u.platformKey, body: { max_usd: 0.00001 } })).status).toBe(200)
    loopingCalls = 0
    const res = await u.client.responses.create({ model: "loop-model", input: "go", tools: u.mcpTools })
    expect(loopingCalls).toBe(1)
    expect(res.status).toBe("incomplete")
    expect(res.incomplete_details).toEqual({ reason: "budget_exhausted" })
    const call = res.output[0] as any
    expect(call).toMatchObject({ type: "mcp_call", status: "failed", output: null })
    expect(call.error).toContain("budget_exhausted")
    expect((await rows(u.platformId)).map((r) => r.request_type)).toEqual(["response"])
    expect(Number(await used(u.endUserId))).toBeCloseTo(0.000012, 12)
  })

  it("a wallet that cannot cover the next turn stops the loop: incomplete, wallet_insufficient, what ran billed", async () => {
    for (const stream of [false, true]) {
      // Turn 1's estimate is about 0.0034 (1000 output tokens at 2 USD per million, and about
      // 1,400 prompt tokens at 1, most of them the github tools' definitions): 0.004 covers it;
      // after the turn and its tool call (0.001) the rest cannot cover turn 2.
      const u = await connectedUser(0.004)
      loopingCalls = 0
      const body = { model: "loop-model", input: "go", tools: u.mcpTools, max_output_tokens: 1000 }
      const res = stream ? (await streamed(u.endUserKey, body)).last : await u.client.responses.create(body)
      expect(loopingCalls).toBe(1)
      expect(res.status).toBe("incomplete")
      expect(res.incomplete_details).toEqual({ reason: "wallet_insufficient" })
      expect(res.output.map((o: any) => [o.type, o.status])).toEqual([["mcp_call", "completed"]])
      const { rows: [wallet] } = await gw.db.pool.query("SELECT balance_usd FROM platform_wallets WHERE platform_id = $1", [u.platformId])
      expect(Number(wallet.balance_usd)).toBeCloseTo(0.004 - 0.000012 - 0.001, 12)
      expect((await rows(u.platformId)).map((r) => r.request_type).sort()).toEqual(["mcp_tool", "response"])
    }
  })

  it("a budget suspended between turns stops the loop: the tool call is refused, incomplete with budget_suspended", async () => {
    const u = await connectedUser()
    loopingCalls = 0
    beforeLoopAnswer = async (n) => {
      if (n === 1) expect((await gw.call("PATCH", budgetPath(u), { key: u.platformKey, body: { is_suspended: true } })).status).toBe(200)
    }
    try {
      const { names, last } = await streamed(u.endUserKey, { model: "loop-model", input: "go", tools: u.mcpTools })
      expect(loopingCalls).toBe(1)
      expect(names.at(-1)).toBe("response.incomplete")
      expect(names).toContain("response.mcp_call.failed")
      expect(last.status).toBe("incomplete")
      expect(last.incomplete_details).toEqual({ reason: "budget_suspended" })
      expect(last.output[0].error).toContain("budget_suspended")
      expect((await rows(u.platformId)).map((r) => r.request_type)).toEqual(["response"])
    } finally {
      beforeLoopAnswer = async () => {}
    }
  })

  it("the rate limiter counts each turn as a request: rpm 2 allows two turns, the third ends the response", async () => {
    const u = await connectedUser()
    expect((await gw.call("PUT", `/v1/platforms/${u.platformId}/end-users/${u.endUserId}/rate-limits`, {
      key: u.platformKey,
      body: { rpm_limit: 2 }
    })).status).toBe(200)
    loopingCalls = 0
    const res = await u.client.responses.create({ model: "loop-model", input: "go", tools: u.mcpTools })
    expect(loopingCalls).toBe(2)
    expect(res.status).toBe("incomplete")
    expect(res.incomplete_details).toEqual({ reason: "rate_limit_exceeded" })
    expect(res.output.filter((o) => o.type === "mcp_call")).toHaveLength(2)
    expect((await rows(u.platformId)).filter((r) => r.request_type === "response")).toHaveLength(2)
    // The window is spent: a new request is refused at its first turn, with the 429 as before.
    const next = await gw.call("POST", "/v1/responses", { key: u.endUserKey, body: { model: "loop-model", input: "go" } })
    expect(next.status).toBe(429)
  })

  it("the rate limiter counts each turn's tokens: ten turns of 11 tokens leave 110 fewer in the tpm window", async () => {
    const remainingAfter = async (loop: boolean) => {
      const u = await connectedUser()
      expect((await gw.call("PUT", `/v1/platforms/${u.platformId}/end-users/${u.endUserId}/rate-limits`, {
        key: u.platformKey,
        body: { tpm_limit: 100000 }
      })).status).toBe(200)
      if (loop) {
        loopingCalls = 0
        const res = await u.client.responses.create({ model: "loop-model", input: "go", tools: u.mcpTools })
        expect(res.incomplete_details).toEqual({ reason: "max_tool_iterations" })
        expect(loopingCalls).toBe(10)
      }
      const chat = await gw.call("POST", "/v1/chat/completions", {
        key: u.endUserKey,
        body: { model: "agent-model", messages: [{ role: "user", content: "hi" }] }
      })
      expect(chat.status).toBe(200)
      return Number(chat.headers.get("x-ratelimit-remaining-tokens"))
    }
    const fresh = await remainingAfter(false)
    expect(fresh).toBeGreaterThan(99000)
    expect(await remainingAfter(true)).toBe(fresh - 110)
  })
})

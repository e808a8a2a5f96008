// budget_enforcement "reserve" past plain chat calls: each turn of the hybrid tool loop of
// /v1/responses reserves and settles its own maximum cost, a budget that covers one turn stops
// the loop at the next, concurrent loops on two instances never spend past max_usd, and paid
// tool calls and capability runs count the reservations of model calls in flight (budget and
// wallet), refusing what they leave no room for and debiting nothing for it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { createServer, type Server } from "node:http"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeCapabilityProvider, startFakeCapabilityProvider } from "./fakes/FakeCapabilityProvider.js"
import { type FakeToolApis, startFakeToolApis, toolAppEnv } from "./fakes/FakeToolApis.js"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, createPlatform, type Gateway, ok, type Peer, startGateway, upsertCapability } from "./support/Gateway.js"

let gw: Gateway
let peer: Peer
let tools: FakeToolApis
let landing: OAuthLanding
let capability: FakeCapabilityProvider
let capabilityUid: string

// The model: 1 USD per million prompt tokens, 1000 per million completion tokens (0.001 USD a
// token). Every request asks for at most MAX_TOKENS, so a turn reserves 0.1 USD plus its prompt
// estimate; the upstream reports 1 prompt token (never more than the estimate) and
// `completionTokens` completion tokens. A paid tool call costs 0.005 USD (every call is paid).
const MAX_TOKENS = 100
const TOOL_PRICE = 0.005
const turnCost = (completionTokens: number) => 0.000001 + completionTokens * 0.001

/**
 * The upstream of the loop: asks for the first offered tool on turns up to `toolTurns` (a turn's
 * number: the assistant messages it is sent, plus one), then answers with text. `beforeAnswer`
 * runs before each answer: the test's moment to look at a turn in flight.
 */
const upstream = {
  calls: 0,
  completionTokens: 1,
  toolTurns: Number.POSITIVE_INFINITY,
  beforeAnswer: async (_call: number): Promise<void> => {}
}
let upstreamServer: Server

const startUpstream = async () => {
  upstreamServer = createServer((req, res) => {
    let raw = ""
    req.on("data", (c) => (raw += c))
    req.on("end", async () => {
      const call = ++upstream.calls
      await upstream.beforeAnswer(call)
      const body = JSON.parse(raw)
      const turn = body.messages.filter((m: any) => m.role === "assistant").length + 1
      const askTool = turn <= upstream.toolTurns && Array.isArray(body.tools) && body.tools.length > 0
      const message = askTool
        ? { role: "assistant", content: null, tool_calls: [{ id: `call_${call}`, type: "function", function: { name: body.tools[0].function.name, arguments: "{}" } }] }
        : { role: "assistant", content: "done" }
      res.setHeader("content-type", "application/json")
      res.end(JSON.stringify({
        id: `chatcmpl-turn${call}`,
        object: "chat.completion",
        created: 1,
        model: body.model,
        choices: [{ index: 0, finish_reason: askTool ? "tool_calls" : "stop", message }],
        usage: { prompt_tokens: 1, completion_tokens: upstream.completionTokens, total_tokens: 1 + upstream.completionTokens }
      }))
    })
  })
  await new Promise<void>((r) => upstreamServer.listen(0, "127.0.0.1", () => r()))
  const address = upstreamServer.address()
  return `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/v1`
}

/** The upstream's behaviour for one test; `calls` counts from zero again. */
const behave = (b: Partial<Omit<typeof upstream, "calls">>) => {
  upstream.calls = 0
  upstream.completionTokens = b.completionTokens ?? 1
  upstream.toolTurns = b.toolTurns ?? Number.POSITIVE_INFINITY
  upstream.beforeAnswer = b.beforeAnswer ?? (async () => {})
}

beforeAll(async () => {
  ;[tools, landing, capability] = await Promise.all([startFakeToolApis(), startOAuthLanding(), startFakeCapabilityProvider()])
  const upstreamUrl = await startUpstream()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_FREE_TOOL_CALLS: "0", GATEWAY_TOOL_CALL_PRICE_USD: String(TOOL_PRICE), ...toolAppEnv(tools) } })
  peer = await gw.startPeer()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  ok(await admin("/v1/admin/providers", { slug: "turns", kind: "openai", base_url: upstreamUrl }))
  ok(await admin("/v1/admin/models", {
    slug: "turn-model",
    providers: [{ provider: "turns", provider_model_id: "turn-1", input_usd_per_mtok: 1, output_usd_per_mtok: 1000 }]
  }))
  // Held at its maximum price (0.03 USD), billed at its median (0.02 USD).
  capabilityUid = await upsertCapability(gw, { slug: "reserve-cap" }, { slug: "reserve-provider", url: `${capability.url}/ok` })
})

afterAll(async () => {
  await gw?.close()
  await Promise.all([tools?.close(), landing?.close(), capability?.close()])
  await new Promise<void>((r) => upstreamServer?.close(() => r()))
})

interface User {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly client: OpenAI
  readonly mcpTools: Array<any>
}

/**
 * A platform in `enforcement` mode with `walletUsd`, github active and capabilities enabled; an
 * end user with a budget of `budgetUsd`, connected to github through the OAuth flow.
 */
const user = async (options: { enforcement?: "optimistic" | "reserve"; walletUsd?: number; budgetUsd?: number } = {}): Promise<User> => {
  const { platformId, platformKey } = await createPlatform(gw)
  ok(await gw.call("PATCH", `/v1/platforms/${platformId}`, {
    key: platformKey,
    body: { settings: { budget_enforcement: options.enforcement ?? "reserve", capabilities: { enabled: true } } }
  }))
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/turns`, { key: platformKey, body: { api_key: "k" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: options.walletUsd ?? 10 } }))
  ok(await gw.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
    key: platformKey,
    body: { app_slug: "github", client_id: "client-github", client_secret: "secret-github", base_url: landing.url }
  }), 201)
  const eu = await createEndUser(gw, platformId, platformKey, "agent")
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: options.budgetUsd ?? 5 } }), 201)
  const start = await fetch(`${gw.toolsUrl}/oauth/authorize?app=github`, { headers: { authorization: `Bearer ${eu.endUserKey}` }, redirect: "manual" })
  const consent = await fetch(start.headers.get("location")!, { redirect: "manual" })
  const back = await fetch(consent.headers.get("location")!, { redirect: "manual" })
  expect(new URL(back.headers.get("location")!).searchParams.get("status")).toBe("connected")
  const config = ok(await gw.call("GET", "/v1/me/mcp-config", { key: eu.endUserKey }))
  const client = new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
  return { platformId, platformKey, endUserId: eu.endUserId, endUserKey: eu.endUserKey, client, mcpTools: config.body.openai }
}

const loopBody = (u: User) => ({ model: "turn-model", input: "go", tools: u.mcpTools, max_output_tokens: MAX_TOKENS })

/** The response object of a streamed /v1/responses: the last event's. */
const streamedResponse = async (via: Gateway | Peer, key: string, body: Record<string, unknown>) => {
  const raw = await fetch(`${via.baseUrl}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true })
  })
  expect(raw.status).toBe(200)
  const messages = (await raw.text()).split("\n\n").filter((m) => m.startsWith("event: "))
  return JSON.parse(messages.at(-1)!.split("\n").find((l) => l.startsWith("data: "))!.slice(6)).response
}

/** The budget as GET shows it, once both instances wrote what they queued (each read waits for its own). */
const budgetOf = async (u: User) => {
  const path = `/v1/platforms/${u.platformId}/end-users/${u.endUserId}/budget`
  ok(await peer.call("GET", path, { key: u.platformKey }))
  return ok(await gw.call("GET", path, { key: u.platformKey })).body
}

/** Reservations held on the platform right now (live ones: a call in flight). */
const reservationsOf = async (platformId: string) =>
  (await gw.db.pool.query(
    "SELECT budget_id, amount_usd::float8 AS amount FROM budget_reservations WHERE platform_id = $1 AND expires_at > now()",
    [platformId]
  )).rows as Array<{ budget_id: string | null; amount: number }>

/** What was billed: log rows by type, budget debits, used, wallet, open capability runs. */
const ledgerOf = async (u: User) => {
  const q = async (text: string) => (await gw.db.pool.query(text, [u.platformId])).rows
  const logs = await q("SELECT request_type, estimated_cost_usd::text AS cost FROM inference_logs WHERE platform_id = $1 ORDER BY created_at")
  const debits = await q("SELECT reason, amount_usd::text AS amount FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'")
  const [budget] = await q("SELECT used_usd::text AS used, max_usd::text AS max, used_usd <= max_usd AS within FROM budgets WHERE platform_id = $1 AND deleted_at IS NULL")
  const [wallet] = await q("SELECT balance_usd::text AS balance FROM platform_wallets WHERE platform_id = $1")
  const [runs] = await q("SELECT count(*)::int AS open FROM capability_runs WHERE platform_id = $1 AND state = 'open'")
  const [sums] = await q(`SELECT (SELECT coalesce(sum(estimated_cost_usd), 0) FROM inference_logs WHERE platform_id = $1)
      = (SELECT coalesce(sum(amount_usd), 0) FROM budget_transactions WHERE platform_id = $1 AND type = 'debit') AS logs_match_debits`)
  return {
    types: logs.map((l) => l.request_type as string).sort(),
    logs,
    debits: debits.length,
    used: Number(budget.used),
    within: budget.within as boolean,
    wallet: Number(wallet.balance),
    open: runs.open as number,
    reconciled: sums.logs_match_debits as boolean
  }
}

/** A chat call through `key` held at the upstream (its reservation in place) until `release` is called. */
const heldChat = async (key: string) => {
  let release!: () => void
  const released = new Promise<void>((r) => (release = r))
  let arrived!: () => void
  const atUpstream = new Promise<void>((r) => (arrived = r))
  behave({
    beforeAnswer: async () => {
      arrived()
      await released
    }
  })
  const answer = gw.call("POST", "/v1/chat/completions", {
    key,
    body: { model: "turn-model", messages: [{ role: "user", content: "hi" }], max_tokens: MAX_TOKENS }
  })
  // The upstream has the request: admission, and so the reservation, came first.
  await atUpstream
  return { release, answer }
}

describe("reserve mode: the hybrid loop", () => {
  it("each turn reserves its own maximum cost and settles it: one reservation per turn in flight, none after, every step billed once", async () => {
    const u = await user({ budgetUsd: 5 })
    const during: Array<{ rows: Array<{ budget_id: string | null; amount: number }>; reserved: number }> = []
    behave({
      toolTurns: 2,
      beforeAnswer: async () => {
        const rows = await reservationsOf(u.platformId)
        const reserved = ok(await gw.call("GET", `/v1/platforms/${u.platformId}/end-users/${u.endUserId}/budget`, { key: u.platformKey })).body.reserved_usd
        during.push({ rows, reserved })
      }
    })
    const res = await u.client.responses.create(loopBody(u))
    expect(res.status).toBe("completed")
    expect(res.output.map((o) => o.type)).toEqual(["mcp_call", "mcp_call", "message"])
    expect(upstream.calls).toBe(3)
    // Each turn in flight holds one reservation, its own: the turn before settled its own.
    expect(during).toHaveLength(3)
    for (const turn of during) {
      expect(turn.rows).toHaveLength(1)
      expect(turn.rows[0]!.budget_id).not.toBeNull()
      expect(turn.rows[0]!.amount).toBeGreaterThanOrEqual(MAX_TOKENS * 0.001)
      expect(turn.reserved).toBe(turn.rows[0]!.amount)
    }
    // Later turns send more prompt (the tool results), so they reserve more.
    expect(during[2]!.rows[0]!.amount).toBeGreaterThan(during[0]!.rows[0]!.amount)

    const billed = await ledgerOf(u)
    expect(billed.types).toEqual(["mcp_tool", "mcp_tool", "response", "response", "response"])
    expect(billed.debits).toBe(5)
    expect(billed.used).toBeCloseTo(3 * turnCost(1) + 2 * TOOL_PRICE, 12)
    expect(billed.wallet).toBeCloseTo(10 - billed.used, 12)
    expect(billed.reconciled).toBe(true)
    const budget = await budgetOf(u)
    expect(budget.reserved_usd).toBe(0)
    expect(await reservationsOf(u.platformId)).toEqual([])
  })

  it("a budget that covers one turn stops the loop at the next: incomplete, budget_exhausted, turn 1 and its tool call billed once", async () => {
    for (const stream of [false, true]) {
      // A turn reserves just over 0.1 USD: 0.15 covers one. Turn 1 costs 0.060001 and its tool
      // call 0.001; what remains (0.088999) cannot hold turn 2's reservation.
      const u = await user({ budgetUsd: 0.15 })
      behave({ completionTokens: 60 })
      const res: any = stream ? await streamedResponse(gw, u.endUserKey, loopBody(u)) : await u.client.responses.create(loopBody(u))
      expect(upstream.calls).toBe(1)
      expect(res.status).toBe("incomplete")
      expect(res.incomplete_details).toEqual({ reason: "budget_exhausted" })
      expect(res.output.map((o: any) => [o.type, o.status])).toEqual([["mcp_call", "completed"]])
      expect(res.usage).toMatchObject({ input_tokens: 1, output_tokens: 60 })
      const billed = await ledgerOf(u)
      expect(billed.types).toEqual(["mcp_tool", "response"])
      expect(billed.debits).toBe(2)
      expect(billed.used).toBeCloseTo(turnCost(60) + TOOL_PRICE, 12)
      expect(billed.within).toBe(true)
      expect(billed.reconciled).toBe(true)
      const budget = await budgetOf(u)
      expect(budget.reserved_usd).toBe(0)
      expect(budget.used_usd).toBeLessThanOrEqual(budget.max_usd)
      expect(await reservationsOf(u.platformId)).toEqual([])
      const stored = await gw.db.pool.query("SELECT status FROM responses WHERE id = $1", [res.id])
      expect(stored.rows).toEqual([{ status: "incomplete" }])
    }
    // The same loop in optimistic mode is admitted at turn 2 (remaining > 0), and spends past max_usd.
    const optimistic = await user({ enforcement: "optimistic", budgetUsd: 0.15 })
    behave({ completionTokens: 60 })
    const res = await optimistic.client.responses.create(loopBody(optimistic))
    expect(upstream.calls).toBeGreaterThan(1)
    expect(res.status).toBe("incomplete")
    expect((await ledgerOf(optimistic)).within).toBe(false)
  })

  it("the tool call between turns is refused when the budget left cannot pay its price; nothing past max_usd", async () => {
    // 0.104 covers turn 1's reservation (0.1 plus about 0.0014 of prompt: the github tools'
    // definitions count); turn 1 costs 0.100001, leaving 0.003999: less than the tool call's price
    // (optimistic mode would run it, since remaining > 0) and than turn 2's reservation.
    const u = await user({ budgetUsd: 0.104 })
    behave({ completionTokens: MAX_TOKENS })
    const sent = tools.requestsFor("github").length
    const res = await u.client.responses.create(loopBody(u))
    expect(upstream.calls).toBe(1)
    expect(res.status).toBe("incomplete")
    expect(res.incomplete_details).toEqual({ reason: "budget_exhausted" })
    const call = res.output[0] as any
    expect(call).toMatchObject({ type: "mcp_call", status: "failed", output: null })
    expect(call.error).toContain("budget_exhausted")
    expect(tools.requestsFor("github").length).toBe(sent)
    const billed = await ledgerOf(u)
    expect(billed.types).toEqual(["response"])
    expect(billed.used).toBeCloseTo(turnCost(MAX_TOKENS), 12)
    expect(billed.within).toBe(true)
    expect((await budgetOf(u)).reserved_usd).toBe(0)
  })

  it("concurrent loops on two instances against a budget for one turn: one turn runs in all, used_usd <= max_usd, no reservation left", async () => {
    const u = await user({ budgetUsd: 0.15 })
    // Each answer waits a moment, so the requests overlap at the upstream.
    // Each instance names its own tool service in the mcp items.
    const peerTools = ok(await peer.call("GET", "/v1/me/mcp-config", { key: u.endUserKey })).body.openai
    const bodies = [loopBody(u), { ...loopBody(u), tools: peerTools }]
    // A turn costs about what it reserves (0.100001): any two turns together would pass max_usd.
    behave({ completionTokens: MAX_TOKENS, beforeAnswer: () => new Promise((r) => setTimeout(r, 100)) })
    const responses = await Promise.all(Array.from({ length: 10 }, (_, i) =>
      (i % 2 === 0 ? gw : peer).call("POST", "/v1/responses", { key: u.endUserKey, body: bodies[i % 2] })))
    expect(responses.filter((r) => r.status !== 200).map((r) => [r.status, r.body.error.code])).toEqual(
      Array.from({ length: responses.length - 1 }, () => [402, "budget_exhausted"])
    )
    const served = responses.filter((r) => r.status === 200)
    // One first turn is admitted (the budget holds one reservation); once it is settled, what is
    // left holds none: no other request's turn ever runs, and the one served stops at its turn 2.
    expect(served).toHaveLength(1)
    expect(served[0]!.body).toMatchObject({ status: "incomplete", incomplete_details: { reason: "budget_exhausted" } })
    expect(upstream.calls).toBe(1)
    const budget = await budgetOf(u)
    expect(budget.used_usd).toBeLessThanOrEqual(budget.max_usd)
    expect(budget.used_usd).toBeCloseTo(turnCost(MAX_TOKENS) + TOOL_PRICE, 12)
    expect(budget.reserved_usd).toBe(0)
    const billed = await ledgerOf(u)
    expect(billed.types).toEqual(["mcp_tool", "response"])
    expect(billed.reconciled).toBe(true)
    expect(await reservationsOf(u.platformId)).toEqual([])
  })
})

describe("reserve mode: paid tool calls and capability runs count reservations", () => {
  const mcpCall = async (key: string) => {
    const client = new Client({ name: "test", version: "1.0.0" })
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}/mcp/github`), {
      requestInit: { headers: { Authorization: `Bearer ${key}` } }
    })
    await client.connect(transport)
    try {
      return await client.callTool({ name: "github_list_repos", arguments: {} })
    } finally {
      await transport.terminateSession()
      await client.close()
    }
  }

  /** A paid tool call while a chat call holds its reservation: refused with `code`, nothing debited or sent; paid once the chat settles. */
  const toolCallRefusedWhileHeld = async (u: User, code: string) => {
    const before = await ledgerOf(u)
    const sent = tools.requestsFor("github").length
    const held = await heldChat(u.endUserKey)
    try {
      expect((await reservationsOf(u.platformId)).length).toBe(1)
      const refused = await mcpCall(u.endUserKey)
      expect(refused.isError).toBe(true)
      expect(JSON.stringify(refused.content)).toContain(code)
      expect(tools.requestsFor("github").length).toBe(sent)
      // Nothing of the refused call is written (the chat call is still in flight).
      expect(await ledgerOf(u)).toEqual(before)
    } finally {
      held.release()
    }
    ok(await held.answer)
    const paid = await mcpCall(u.endUserKey)
    expect(paid.isError ?? false).toBe(false)
    const after = await ledgerOf(u)
    expect(after.types).toEqual(["chat.completion", "mcp_tool"])
    expect(after.within).toBe(true)
    expect(after.wallet).toBeGreaterThanOrEqual(0)
    expect(after.reconciled).toBe(true)
    expect(await reservationsOf(u.platformId)).toEqual([])
  }

  it("a paid tool call is refused when a reservation leaves the budget less than its price", async () => {
    // The chat call reserves just over 0.1 USD of 0.1005: under 0.001 left, more than 0.
    await toolCallRefusedWhileHeld(await user({ budgetUsd: 0.1005 }), "budget_exhausted")
  })

  it("a paid tool call is refused when a reservation leaves the wallet less than its price", async () => {
    await toolCallRefusedWhileHeld(await user({ walletUsd: 0.1005, budgetUsd: 5 }), "wallet_insufficient")
  })

  /** A capability run while a chat call holds its reservation: 402 `code`, provider not called, nothing debited; billed once the chat settles. */
  const runRefusedWhileHeld = async (u: User, code: string) => {
    const run = () => gw.call("POST", "/v1/capabilities/run", { key: u.endUserKey, body: { capability: capabilityUid, input: {} } })
    const before = await ledgerOf(u)
    const calls = capability.calls.length
    const held = await heldChat(u.endUserKey)
    try {
      const refused = await run()
      expect({ status: refused.status, code: refused.body?.error?.code }).toEqual({ status: 402, code })
      expect(capability.calls.length).toBe(calls)
      expect(await ledgerOf(u)).toEqual(before)
    } finally {
      held.release()
    }
    ok(await held.answer)
    expect(ok(await run()).body).toMatchObject({ final_state: "billed", cost_usd: 0.02 })
    const after = await ledgerOf(u)
    expect(after.types).toEqual(["capability", "chat.completion"])
    expect(after.open).toBe(0)
    expect(after.within).toBe(true)
    expect(after.reconciled).toBe(true)
  }

  it("a capability run is refused when a reservation leaves the budget less than its hold", async () => {
    // The chat call reserves just over 0.1 USD of 0.12: under the 0.03 hold left.
    await runRefusedWhileHeld(await user({ budgetUsd: 0.12 }), "budget_exhausted")
  })

  it("a capability run is refused when a reservation leaves the wallet less than its hold", async () => {
    await runRefusedWhileHeld(await user({ walletUsd: 0.12, budgetUsd: 5 }), "wallet_insufficient")
  })
})

// Key scopes on the tool service: `tools` or `inference` (the default) is needed for every keyed
// endpoint of {mcp_url} and for hosted tool-app calls in /v1/responses; a key with neither gets
// 403 insufficient_scope and nothing is written, sent to a provider or metered.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { type FakeToolApis, startFakeToolApis, toolAppEnv } from "./fakes/FakeToolApis.js"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, type Gateway, provisionOpenAiModel, startGateway } from "./support/Gateway.js"

let gw: Gateway
let landing: OAuthLanding
let fake: FakeToolApis
let model: FakeUpstream
let platform: { readonly platformId: string; readonly platformKey: string }

beforeAll(async () => {
  ;[landing, fake, model] = await Promise.all([startOAuthLanding(), startFakeToolApis(), startFakeOpenAi()])
  // Every tool call is past the free tier: a metered call would leave a log row and a debit.
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_FREE_TOOL_CALLS: "0", ...toolAppEnv(fake) } })
  platform = await provisionOpenAiModel(gw, model.url, { provider: "scope-oa", model: "scope-model" }, 5)
  const res = await gw.call("POST", `/v1/platforms/${platform.platformId}/mcp/apps`, {
    key: platform.platformKey,
    body: { app_slug: "github", client_id: "client-github", client_secret: "secret-github", base_url: landing.url }
  })
  expect(res.status).toBe(201)
})
afterAll(async () => {
  await gw?.close()
  await Promise.all([landing?.close(), fake?.close(), model?.close()])
})

const tools = (method: string, path: string, key: string, init: RequestInit = {}) =>
  fetch(`${gw.toolsUrl}${path}`, {
    method,
    redirect: "manual",
    ...init,
    headers: { authorization: `Bearer ${key}`, ...(init.headers as Record<string, string> | undefined) }
  })

/** Another key of the same end user; `scopes` undefined means the creation default. */
const keyWith = async (endUserId: string, scopes: ReadonlyArray<string> | undefined) => {
  const res = await gw.call("POST", `/v1/platforms/${platform.platformId}/api-keys`, {
    key: platform.platformKey,
    body: { end_user_id: endUserId, name: "scoped", ...(scopes === undefined ? {} : { scopes }) }
  })
  expect(res.status).toBe(201)
  return { key: res.body.raw_key as string, scopes: res.body.scopes as ReadonlyArray<string> }
}

/** The browser's part of the OAuth flow with this key; the landing URL's status. */
const connect = async (key: string) => {
  const start = await tools("GET", "/oauth/authorize?app=github", key)
  expect(start.status).toBe(302)
  const consent = await fetch(start.headers.get("location")!, { redirect: "manual" })
  const back = await fetch(consent.headers.get("location")!, { redirect: "manual" })
  return new URL(back.headers.get("location")!).searchParams.get("status")
}

const sdkClient = async (key: string, path = "/mcp/github") => {
  const client = new Client({ name: "scopes", version: "1.0.0" })
  const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}${path}`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
  })
  await client.connect(transport)
  return { client, transport, end: async () => { await transport.terminateSession(); await client.close() } }
}

const mcpHeaders = { "content-type": "application/json", accept: "application/json, text/event-stream" }
const initBody = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "raw", version: "1" } }
}
const callBody = { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "github_list_repos", arguments: {} } }

const expectInsufficientScope = async (res: Response) => {
  expect(res.status).toBe(403)
  expect(res.headers.get("location")).toBeNull()
  expect(await res.json()).toEqual({
    error: { message: expect.stringContaining("tools scope"), type: "permission_error", code: "insufficient_scope", param: null }
  })
}

/** What a tool-service call could have changed for this user. */
const footprint = async (endUserId: string) => {
  const q = async (text: string) => (await gw.db.pool.query(text, [endUserId])).rows
  return {
    states: await q("SELECT count(*)::int AS n FROM oauth_states WHERE end_user_id = $1"),
    connections: await q("SELECT id, is_active FROM tool_connections WHERE end_user_id = $1 ORDER BY id"),
    logs: await q("SELECT count(*)::int AS n FROM inference_logs WHERE end_user_id = $1"),
    counter: (await gw.db.pool.query("SELECT count::int FROM tool_call_counters WHERE platform_id = $1", [platform.platformId])).rows,
    providerCalls: fake.requestsFor("github").filter((r) => !r.path.startsWith("/oauth")).length,
    modelCalls: model.requests.length
  }
}

describe("the tools scope", () => {
  it("a key with neither tools nor inference gets 403 insufficient_scope everywhere, and nothing is written or metered", async () => {
    const eu = await createEndUser(gw, platform.platformId, platform.platformKey, "no-scope")
    expect(await connect(eu.endUserKey)).toBe("connected") // the default key connects github
    const session = await sdkClient(eu.endUserKey)
    const sessionId = session.transport.sessionId!
    try {
      for (const scopes of [[], ["read"]]) {
        const { key } = await keyWith(eu.endUserId, scopes)
        const before = await footprint(eu.endUserId)

        await expectInsufficientScope(await tools("GET", "/oauth/authorize?app=github&nonce=n1", key))
        await expectInsufficientScope(await tools("GET", "/connections", key))
        await expectInsufficientScope(await tools("DELETE", "/connections/github", key))
        await expectInsufficientScope(await tools("GET", "/apps", key))
        for (const path of ["/mcp/github", "/mcp"]) {
          await expectInsufficientScope(await tools("POST", path, key, { headers: mcpHeaders, body: JSON.stringify(initBody) }))
        }
        // A tool call, even naming a live session of the same user: refused before the session is looked up.
        await expectInsufficientScope(await tools("POST", "/mcp/github", key, {
          headers: { ...mcpHeaders, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-03-26" },
          body: JSON.stringify(callBody)
        }))
        // The SDK client sees the status in a StreamableHTTPError.
        const refused = await sdkClient(key).then(() => undefined, (e: unknown) => e)
        expect(refused).toBeInstanceOf(StreamableHTTPError)
        expect((refused as StreamableHTTPError).code).toBe(403)
        expect((refused as StreamableHTTPError).message).toContain("insufficient_scope")
        // Hosted tool-app calls in /v1/responses: the tool item's key needs the scope too.
        const hosted = await gw.call("POST", "/v1/responses", {
          key: eu.endUserKey,
          body: {
            model: "scope-model",
            input: "list my repos",
            tools: [{ type: "mcp", server_label: "github", server_url: `${gw.toolsUrl}/mcp/github`, authorization: `Bearer ${key}`, require_approval: "never" }]
          }
        })
        expect(hosted.status).toBe(403)
        expect(hosted.body.error.code).toBe("insufficient_scope")

        expect(await footprint(eu.endUserId)).toEqual(before)
      }
      // The connection survived the refused DELETE, and the default key's session still works.
      const call = await session.client.callTool({ name: "github_list_repos", arguments: {} })
      expect(call.isError ?? false).toBe(false)
    } finally {
      await session.end()
    }
  })

  it("a key with only the tools scope uses tool apps (metered) but not inference; a default key keeps both", async () => {
    const eu = await createEndUser(gw, platform.platformId, platform.platformKey, "tools-only")
    const toolsOnly = await keyWith(eu.endUserId, ["tools"])
    const byDefault = await keyWith(eu.endUserId, undefined)
    expect(byDefault.scopes).toEqual(["inference"])

    expect(await connect(toolsOnly.key)).toBe("connected")
    expect((await tools("GET", "/connections", toolsOnly.key)).status).toBe(200)
    expect((await tools("GET", "/apps", toolsOnly.key)).status).toBe(200)
    const before = await footprint(eu.endUserId)
    for (const key of [toolsOnly.key, byDefault.key]) {
      const session = await sdkClient(key)
      try {
        expect((await session.client.callTool({ name: "github_list_repos", arguments: {} })).isError ?? false).toBe(false)
      } finally {
        await session.end()
      }
    }
    const after = await footprint(eu.endUserId)
    expect(after.providerCalls - before.providerCalls).toBe(2)
    expect(after.logs[0].n - before.logs[0].n).toBe(2) // both calls metered (no free tier here)

    const chat = (key: string) =>
      gw.call("POST", "/v1/chat/completions", { key, body: { model: "scope-model", messages: [{ role: "user", content: "hi" }] } })
    const refused = await chat(toolsOnly.key)
    expect(refused.status).toBe(403)
    expect(refused.body.error.code).toBe("insufficient_scope")
    expect((await chat(byDefault.key)).status).toBe(200)
  })
})

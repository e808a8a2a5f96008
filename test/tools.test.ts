// Tool service end to end: app activation, mcp-config, the OAuth round trip through a fake
// provider and a fake landing page, /apps and /connections, MCP with the SDK client, metering.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeApp, type FakeToolApis, startFakeToolApis, toolAppEnv } from "./fakes/FakeToolApis.js"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let landing: OAuthLanding
let fake: FakeToolApis
const apps: ReadonlyArray<FakeApp> = ["github", "slack", "gmail", "zendesk"]

beforeAll(async () => {
  landing = await startOAuthLanding()
  fake = await startFakeToolApis()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_FREE_TOOL_CALLS: "3", ...toolAppEnv(fake) } })
})
afterAll(async () => {
  await gw?.close()
  await landing?.close()
  await fake?.close()
})

const tools = (method: string, path: string, key: string | undefined, init: RequestInit = {}) =>
  fetch(`${gw.toolsUrl}${path}`, {
    method,
    redirect: "manual",
    ...init,
    headers: { ...(key === undefined ? {} : { authorization: `Bearer ${key}` }), ...(init.headers as Record<string, string> | undefined) }
  })

const activate = (platformId: string, platformKey: string, app: string, extra: Record<string, unknown> = {}) =>
  gw.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
    key: platformKey,
    body: { app_slug: app, client_id: `client-${app}`, client_secret: `secret-${app}`, base_url: landing.url, ...extra }
  })

const mcpClient = async (key: string, app: string) => {
  const client = new Client({ name: "test", version: "1.0.0" })
  const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}/mcp/${app}`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
  })
  await client.connect(transport)
  return { client, transport }
}

describe("activation and mcp-config", () => {
  it("activates an app: 201, no secret echoed, secret sealed at rest, re-POST updates", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const res = await activate(platformId, platformKey, "github")
    expect(res.status).toBe(201)
    expect(Object.keys(res.body).sort()).toEqual(["app_slug", "created_at", "is_active"])
    expect(res.body).toMatchObject({ app_slug: "github", is_active: true })
    const row = await gw.db.pool.query("SELECT client_id, client_secret_encrypted FROM platform_tool_apps WHERE platform_id = $1", [platformId])
    expect(row.rows[0].client_id).toBe("client-github")
    expect(row.rows[0].client_secret_encrypted).not.toContain("secret-github")
    const again = await activate(platformId, platformKey, "github", { client_id: "client-2" })
    expect(again.status).toBe(201)
    expect(again.body.created_at).toBe(res.body.created_at)
    const row2 = await gw.db.pool.query("SELECT client_id FROM platform_tool_apps WHERE platform_id = $1", [platformId])
    expect(row2.rows).toEqual([{ client_id: "client-2" }])
  })

  it("refuses bad bodies, end-user keys and other tenants", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const other = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "u")
    expect((await activate(platformId, platformKey, "jira")).status).toBe(422)
    expect((await activate(platformId, platformKey, "github", { base_url: "ftp://x" })).body.error.param).toBe("base_url")
    expect((await activate(platformId, platformKey, "github", { extra: 1 })).status).toBe(422)
    const forbidden = await activate(platformId, eu.endUserKey, "github")
    expect(forbidden.status).toBe(403)
    expect(forbidden.body.error.code).toBe("forbidden")
    expect((await activate(platformId, other.platformKey, "github")).status).toBe(404)
  })

  it("mcp-config lists the platform's active apps with the caller's own key", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "u")
    await activate(platformId, platformKey, "slack")
    await activate(platformId, platformKey, "github")
    const res = await gw.call("GET", "/v1/me/mcp-config", { key: eu.endUserKey })
    expect(res.status).toBe(200)
    const auth = `Bearer ${eu.endUserKey}`
    expect(res.body).toEqual({
      standard: {
        github: { transport: "streamable_http", url: `${gw.toolsUrl}/mcp/github`, headers: { Authorization: auth } },
        slack: { transport: "streamable_http", url: `${gw.toolsUrl}/mcp/slack`, headers: { Authorization: auth } }
      },
      openai: [
        { type: "mcp", server_label: "github", server_url: `${gw.toolsUrl}/mcp/github`, authorization: auth },
        { type: "mcp", server_label: "slack", server_url: `${gw.toolsUrl}/mcp/slack`, authorization: auth }
      ]
    })
    expect((await gw.call("GET", "/v1/me/mcp-config", { key: platformKey })).status).toBe(403)
  })
})

describe("MCP sessions", () => {
  it("initialize gives a session id; tools/list counts; no connection -> isError", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "u")
    for (const app of ["github", "slack", "gmail", "zendesk"]) await activate(platformId, platformKey, app)
    const counts: Record<string, number> = {}
    for (const app of ["github", "slack", "gmail", "zendesk"]) {
      const { client, transport } = await mcpClient(eu.endUserKey, app)
      expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/)
      const list = await client.listTools()
      counts[app] = list.tools.length
      for (const t of list.tools) expect(t.name.startsWith(`${app}_`)).toBe(true)
      const first = list.tools[0]!
      const result = await client.callTool({ name: first.name, arguments: {} })
      expect(result.isError).toBe(true)
      expect(JSON.stringify(result.content)).toContain(`/oauth/authorize?app=${app}`)
      await transport.terminateSession()
      await client.close()
    }
    expect(counts).toEqual({ github: 10, slack: 10, gmail: 2, zendesk: 10 })
  })
})

const initBody = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "raw", version: "1" } }
}
const mcpHeaders = { "content-type": "application/json", accept: "application/json, text/event-stream" }
const listBody = { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} }

const rawInit = async (key: string, app: string, baseUrl = gw.toolsUrl) => {
  const res = await fetch(`${baseUrl}/mcp/${app}`, {
    method: "POST",
    headers: { ...mcpHeaders, authorization: `Bearer ${key}` },
    body: JSON.stringify(initBody)
  })
  await res.text()
  return { status: res.status, sessionId: res.headers.get("mcp-session-id") }
}

const rawList = (key: string, app: string, sessionId: string, baseUrl = gw.toolsUrl) =>
  fetch(`${baseUrl}/mcp/${app}`, {
    method: "POST",
    headers: { ...mcpHeaders, authorization: `Bearer ${key}`, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-03-26" },
    body: JSON.stringify(listBody)
  })

describe("tool service access", () => {
  it("end-user keys only; sessions are bound to their key; unknown sessions and inactive apps are 404", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "u")
    await activate(platformId, platformKey, "github")
    const second = await gw.call("POST", `/v1/platforms/${platformId}/api-keys`, {
      key: platformKey,
      body: { name: "second", end_user_id: eu.endUserId }
    })
    expect(second.status).toBe(201)
    const otherKey: string = second.body.raw_key

    const missing = await tools("GET", "/apps", undefined)
    expect(missing.status).toBe(401)
    expect((await missing.json()).error.code).toBe("missing_api_key")
    const plat = await tools("GET", "/apps", platformKey)
    expect(plat.status).toBe(403)
    expect(await plat.json()).toMatchObject({ error: { code: "forbidden", type: "permission_error" } })
    expect((await tools("POST", "/mcp/github", platformKey, { body: JSON.stringify(initBody), headers: mcpHeaders })).status).toBe(403)
    expect((await tools("GET", "/nope", eu.endUserKey)).status).toBe(404)

    const { status, sessionId } = await rawInit(eu.endUserKey, "github")
    expect(status).toBe(200)
    expect(sessionId).not.toBeNull()
    expect((await rawList(eu.endUserKey, "github", sessionId!)).status).toBe(200)
    // Same user, another key: the session is not theirs.
    const stolen = await rawList(otherKey, "github", sessionId!)
    expect(stolen.status).toBe(404)
    expect(await stolen.json()).toMatchObject({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" } })
    const unknown = await rawList(eu.endUserKey, "github", "7d6a3c34-0000-4000-8000-000000000000")
    expect(unknown.status).toBe(404)
    // An app not active on the platform.
    const inactive = await rawInit(eu.endUserKey, "slack")
    expect(inactive.status).toBe(404)
    expect((await rawInit(eu.endUserKey, "jira")).status).toBe(404)
  })

  it("/apps, /connections and DELETE with no connection", async () => {
    const { platformId, platformKey } = await createPlatform(gw)
    const eu = await createEndUser(gw, platformId, platformKey, "u")
    await activate(platformId, platformKey, "gmail")
    await activate(platformId, platformKey, "zendesk")
    const apps = await tools("GET", "/apps", eu.endUserKey)
    expect(await apps.json()).toEqual({
      data: [
        { slug: "gmail", name: expect.any(String), tool_count: 2, connected: false },
        { slug: "zendesk", name: expect.any(String), tool_count: 10, connected: false }
      ]
    })
    expect(await (await tools("GET", "/connections", eu.endUserKey)).json()).toEqual({ data: [] })
    const del = await tools("DELETE", "/connections/gmail", eu.endUserKey)
    expect(del.status).toBe(404)
    const authorize = await tools("GET", "/oauth/authorize?app=github", eu.endUserKey)
    expect(authorize.status).toBe(404)
    expect((await tools("GET", "/oauth/authorize", eu.endUserKey)).status).toBe(422)
  })

  it("a forged OAuth state is refused without a redirect", async () => {
    const forged = await tools("GET", "/oauth/callback?code=abc&state=7d6a3c34-0000-4000-8000-000000000000.AAAA", undefined)
    expect(forged.status).toBe(400)
    expect(forged.headers.get("location")).toBeNull()
    expect((await tools("GET", "/oauth/callback?code=abc", undefined)).status).toBe(400)
  })

  it("sessions expire after GATEWAY_MCP_SESSION_TTL", async () => {
    const short = await startGateway({ db: gw.db, env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_MCP_SESSION_TTL: "1s" } })
    try {
      const { platformId, platformKey } = await createPlatform(short)
      const eu = await createEndUser(short, platformId, platformKey, "u")
      await short.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
        key: platformKey,
        body: { app_slug: "github", client_id: "c", client_secret: "s", base_url: landing.url }
      })
      const { sessionId } = await rawInit(eu.endUserKey, "github", short.toolsUrl)
      expect((await rawList(eu.endUserKey, "github", sessionId!, short.toolsUrl)).status).toBe(200)
      await new Promise((r) => setTimeout(r, 1200))
      // The lifetime is the session's, wherever the next request lands.
      for (const url of [short.toolsUrl, gw.toolsUrl]) {
        const expired = await rawList(eu.endUserKey, "github", sessionId!, url)
        expect(expired.status).toBe(404)
        expect((await expired.json()).error.message).toBe("Session not found")
      }
    } finally {
      await short.close()
    }
  })
})

/** One sample call per app that the fake answers with data. */
const sample: Record<FakeApp, { readonly name: string; readonly args: Record<string, unknown> }> = {
  github: { name: "github_list_repos", args: {} },
  slack: { name: "slack_list_channels", args: {} },
  gmail: { name: "gmail_search_emails", args: { query: "in:inbox" } },
  zendesk: { name: "zendesk_list_tickets", args: {} }
}

/** The browser's part of the OAuth flow: gateway authorize -> provider consent -> callback -> landing. */
const connect = async (key: string, app: string, nonce?: string) => {
  const start = await tools("GET", `/oauth/authorize?app=${app}${nonce === undefined ? "" : `&nonce=${nonce}`}`, key)
  expect(start.status).toBe(302)
  const authorizeUrl = new URL(start.headers.get("location")!)
  const consent = await fetch(authorizeUrl, { redirect: "manual" })
  expect(consent.status).toBe(302)
  const callbackUrl = consent.headers.get("location")!
  const back = await fetch(callbackUrl, { redirect: "manual" })
  expect(back.status).toBe(302)
  const landingUrl = new URL(back.headers.get("location")!)
  expect((await fetch(landingUrl)).status).toBe(200)
  return { authorizeUrl, callbackUrl, landingUrl }
}

const tenantWithApps = async (externalId = "u") => {
  const { platformId, platformKey } = await createPlatform(gw)
  const eu = await createEndUser(gw, platformId, platformKey, externalId)
  for (const app of apps) expect((await activate(platformId, platformKey, app)).status).toBe(201)
  return { platformId, platformKey, ...eu }
}

const callOnce = async (key: string, app: FakeApp, name = sample[app].name, args = sample[app].args) => {
  const { client, transport } = await mcpClient(key, app)
  try {
    return await client.callTool({ name, arguments: args })
  } finally {
    await transport.terminateSession()
    await client.close()
  }
}

const resultText = (result: any): string => JSON.stringify(result.content)

const topup = (platformId: string, amount: number) =>
  gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: amount } })

describe("OAuth round trip and tool calls", () => {
  it("connects every app, stores sealed tokens, runs a tool per app against the provider", async () => {
    const t = await tenantWithApps()
    // The fourth call is past the free tier: paid.
    await topup(t.platformId, 1)
    for (const app of apps) {
      const before = landing.visits.length
      const { authorizeUrl, callbackUrl, landingUrl } = await connect(t.endUserKey, app)
      expect(authorizeUrl.searchParams.get("client_id")).toBe(`client-${app}`)
      expect(authorizeUrl.searchParams.get("redirect_uri")).toBe(`${gw.toolsUrl}/oauth/callback`)
      if (app === "github" || app === "gmail") expect(authorizeUrl.searchParams.get("code_challenge_method")).toBe("S256")
      expect(`${landingUrl.origin}${landingUrl.pathname}`).toBe(`${landing.url}/mcp/oauth-callback`)
      expect(landing.visits.slice(before)).toEqual([{ app, status: "connected", error: null, error_description: null, nonce: null }])

      // The tokens at rest are sealed.
      const issued = fake.issuedTokens(app).at(-1)!
      const row = await gw.db.pool.query(
        "SELECT access_token_encrypted, refresh_token_encrypted FROM tool_connections WHERE end_user_id = $1 AND app_slug = $2 AND is_active",
        [t.endUserId, app]
      )
      expect(row.rows).toHaveLength(1)
      expect(row.rows[0].access_token_encrypted).not.toContain(issued)
      expect(row.rows[0].access_token_encrypted.startsWith("v1.")).toBe(true)

      // The same state (and code) again: refused, told on the landing page.
      const replay = await fetch(callbackUrl, { redirect: "manual" })
      expect(replay.status).toBe(302)
      const replayed = new URL(replay.headers.get("location")!)
      expect(replayed.searchParams.get("status")).toBe("error")
      expect(replayed.searchParams.get("error")).toBe("invalid_state")

      const seen = fake.requestsFor(app).length
      const result = await callOnce(t.endUserKey, app)
      expect(result.isError ?? false).toBe(false)
      expect(resultText(result).length).toBeGreaterThan(10)
      const call = fake.requestsFor(app).slice(seen).find((r) => !r.path.startsWith("/oauth"))!
      expect(call.headers.authorization).toBe(`Bearer ${issued}`)
    }
    const listed = await (await tools("GET", "/apps", t.endUserKey)).json()
    expect(listed.data.map((a: any) => [a.slug, a.tool_count, a.connected])).toEqual([
      ["github", 10, true],
      ["slack", 10, true],
      ["gmail", 2, true],
      ["zendesk", 10, true]
    ])
    const connections = await (await tools("GET", "/connections", t.endUserKey)).json()
    expect(connections.data.map((c: any) => c.appSlug)).toEqual([...apps])
    for (const c of connections.data) expect(Object.keys(c).sort()).toEqual(["appSlug", "createdAt", "id"])
    expect(JSON.stringify(connections)).not.toContain("token")

    // Disconnect: 204, then the app is not connected any more.
    expect((await tools("DELETE", "/connections/slack", t.endUserKey)).status).toBe(204)
    expect((await tools("DELETE", "/connections/slack", t.endUserKey)).status).toBe(404)
    const after = await callOnce(t.endUserKey, "slack")
    expect(after.isError).toBe(true)
    expect(resultText(after)).toContain("/oauth/authorize?app=slack")
    const wiped = await gw.db.pool.query("SELECT access_token_encrypted FROM tool_connections WHERE end_user_id = $1 AND app_slug = 'slack'", [t.endUserId])
    expect(wiped.rows).toEqual([{ access_token_encrypted: null }])
  })

  it("a reconnect replaces the connection; a provider denial lands with status=error", async () => {
    const t = await tenantWithApps()
    await connect(t.endUserKey, "zendesk")
    await connect(t.endUserKey, "zendesk")
    const rows = await gw.db.pool.query("SELECT is_active FROM tool_connections WHERE end_user_id = $1 ORDER BY created_at", [t.endUserId])
    expect(rows.rows.map((r) => r.is_active)).toEqual([false, true])
    fake.denyNextAuthorize("gmail")
    const before = landing.visits.length
    await connect(t.endUserKey, "gmail")
    expect(landing.visits.slice(before)).toEqual([
      { app: "gmail", status: "error", error: "access_denied", error_description: "The user denied access", nonce: null }
    ])
    const connections = await (await tools("GET", "/connections", t.endUserKey)).json()
    expect(connections.data.map((c: any) => c.appSlug)).toEqual(["zendesk"])
  })

  it("the platform's nonce rides in the signed state and comes back to the landing route, on success and on error", async () => {
    const t = await tenantWithApps()
    const before = landing.visits.length
    const { authorizeUrl, callbackUrl } = await connect(t.endUserKey, "github", "n0nce_ABC-123")
    expect(authorizeUrl.searchParams.get("state")).toContain(".n0nce_ABC-123.")
    // A replayed link lands as an error, with the same nonce.
    const replay = await fetch(callbackUrl, { redirect: "manual" })
    expect((await fetch(replay.headers.get("location")!)).status).toBe(200)
    fake.denyNextAuthorize("gmail")
    await connect(t.endUserKey, "gmail", "deny-1")
    // Without a nonce the landing gets none.
    await connect(t.endUserKey, "slack")
    expect(landing.visits.slice(before)).toEqual([
      { app: "github", status: "connected", error: null, error_description: null, nonce: "n0nce_ABC-123" },
      { app: "github", status: "error", error: "invalid_state", error_description: expect.any(String), nonce: "n0nce_ABC-123" },
      { app: "gmail", status: "error", error: "access_denied", error_description: "The user denied access", nonce: "deny-1" },
      { app: "slack", status: "connected", error: null, error_description: null, nonce: null }
    ])

    // The nonce is covered by the state's signature: swapping it makes the state a forgery.
    const start = await tools("GET", "/oauth/authorize?app=zendesk&nonce=mine", t.endUserKey)
    const consent = await fetch(start.headers.get("location")!, { redirect: "manual" })
    const swapped = new URL(consent.headers.get("location")!)
    swapped.searchParams.set("state", swapped.searchParams.get("state")!.replace(".mine.", ".theirs."))
    const forged = await fetch(swapped, { redirect: "manual" })
    expect(forged.status).toBe(400)
    expect(forged.headers.get("location")).toBeNull()
    const connections = await (await tools("GET", "/connections", t.endUserKey)).json()
    expect(connections.data.map((c: any) => c.appSlug)).toEqual(["github", "slack"])
  })

  it("a nonce with other characters or over 128 is 422 and starts nothing", async () => {
    const t = await tenantWithApps()
    const states = async () =>
      (await gw.db.pool.query("SELECT count(*)::int AS n FROM oauth_states WHERE end_user_id = $1", [t.endUserId])).rows[0].n
    for (const nonce of ["a.b", "a%20b", "%3Cx%3E", "caf%C3%A9", "", "x".repeat(129)]) {
      const res = await tools("GET", `/oauth/authorize?app=github&nonce=${nonce}`, t.endUserKey)
      expect(res.status, nonce).toBe(422)
      expect(res.headers.get("location")).toBeNull()
      expect((await res.json()).error).toMatchObject({ code: "validation_error", param: "nonce" })
    }
    expect(await states()).toBe(0)
    expect((await tools("GET", `/oauth/authorize?app=github&nonce=${"x".repeat(128)}`, t.endUserKey)).status).toBe(302)
    expect(await states()).toBe(1)
  })

  it("refreshes an expired token before the call", async () => {
    const t = await tenantWithApps()
    fake.setExpiresIn("zendesk", 1)
    try {
      await connect(t.endUserKey, "zendesk")
    } finally {
      fake.setExpiresIn("zendesk", null)
    }
    const first = fake.issuedTokens("zendesk").at(-1)!
    await new Promise((r) => setTimeout(r, 1100))
    const result = await callOnce(t.endUserKey, "zendesk")
    expect(result.isError ?? false).toBe(false)
    const refreshed = fake.issuedTokens("zendesk").at(-1)!
    expect(refreshed).not.toBe(first)
    const call = fake.requestsFor("zendesk").filter((r) => !r.path.startsWith("/oauth")).at(-1)!
    expect(call.headers.authorization).toBe(`Bearer ${refreshed}`)
    const row = await gw.db.pool.query("SELECT expires_at FROM tool_connections WHERE end_user_id = $1 AND is_active", [t.endUserId])
    expect(row.rows[0].expires_at).toBeNull()
  })

  it("a revoked grant marks the connection for re-auth; reconnecting fixes it", async () => {
    const t = await tenantWithApps()
    await connect(t.endUserKey, "github")
    fake.revoke("github")
    const result = await callOnce(t.endUserKey, "github")
    expect(result.isError).toBe(true)
    expect(resultText(result)).toContain("must be reconnected via /oauth/authorize?app=github")
    const row = await gw.db.pool.query("SELECT needs_reauth FROM tool_connections WHERE end_user_id = $1 AND is_active", [t.endUserId])
    expect(row.rows).toEqual([{ needs_reauth: true }])
    const listed = await (await tools("GET", "/apps", t.endUserKey)).json()
    expect(listed.data.find((a: any) => a.slug === "github").connected).toBe(false)
    await connect(t.endUserKey, "github")
    expect((await callOnce(t.endUserKey, "github")).isError ?? false).toBe(false)
  })
})

describe("metering", () => {
  const snapshot = async (platformId: string, endUserId: string) => {
    const logs = await gw.db.pool.query("SELECT * FROM inference_logs WHERE platform_id = $1 ORDER BY created_at", [platformId])
    const debits = await gw.db.pool.query(
      "SELECT amount_usd::text, reason, metadata, actor_type FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'",
      [platformId]
    )
    const budget = await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [endUserId])
    const wallet = await gw.db.pool.query("SELECT balance_usd::text FROM platform_wallets WHERE platform_id = $1", [platformId])
    const counter = await gw.db.pool.query("SELECT month::text, count::int FROM tool_call_counters WHERE platform_id = $1 ORDER BY month", [platformId])
    return { logs: logs.rows, debits: debits.rows, used: budget.rows[0]?.used_usd, wallet: wallet.rows[0]?.balance_usd, counter: counter.rows }
  }

  it("free calls write nothing; the next is debited and logged exactly; a new month resets", async () => {
    const t = await tenantWithApps()
    await gw.call("POST", `/v1/admin/platforms/${t.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
    expect((await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, {
      key: t.platformKey,
      body: { max_usd: 5 }
    })).status).toBe(201)
    await connect(t.endUserKey, "github")
    const { client, transport } = await mcpClient(t.endUserKey, "github")
    const start = await snapshot(t.platformId, t.endUserId)
    for (let i = 0; i < 3; i++) expect((await client.callTool({ name: "github_list_repos", arguments: {} })).isError ?? false).toBe(false)
    const free = await snapshot(t.platformId, t.endUserId)
    expect(free.logs).toEqual([])
    expect(free.debits).toEqual([])
    expect(free.wallet).toBe(start.wallet)
    expect(free.used).toBe(start.used)
    expect(free.counter).toHaveLength(1)
    expect(free.counter[0].count).toBe(3)
    // Calls that never reach the provider are not counted.
    expect((await client.callTool({ name: "github_no_such_tool", arguments: {} })).isError).toBe(true)

    const paid = await client.callTool({ name: "github_list_repos", arguments: {} })
    expect(paid.isError ?? false).toBe(false)
    const after = await snapshot(t.platformId, t.endUserId)
    expect(after.counter[0].count).toBe(4)
    expect(Number(after.wallet)).toBeCloseTo(Number(start.wallet) - 0.001, 10)
    expect(after.wallet).toBe("9.999")
    expect(Number(after.used)).toBe(0.001)
    expect(after.debits).toEqual([
      { amount_usd: "0.001", reason: "tool_call", metadata: { app: "github", tool: "list_repos" }, actor_type: "end_user_key" }
    ])
    expect(after.logs).toHaveLength(1)
    expect(after.logs[0]).toMatchObject({
      platform_id: t.platformId,
      end_user_id: t.endUserId,
      request_type: "mcp_tool",
      provider_id: null,
      model_id: null,
      model_slug: null,
      prompt_tokens: 0,
      completion_tokens: 0,
      total_tokens: 0,
      status: "success",
      error_message: null,
      token_count_method: "none",
      billing_status: "billed",
      metadata: { app_slug: "github", tool: "list_repos" }
    })
    expect(Number(after.logs[0].estimated_cost_usd)).toBe(0.001)
    // The logs endpoint shows it too, and the wallet's debit names its log row.
    const logs = await gw.call("GET", `/v1/platforms/${t.platformId}/logs`, { key: t.platformKey })
    expect(logs.body.data.map((l: any) => [l.request_type, l.estimated_cost_usd])).toEqual([["mcp_tool", "0.001"]])
    const walletRows = await gw.call("GET", `/v1/platforms/${t.platformId}/platform-wallet/transactions`, { key: t.platformKey })
    expect(walletRows.body.data.filter((r: any) => r.type === "debit").map((r: any) => r.log_id)).toEqual([after.logs[0].id])

    // A provider error past the free tier is charged and logged with status error.
    fake.failNext("github", 500)
    expect((await client.callTool({ name: "github_list_repos", arguments: {} })).isError).toBe(true)
    const failed = await snapshot(t.platformId, t.endUserId)
    expect(failed.logs.map((l) => l.status)).toEqual(["success", "error"])
    expect(failed.wallet).toBe("9.998")

    // New month: move this month's counter into the past; the next call is call 1 again.
    await gw.db.pool.query(
      "UPDATE tool_call_counters SET month = (month - interval '1 month')::date WHERE platform_id = $1",
      [t.platformId]
    )
    expect((await client.callTool({ name: "github_list_repos", arguments: {} })).isError ?? false).toBe(false)
    const reset = await snapshot(t.platformId, t.endUserId)
    expect(reset.counter.map((c) => c.count)).toEqual([5, 1])
    expect(reset.logs).toHaveLength(2)
    expect(reset.wallet).toBe("9.998")
    await transport.terminateSession()
    await client.close()
  })

  it("concurrent calls get distinct counter values: exactly the calls past the free tier are billed", async () => {
    const t = await tenantWithApps()
    await topup(t.platformId, 0.009)
    await connect(t.endUserKey, "zendesk")
    const clients = await Promise.all(Array.from({ length: 4 }, () => mcpClient(t.endUserKey, "zendesk")))
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => clients[i % 4]!.client.callTool({ name: "zendesk_list_tickets", arguments: {} }))
    )
    for (const r of results) expect(r.isError ?? false).toBe(false)
    const snap = await snapshot(t.platformId, t.endUserId)
    expect(snap.counter.map((c) => c.count)).toEqual([12])
    expect(snap.logs).toHaveLength(9)
    expect(Number(snap.wallet)).toBe(0)
    for (const c of clients) {
      await c.transport.terminateSession()
      await c.client.close()
    }
  })

  /** The free tier of a fresh tenant used up (GATEWAY_FREE_TOOL_CALLS is 3): the next call is paid. */
  const pastFreeTier = async (walletUsd: number | null, budgetUsd: number | null) => {
    const t = await tenantWithApps()
    if (walletUsd !== null) await topup(t.platformId, walletUsd)
    if (budgetUsd !== null) {
      expect((await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, {
        key: t.platformKey,
        body: { max_usd: budgetUsd }
      })).status).toBe(201)
    }
    await connect(t.endUserKey, "github")
    const mcp = await mcpClient(t.endUserKey, "github")
    for (let i = 0; i < 3; i++) expect((await mcp.client.callTool({ name: "github_list_repos", arguments: {} })).isError ?? false).toBe(false)
    const close = async () => {
      await mcp.transport.terminateSession()
      await mcp.client.close()
    }
    return { ...t, call: () => mcp.client.callTool({ name: "github_list_repos", arguments: {} }), close }
  }

  it("a paid call passes checks 3-5 first: an exhausted or suspended budget refuses it, nothing is written or sent", async () => {
    const t = await pastFreeTier(10, 0.001)
    const budgetPath = `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`
    // The budget covers one paid call.
    expect((await t.call()).isError ?? false).toBe(false)
    const paid = await snapshot(t.platformId, t.endUserId)
    expect(paid.used).toBe("0.001")
    expect(paid.wallet).toBe("9.999")
    const sent = fake.requestsFor("github").length

    const exhausted = await t.call()
    expect(exhausted.isError).toBe(true)
    expect(resultText(exhausted)).toContain("budget_exhausted")
    expect(await snapshot(t.platformId, t.endUserId)).toEqual(paid)

    expect((await gw.call("PATCH", budgetPath, { key: t.platformKey, body: { max_usd: 5, is_suspended: true } })).status).toBe(200)
    const suspended = await t.call()
    expect(suspended.isError).toBe(true)
    expect(resultText(suspended)).toContain("budget_suspended")
    const after = await snapshot(t.platformId, t.endUserId)
    expect({ ...after, debits: after.debits.length }).toEqual({ ...paid, debits: paid.debits.length })
    expect(fake.requestsFor("github").length).toBe(sent)

    // Lifted: paid again.
    expect((await gw.call("PATCH", budgetPath, { key: t.platformKey, body: { is_suspended: false } })).status).toBe(200)
    expect((await t.call()).isError ?? false).toBe(false)
    expect((await snapshot(t.platformId, t.endUserId)).wallet).toBe("9.998")
    await t.close()
  })

  it("a paid call the wallet cannot cover is refused: wallet_insufficient, nothing written or sent", async () => {
    for (const wallet of [null, 0.0005]) {
      const t = await pastFreeTier(wallet, null)
      const before = await snapshot(t.platformId, t.endUserId)
      const sent = fake.requestsFor("github").length
      const refused = await t.call()
      expect(refused.isError).toBe(true)
      expect(resultText(refused)).toContain("wallet_insufficient")
      expect(await snapshot(t.platformId, t.endUserId)).toEqual(before)
      expect(before.counter.map((c) => c.count)).toEqual([3])
      expect(fake.requestsFor("github").length).toBe(sent)
      await t.close()
    }
  })

  it("20 concurrent paid calls against a wallet covering 5: exactly 5 run, the wallet ends at exactly 0", async () => {
    const t = await pastFreeTier(0.005, null)
    const sent = fake.requestsFor("github").filter((r) => r.path === "/user/repos").length
    const clients = await Promise.all(Array.from({ length: 4 }, () => mcpClient(t.endUserKey, "github")))
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => clients[i % 4]!.client.callTool({ name: "github_list_repos", arguments: {} }))
    )
    const ok = results.filter((r) => !(r.isError ?? false))
    const refused = results.filter((r) => r.isError === true)
    expect(ok).toHaveLength(5)
    expect(refused).toHaveLength(15)
    for (const r of refused) expect(resultText(r)).toContain("wallet_insufficient")
    const snap = await snapshot(t.platformId, t.endUserId)
    expect(Number(snap.wallet)).toBe(0)
    expect(snap.logs).toHaveLength(5)
    expect(snap.counter.map((c) => c.count)).toEqual([8])
    expect(fake.requestsFor("github").filter((r) => r.path === "/user/repos").length - sent).toBe(5)
    // Every wallet ledger row chains, and none goes below zero.
    const { rows } = await gw.db.pool.query(
      "SELECT balance_before::text, balance_after::text FROM platform_wallet_transactions WHERE platform_id = $1 AND type = 'debit' ORDER BY balance_before DESC",
      [t.platformId]
    )
    expect(rows.map((r) => [Number(r.balance_before), Number(r.balance_after)])).toEqual([[0.005, 0.004], [0.004, 0.003], [0.003, 0.002], [0.002, 0.001], [0.001, 0]])
    for (const c of clients) {
      await c.transport.terminateSession()
      await c.client.close()
    }
    await t.close()
  })
})

describe("MCP sessions across instances", () => {
  it("a session opened on one instance is served by another: same key only; a DELETE on either ends it on both", async () => {
    const peer = await gw.startPeer()
    try {
      const t = await tenantWithApps()
      await connect(t.endUserKey, "github")
      // The SDK client initializes on this instance, then every later request goes to the peer.
      let target = gw.toolsUrl
      let sentToPeer = 0
      const client = new Client({ name: "fleet", version: "1.0.0" })
      const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}/mcp/github`), {
        requestInit: { headers: { Authorization: `Bearer ${t.endUserKey}` } },
        fetch: (url, init) => {
          if (target === peer.toolsUrl) sentToPeer++
          return fetch(String(url).replace(gw.toolsUrl, target), init)
        }
      })
      await client.connect(transport)
      target = peer.toolsUrl
      const sessionId = transport.sessionId!
      expect(sessionId).toMatch(/^[0-9a-f-]{36}$/)
      expect((await client.listTools()).tools).toHaveLength(10)
      const result = await client.callTool({ name: sample.github.name, arguments: sample.github.args })
      expect(result.isError ?? false).toBe(false)
      expect(resultText(result)).toContain("octo-org/widgets")
      expect(sentToPeer).toBeGreaterThanOrEqual(2) // tools/list and tools/call (the client may also try its GET stream there)

      // Another key of the same user is refused on either instance.
      const second = await gw.call("POST", `/v1/platforms/${t.platformId}/api-keys`, {
        key: t.platformKey,
        body: { name: "second", end_user_id: t.endUserId }
      })
      expect(second.status).toBe(201)
      for (const url of [peer.toolsUrl, gw.toolsUrl]) expect((await rawList(second.body.raw_key, "github", sessionId, url)).status).toBe(404)

      // The DELETE goes to the first instance; the peer no longer knows the session.
      const del = await fetch(`${gw.toolsUrl}/mcp/github`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${t.endUserKey}`, "mcp-session-id": sessionId }
      })
      expect(del.status).toBe(200)
      const gone = await rawList(t.endUserKey, "github", sessionId, peer.toolsUrl)
      expect(gone.status).toBe(404)
      expect(await gone.json()).toMatchObject({ error: { code: -32001, message: "Session not found" } })
      await expect(client.listTools()).rejects.toThrow()
      await client.close()
    } finally {
      await peer.close()
    }
  })
})

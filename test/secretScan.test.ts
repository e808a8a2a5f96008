// No secret ever reaches logs or spans: every log line (with its cause) and every span attribute
// captured while keys, provider keys, webhook secrets and a tool app's OAuth flow (code, tokens,
// refresh, revocation) are used and while errors are logged is scanned for the raw values.
import { NodeSdk } from "@effect/opentelemetry"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Cause, Layer, Logger } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { type FakeToolApis, startFakeToolApis, toolAppEnv } from "./fakes/FakeToolApis.js"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const lines: Array<string> = []
const capture = Logger.make(({ cause, message }) => {
  lines.push(`${JSON.stringify(message)} ${Cause.isEmpty(cause) ? "" : Cause.pretty(cause, { renderErrorCause: true })}`)
})
const spans = new InMemorySpanExporter()
let gw: Gateway
let upstream: FakeUpstream
let toolApis: FakeToolApis
let landing: OAuthLanding

let dir: string | undefined
beforeAll(async () => {
  upstream = await startFakeOpenAi()
  toolApis = await startFakeToolApis()
  landing = await startOAuthLanding()
  // A config file makes the gateway log at start, proving the capture sees the gateway's logs.
  dir = mkdtempSync(join(tmpdir(), "secret-scan-"))
  writeFileSync(join(dir, "gateway.json"), JSON.stringify({ providers: [], models: [] }))
  gw = await startGateway({
    env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_CONFIG: join(dir, "gateway.json"), ...toolAppEnv(toolApis) },
    tracing: Layer.mergeAll(
      Logger.replace(Logger.defaultLogger, capture),
      NodeSdk.layer(() => ({ resource: { serviceName: "secret-scan" }, spanProcessor: new SimpleSpanProcessor(spans) }))
    )
  })
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
  await toolApis?.close()
  await landing?.close()
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

/** Every captured log line and span (name, attributes, events) as one text. */
const captured = () =>
  [
    ...lines,
    ...spans.getFinishedSpans().map((s) => JSON.stringify({ name: s.name, attributes: s.attributes, events: s.events }))
  ].join("\n")

it("keys, provider keys and webhook secrets appear in no log line and no span", async () => {
  const providerKey = "sk-provider-SECRET-0123456789abcdef"
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "up", kind: "openai", base_url: upstream.url } })
  await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "m", providers: [{ provider: "up", provider_model_id: "x", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] } })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/up`, { key: platformKey, body: { api_key: providerKey } })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } })
  const eu = await createEndUser(gw, platformId, platformKey, "scanned")
  const hook = await gw.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, { key: platformKey, body: { url: "http://127.0.0.1:9/hook" } })
  const webhookSecret = hook.body.secret as string
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 1 } })
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget/topup`, { key: platformKey, body: { amount_usd: 1 } })

  // Successful and failing upstream calls, refused keys, malformed requests: all get logged or traced.
  expect((await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "m", messages: [{ role: "user", content: "hi" }] } })).status).toBe(200)
  expect(upstream.requests[0]!.headers.authorization).toBe(`Bearer ${providerKey}`) // it was really used
  upstream.setBehavior({ fail: { status: 500, times: 5, message: "boom" } })
  expect((await gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "m", messages: [{ role: "user", content: "hi" }] } })).status).toBe(502)
  upstream.setBehavior({ dropAfterChunks: 1, reply: "a b c" })
  await fetch(`${gw.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${eu.endUserKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] })
  }).then((r) => r.text())
  upstream.reset()
  await gw.call("GET", `/v1/platforms/${platformId}`, { key: `${eu.endUserKey}x` })
  await gw.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, rawBody: "{", headers: { "content-type": "application/json" } })
  // The webhook dispatcher fails against the closed port and logs its attempt.
  await new Promise((r) => setTimeout(r, 800))

  expect(lines.some((l) => l.includes("upstream dropped mid-stream"))).toBe(true) // request-time logs are seen
  const everything = captured()
  for (const secret of [gw.adminKey, platformKey, eu.endUserKey, providerKey, webhookSecret, webhookSecret.slice(6)]) {
    expect(everything.includes(secret), `secret ${secret.slice(0, 10)}... leaked`).toBe(false)
  }
})

it("OAuth client secrets, authorization codes, PKCE verifiers, access and refresh tokens appear in no log line and no span", async () => {
  const app = "zendesk" // PKCE, refresh tokens that rotate on every refresh
  const clientSecret = `oauth-client-SECRET-${randomBytes(12).toString("hex")}`
  toolApis.setClient(app, `client-${app}`, clientSecret)
  const { platformId, platformKey } = await createPlatform(gw)
  const eu = await createEndUser(gw, platformId, platformKey, "oauth-scanned")
  const activated = await gw.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
    key: platformKey,
    body: { app_slug: app, client_id: `client-${app}`, client_secret: clientSecret, base_url: landing.url }
  })
  expect(activated.status).toBe(201)

  const callTool = async () => {
    const client = new Client({ name: "secret-scan", version: "1.0.0" })
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}/mcp/${app}`), {
      requestInit: { headers: { Authorization: `Bearer ${eu.endUserKey}` } }
    })
    await client.connect(transport)
    try {
      return await client.callTool({ name: "zendesk_list_tickets", arguments: {} })
    } finally {
      await transport.terminateSession()
      await client.close()
    }
  }

  // The browser's part: gateway authorize -> provider consent -> gateway callback (code) -> landing.
  // Tokens expire after 1 s, so each later tool call refreshes first.
  let code = ""
  toolApis.setExpiresIn(app, 1)
  try {
    const start = await fetch(`${gw.toolsUrl}/oauth/authorize?app=${app}`, { redirect: "manual", headers: { authorization: `Bearer ${eu.endUserKey}` } })
    expect(start.status).toBe(302)
    const consent = await fetch(start.headers.get("location")!, { redirect: "manual" })
    expect(consent.status).toBe(302)
    const callbackUrl = consent.headers.get("location")!
    code = new URL(callbackUrl).searchParams.get("code")!
    const back = await fetch(callbackUrl, { redirect: "manual" })
    expect(back.status).toBe(302)
    expect(new URL(back.headers.get("location")!).searchParams.get("status")).toBe("connected")
    // The same code again (refused, and the refusal is logged or traced).
    expect(new URL((await fetch(callbackUrl, { redirect: "manual" })).headers.get("location")!).searchParams.get("error")).toBe("invalid_state")

    for (let i = 0; i < 2; i++) {
      await new Promise((r) => setTimeout(r, 1100))
      expect((await callTool()).isError ?? false).toBe(false)
    }
  } finally {
    toolApis.setExpiresIn(app, null)
  }
  // A revoked grant: the call fails with 401 at the provider and the connection needs re-auth.
  toolApis.revoke(app)
  expect((await callTool()).isError).toBe(true)

  // What was really exchanged, as the provider saw it.
  const tokenRequests = toolApis.requestsFor(app).filter((r) => r.path === "/oauth/token")
  const codeExchange = tokenRequests.find((r) => r.body?.grant_type === "authorization_code")!
  const refreshes = tokenRequests.filter((r) => r.body?.grant_type === "refresh_token")
  expect(code).toMatch(/^code-zendesk-/)
  expect(codeExchange.body.code).toBe(code)
  const codeVerifier = codeExchange.body.code_verifier as string
  expect(codeVerifier.length).toBeGreaterThanOrEqual(43)
  // At least the first refresh token and its rotation were really used (the revoked call may try a third).
  expect(refreshes.length).toBeGreaterThanOrEqual(2)
  const refreshTokens = refreshes.map((r) => r.body.refresh_token as string)
  const accessTokens = toolApis.issuedTokens(app)
  expect(accessTokens).toHaveLength(3) // the code exchange and two refreshes
  const used = toolApis.requestsFor(app).filter((r) => !r.path.startsWith("/oauth")).map((r) => r.headers.authorization)
  expect(used).toContain(`Bearer ${accessTokens[2]}`)

  // The flow was seen by the capture: the callback and the refreshes were traced.
  const names = spans.getFinishedSpans().map((s) => s.name)
  expect(names).toContain("ToolHost.callback")
  expect(names.filter((n) => n === "ToolHost.refresh").length).toBeGreaterThanOrEqual(2)
  // Each MCP tool call is a span of its own, named by app and tool (the refreshes run inside it).
  const toolCalls = spans.getFinishedSpans().filter((s) => s.name === "ToolHost.callTool")
  expect(toolCalls.length).toBeGreaterThanOrEqual(3)
  for (const s of toolCalls) expect(s.attributes).toMatchObject({ "tool.app": app, "tool.name": expect.stringContaining("list_tickets") })
  const refreshParents = new Set(spans.getFinishedSpans().filter((s) => s.name === "ToolHost.refresh").map((s) => s.parentSpanContext?.spanId))
  expect(toolCalls.some((s) => refreshParents.has(s.spanContext().spanId))).toBe(true)
  const everything = captured()
  for (const secret of [clientSecret, codeVerifier, ...accessTokens, ...refreshTokens]) {
    expect(everything.includes(secret), `secret ${secret.slice(0, 14)}... leaked`).toBe(false)
  }
  // The authorization code: in no log line and no span attribute, except the one known leak below.
  authorizationCode = code
  expect(lines.some((l) => l.includes(code)), "code in a log line").toBe(false)
  for (const s of spans.getFinishedSpans()) {
    for (const [name, value] of Object.entries(s.attributes)) {
      expect(String(value).includes(code), `code in span ${s.name} attribute ${name}`).toBe(false)
    }
    expect(JSON.stringify(s.events).includes(code), `code in span ${s.name} events`).toBe(false)
  }
})

let authorizationCode = ""
// The callback's server span would record the query (code included) in url.full / url.query;
// the handler overwrites both.
it("the OAuth authorization code appears in no span attribute at all", () => {
  expect(authorizationCode).toMatch(/^code-zendesk-/)
  expect(captured().includes(authorizationCode)).toBe(false)
})

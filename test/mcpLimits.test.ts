// MCP session caps end to end: GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM (429 on initialize) and
// GATEWAY_MCP_MAX_SESSIONS (503), as the MCP SDK client and a raw client see them; a DELETE and
// GATEWAY_MCP_SESSION_IDLE free slots.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway

beforeAll(async () => {
  gw = await startGateway({
    env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM: "2", GATEWAY_MCP_MAX_SESSIONS: "3" }
  })
})
afterAll(async () => {
  await gw?.close()
})

const tenant = async (on: Gateway = gw) => {
  const { platformId, platformKey } = await createPlatform(on)
  const eu = await createEndUser(on, platformId, platformKey, "u")
  const res = await on.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
    key: platformKey,
    body: { app_slug: "github", client_id: "c", client_secret: "s", base_url: "http://127.0.0.1:9" }
  })
  expect(res.status).toBe(201)
  return { platformId, ...eu }
}

const initBody = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "raw", version: "1" } }
}
const mcpHeaders = { "content-type": "application/json", accept: "application/json, text/event-stream" }

const rawInit = async (key: string, on: Gateway = gw, path = "/mcp/github") => {
  const res = await fetch(`${on.toolsUrl}${path}`, {
    method: "POST",
    headers: { ...mcpHeaders, authorization: `Bearer ${key}` },
    body: JSON.stringify(initBody)
  })
  const text = await res.text()
  return {
    status: res.status,
    sessionId: res.headers.get("mcp-session-id"),
    retryAfter: res.headers.get("retry-after"),
    body: res.status === 200 ? null : JSON.parse(text)
  }
}

const rawDelete = (key: string, sessionId: string, on: Gateway = gw, path = "/mcp/github") =>
  fetch(`${on.toolsUrl}${path}`, {
    method: "DELETE",
    headers: { authorization: `Bearer ${key}`, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-03-26" }
  })

const rawList = async (key: string, sessionId: string, on: Gateway = gw) => {
  const res = await fetch(`${on.toolsUrl}/mcp/github`, {
    method: "POST",
    headers: { ...mcpHeaders, authorization: `Bearer ${key}`, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-03-26" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} })
  })
  await res.text()
  return res.status
}

/** An SDK client session; `refused` is the StreamableHTTPError when connect fails. */
const sdkConnect = async (key: string, path = "/mcp/github") => {
  const client = new Client({ name: "limits", version: "1.0.0" })
  const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}${path}`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
  })
  try {
    await client.connect(transport)
    return { client, transport, refused: undefined }
  } catch (e) {
    await client.close()
    return { client, transport, refused: e as StreamableHTTPError }
  }
}

const endAll = async (sessions: ReadonlyArray<{ client: Client; transport: StreamableHTTPClientTransport }>) => {
  for (const s of sessions) {
    await s.transport.terminateSession()
    await s.client.close()
  }
}

describe("MCP session caps", () => {
  it("beyond the per-platform cap an initialize is 429 with retry-after, for the SDK client and raw; a DELETE frees a slot", async () => {
    const t = await tenant()
    const open = [await sdkConnect(t.endUserKey), await sdkConnect(t.endUserKey, "/mcp")]
    for (const s of open) expect(s.refused).toBeUndefined()
    try {
      const sdk = await sdkConnect(t.endUserKey)
      expect(sdk.refused).toBeInstanceOf(StreamableHTTPError)
      expect(sdk.refused!.code).toBe(429)
      expect(sdk.refused!.message).toContain("rate_limit_exceeded")

      const raw = await rawInit(t.endUserKey)
      expect(raw.status).toBe(429)
      expect(raw.sessionId).toBeNull()
      expect(Number(raw.retryAfter)).toBeGreaterThanOrEqual(1)
      expect(raw.body).toEqual({
        error: { message: expect.stringContaining("open MCP sessions"), type: "rate_limit_error", code: "rate_limit_exceeded", param: null }
      })
      // Another platform is not affected.
      const other = await tenant()
      const theirs = await rawInit(other.endUserKey)
      expect(theirs.status).toBe(200)
      expect((await rawDelete(other.endUserKey, theirs.sessionId!)).status).toBe(200)

      // Ending one session frees its slot.
      await open[0]!.transport.terminateSession()
      await open[0]!.client.close()
      const after = await rawInit(t.endUserKey)
      expect(after.status).toBe(200)
      expect((await rawDelete(t.endUserKey, after.sessionId!)).status).toBe(200)
    } finally {
      await endAll(open.slice(1))
    }
  })

  it("beyond the fleet cap (GATEWAY_MCP_MAX_SESSIONS) an initialize is 503 for every platform", async () => {
    const [a, b, c] = [await tenant(), await tenant(), await tenant()]
    const open = [await sdkConnect(a.endUserKey), await sdkConnect(a.endUserKey), await sdkConnect(b.endUserKey)]
    for (const s of open) expect(s.refused).toBeUndefined()
    try {
      const sdk = await sdkConnect(c.endUserKey)
      expect(sdk.refused).toBeInstanceOf(StreamableHTTPError)
      expect(sdk.refused!.code).toBe(503)
      expect(sdk.refused!.message).toContain("service_unavailable")
      const raw = await rawInit(c.endUserKey)
      expect(raw.status).toBe(503)
      expect(raw.body.error).toMatchObject({ type: "api_error", code: "service_unavailable", param: null })
      expect(Number(raw.retryAfter)).toBeGreaterThanOrEqual(1)
      // The platform under its own cap is refused by the fleet's.
      expect((await rawInit(b.endUserKey)).status).toBe(503)

      await open[2]!.transport.terminateSession()
      await open[2]!.client.close()
      const after = await rawInit(c.endUserKey)
      expect(after.status).toBe(200)
      expect((await rawDelete(c.endUserKey, after.sessionId!)).status).toBe(200)
    } finally {
      await endAll(open.slice(0, 2))
    }
  })

  it("an idle session is closed (GATEWAY_MCP_SESSION_IDLE) and its slot goes to the next initialize", async () => {
    const idle = await startGateway({
      db: gw.db,
      env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM: "1", GATEWAY_MCP_SESSION_IDLE: "1s" }
    })
    try {
      const t = await tenant(idle)
      const first = await rawInit(t.endUserKey, idle)
      expect(first.status).toBe(200)
      expect((await rawInit(t.endUserKey, idle)).status).toBe(429)
      // Wait for the state change (no request for the idle time), not for a clock reading.
      let next = await rawInit(t.endUserKey, idle)
      for (let tries = 0; next.status === 429 && tries < 50; tries++) {
        await new Promise((r) => setTimeout(r, 200))
        next = await rawInit(t.endUserKey, idle)
      }
      expect(next.status).toBe(200)
      // Idle on every instance (the other one was started with a longer idle time).
      expect(await rawList(t.endUserKey, first.sessionId!, gw)).toBe(404)
      expect(await rawList(t.endUserKey, first.sessionId!, idle)).toBe(404)
      expect(await rawList(t.endUserKey, next.sessionId!, idle)).toBe(200)
    } finally {
      await idle.close()
    }
  })
})

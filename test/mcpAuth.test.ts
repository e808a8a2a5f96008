// MCP authorization (MCP 2025-06-18 "Authorization", RFC 9728, RFC 6750) on the tool service:
// refusals carry a Bearer challenge naming the protected-resource metadata, the metadata says
// the bearer goes in the header (an end-user key; no authorization server), and the MCP SDK
// client finds both the way MCP clients do; with the key it connects and sees the server's name.
import { discoverOAuthProtectedResourceMetadata, extractWWWAuthenticateParams } from "@modelcontextprotocol/sdk/client/auth.js"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let landing: OAuthLanding
let tenant: { readonly platformId: string; readonly platformKey: string; readonly endUserId: string; readonly endUserKey: string }

beforeAll(async () => {
  landing = await startOAuthLanding()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true" } })
  const { platformId, platformKey } = await createPlatform(gw, { name: "Auth", skills_enabled: true })
  tenant = { platformId, platformKey, ...(await createEndUser(gw, platformId, platformKey, "mcp-auth-user")) }
  const res = await gw.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
    key: platformKey,
    body: { app_slug: "github", client_id: "client-github", client_secret: "secret-github", base_url: landing.url }
  })
  expect(res.status).toBe(201)
})
afterAll(async () => {
  await gw?.close()
  await landing?.close()
})

const metadataUrl = (resourcePath: string, toolsUrl = gw.toolsUrl) => `${toolsUrl}/.well-known/oauth-protected-resource${resourcePath}`

/** A raw `initialize`, as an MCP client's first request. */
const initialize = (path: string, authorization: string | undefined) =>
  fetch(`${gw.toolsUrl}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(authorization === undefined ? {} : { authorization })
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } }
    })
  })

const sdkClient = (path: string, key: string | undefined) => {
  const client = new Client({ name: "mcp-auth", version: "1.0.0" })
  const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}${path}`), {
    requestInit: { headers: key === undefined ? {} : { Authorization: `Bearer ${key}` } }
  })
  return { client, transport }
}

describe("the Bearer challenge", () => {
  it("a request without a key: 401 naming the metadata of the endpoint it was sent to, no error", async () => {
    for (const path of ["/mcp/github", "/mcp"]) {
      const res = await initialize(path, undefined)
      expect(res.status).toBe(401)
      expect((await res.json()).error.code).toBe("missing_api_key")
      expect(res.headers.get("www-authenticate")).toBe(`Bearer resource_metadata="${metadataUrl(path)}"`)
      const params = extractWWWAuthenticateParams(res)
      expect(params.resourceMetadataUrl?.href).toBe(metadataUrl(path))
      expect(params.error).toBeUndefined()
    }
  })

  it("a wrong key or a malformed header: 401 with error=\"invalid_token\"", async () => {
    for (const authorization of ["Bearer sk-eu_" + "x".repeat(40), "Basic dXNlcjpwYXNz"]) {
      const res = await initialize("/mcp/github", authorization)
      expect(res.status).toBe(401)
      expect((await res.json()).error.code).toBe("invalid_api_key")
      const params = extractWWWAuthenticateParams(res)
      expect(params.error).toBe("invalid_token")
      expect(params.resourceMetadataUrl?.href).toBe(metadataUrl("/mcp/github"))
      expect(res.headers.get("www-authenticate")).toContain('error_description="')
    }
  })

  it("the SDK client without a key is refused with 401", async () => {
    const { client, transport } = sdkClient("/mcp/github", undefined)
    const refused = await client.connect(transport).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(StreamableHTTPError)
    expect((refused as StreamableHTTPError).code).toBe(401)
  })

  it("a key without the tools scope: 403 with error=\"insufficient_scope\" and the scope it lacks", async () => {
    const created = await gw.call("POST", `/v1/platforms/${tenant.platformId}/api-keys`, {
      key: tenant.platformKey,
      body: { end_user_id: tenant.endUserId, name: "no tools", scopes: [] }
    })
    expect(created.status).toBe(201)
    const res = await initialize("/mcp/github", `Bearer ${created.body.raw_key}`)
    expect(res.status).toBe(403)
    expect((await res.json()).error.code).toBe("insufficient_scope")
    const params = extractWWWAuthenticateParams(res)
    expect(params).toEqual({ resourceMetadataUrl: new URL(metadataUrl("/mcp/github")), scope: "tools", error: "insufficient_scope" })
  })

  it("the tool service's other keyed routes name the metadata of the service itself", async () => {
    const res = await fetch(`${gw.toolsUrl}/apps`)
    expect(res.status).toBe(401)
    expect(extractWWWAuthenticateParams(res).resourceMetadataUrl?.href).toBe(metadataUrl(""))
    // A platform key is the wrong kind of key, not a missing or bad one: 403, no challenge.
    const wrongKind = await initialize("/mcp/github", `Bearer ${tenant.platformKey}`)
    expect(wrongKind.status).toBe(403)
    expect(wrongKind.headers.get("www-authenticate")).toBeNull()
  })
})

describe("the protected-resource metadata", () => {
  it("describes each MCP endpoint: its URL, the header bearer, a name; no authorization server", async () => {
    // Found the way the SDK client looks for it: from the challenge, and path-aware from the endpoint.
    const challenged = extractWWWAuthenticateParams(await initialize("/mcp/github", undefined)).resourceMetadataUrl!
    const fromChallenge = await discoverOAuthProtectedResourceMetadata(new URL(`${gw.toolsUrl}/mcp/github`), { resourceMetadataUrl: challenged })
    const pathAware = await discoverOAuthProtectedResourceMetadata(new URL(`${gw.toolsUrl}/mcp/github`))
    const github = { resource: `${gw.toolsUrl}/mcp/github`, bearer_methods_supported: ["header"], resource_name: "GitHub (gateway)" }
    expect(fromChallenge).toEqual(github)
    expect(pathAware).toEqual(github)
    expect(fromChallenge).not.toHaveProperty("authorization_servers")

    expect(await discoverOAuthProtectedResourceMetadata(new URL(`${gw.toolsUrl}/mcp`))).toEqual({
      resource: `${gw.toolsUrl}/mcp`,
      bearer_methods_supported: ["header"],
      resource_name: "Skills and capabilities (gateway)"
    })
    const root = await fetch(metadataUrl(""))
    expect(root.status).toBe(200)
    expect(root.headers.get("access-control-allow-origin")).toBe("*")
    expect(await root.json()).toEqual({ resource: gw.toolsUrl, bearer_methods_supported: ["header"], resource_name: "Tool service (gateway)" })
  })

  it("answers 404 for a path that names no resource", async () => {
    for (const path of ["/mcp/no-such-app", "/apps", "/mcp/github/extra"]) {
      const res = await fetch(metadataUrl(path))
      expect(res.status, path).toBe(404)
      expect((await res.json()).error.code).toBe("not_found")
    }
  })

  it("uses GATEWAY_MCP_PUBLIC_URL, path included, for the resource and the challenge", async () => {
    const peer = await gw.startPeer({ GATEWAY_MCP_PUBLIC_URL: "https://tools.example.com/gw/" })
    try {
      const res = await fetch(`${peer.toolsUrl}/mcp/github`, { method: "POST" })
      expect(res.status).toBe(401)
      // RFC 9728 3.1: the well-known segment goes before the path.
      const url = "https://tools.example.com/.well-known/oauth-protected-resource/gw/mcp/github"
      expect(extractWWWAuthenticateParams(res).resourceMetadataUrl?.href).toBe(url)
      const doc = await fetch(`${peer.toolsUrl}/.well-known/oauth-protected-resource/gw/mcp/github`)
      expect(await doc.json()).toEqual({
        resource: "https://tools.example.com/gw/mcp/github",
        bearer_methods_supported: ["header"],
        resource_name: "GitHub (gateway)"
      })
      const root = await fetch(`${peer.toolsUrl}/.well-known/oauth-protected-resource`)
      expect((await root.json()).resource).toBe("https://tools.example.com/gw")
    } finally {
      await peer.close()
    }
  })
})

describe("with the key", () => {
  it("the SDK client connects, and each server names itself", async () => {
    for (
      const [path, expected] of [
        ["/mcp/github", { name: "gateway-github", title: "GitHub (gateway)" }],
        ["/mcp", { name: "gateway", title: "Skills and capabilities (gateway)" }]
      ] as const
    ) {
      const { client, transport } = sdkClient(path, tenant.endUserKey)
      await client.connect(transport)
      expect(client.getServerVersion()).toEqual({ ...expected, version: "1.0.0" })
      expect((await client.listTools()).tools.length).toBeGreaterThan(0)
      await transport.terminateSession()
      await client.close()
    }
  })
})

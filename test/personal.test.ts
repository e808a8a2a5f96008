// The per-user tool URL {mcp_url}/mcp with the MCP SDK client: the skills family when the
// platform has skills_enabled, the capabilities agent tools when capabilities are enabled (the
// same policy and money as the HTTP endpoints), and the display rule tool_call on each call.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeCapabilityProvider, startFakeCapabilityProvider } from "./fakes/FakeCapabilityProvider.js"
import { createEndUser, createPlatform, type Gateway, startGateway, upsertCapability } from "./support/Gateway.js"

let gw: Gateway
let fake: FakeCapabilityProvider
let providerUid = ""

beforeAll(async () => {
  fake = await startFakeCapabilityProvider()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true" } })
  providerUid = await upsertCapability(
    gw,
    { slug: "quokka-lookup", name: "Quokka lookup", description: "Find quokkas", domains: ["zoology"] },
    {
      slug: "qfinder",
      name: "QFinder",
      description: "Finds quokkas fast",
      url: `${fake.url}/ok?cost=0.05`,
      min_price_usd: 0.05,
      median_price_usd: 0.1,
      max_price_usd: 0.2,
      rating: 4.5,
      input_example: { q: "quokka" }
    }
  )
})
afterAll(async () => {
  await gw?.close()
  await fake?.close()
})

const tenant = async (settings: Record<string, unknown>, skills: boolean) => {
  const { platformId, platformKey } = await createPlatform(gw, { name: "P", settings, skills_enabled: skills })
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 5 } })
  const eu = await createEndUser(gw, platformId, platformKey, "agent")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 1 } })
  return { platformId, platformKey, ...eu }
}

const connect = async (key: string) => {
  const client = new Client({ name: "personal-test", version: "1.0.0" })
  const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
  })
  await client.connect(transport)
  return { client, close: async () => { await transport.terminateSession(); await client.close() } }
}

const textOf = (result: any): string => result.content[0].text

describe("the per-user tool URL", () => {
  it("offers skills and capability tools as the platform enables them, and runs them", async () => {
    const t = await tenant({
      capabilities: { enabled: true },
      end_user_wallet: { enabled: true, rules: [{ trigger: "tool_call", amount: 2 }] }
    }, true)
    await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/wallet`, { key: t.platformKey, body: { max_display: 100 } })
    const { client, close } = await connect(t.endUserKey)
    try {
      const names = (await client.listTools()).tools.map((tool) => tool.name).sort()
      expect(names).toEqual([
        "capability_run",
        "capability_search",
        "create_skill",
        "delete_skill",
        "fetch_skill",
        "find_skill",
        "list_capabilities",
        "list_providers",
        "submit_skill_review"
      ])
      const created = JSON.parse(textOf(await client.callTool({ name: "create_skill", arguments: { name: "Quokka care", description: "Feeding quokkas", body: "# Leaves" } })))
      const found = JSON.parse(textOf(await client.callTool({ name: "find_skill", arguments: { query: "quokka feeding" } })))
      expect(found.skills.map((s: any) => s.id)).toEqual([created.id])

      const shelf = JSON.parse(textOf(await client.callTool({ name: "list_capabilities", arguments: {} })))
      expect(shelf.enabled).toBe(true)
      const providers = JSON.parse(textOf(await client.callTool({ name: "list_providers", arguments: { capability: "quokka-lookup" } })))
      expect(providers.providers[0]).toMatchObject({ uid: providerUid, policy_state: "in_policy" })
      const search = JSON.parse(textOf(await client.callTool({ name: "capability_search", arguments: { query: "quokka" } })))
      expect(search.candidates.map((c: any) => c.uid)).toContain(providerUid)
      const run = JSON.parse(textOf(await client.callTool({ name: "capability_run", arguments: { capability: providerUid, input: { q: "where" } } })))
      expect(run).toMatchObject({ capability: "quokka-lookup", final_state: "billed", cost_usd: 0.05, charged_end_user: true })
      const bad = await client.callTool({ name: "capability_run", arguments: { capability: "cap_nope" } })
      expect(bad.isError).toBe(true)
    } finally {
      await close()
    }
    const { rows: [budget] } = await gw.db.pool.query(
      "SELECT used_usd::text, used_display::text FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL",
      [t.endUserId]
    )
    // 0.05 for the run; 2 display units for each of the 7 tool calls.
    expect(budget).toEqual({ used_usd: "0.05", used_display: "14" })
  })

  it("offers nothing when neither family is enabled; calls say why", async () => {
    const t = await tenant({}, false)
    const { client, close } = await connect(t.endUserKey)
    try {
      expect((await client.listTools()).tools).toEqual([])
      const res = await client.callTool({ name: "find_skill", arguments: { query: "x" } })
      expect(res.isError).toBe(true)
      expect(textOf(res)).toMatch(/not enabled/)
    } finally {
      await close()
    }
  })

  it("a tools-only key gets skills and browsing but not capability search/run; a key without tools or inference is refused", async () => {
    const t = await tenant({ capabilities: { enabled: true } }, true)
    const keyWith = async (scopes: ReadonlyArray<string>) => {
      const res = await gw.call("POST", `/v1/platforms/${t.platformId}/api-keys`, {
        key: t.platformKey,
        body: { end_user_id: t.endUserId, scopes }
      })
      expect(res.status).toBe(201)
      return res.body.raw_key as string
    }
    const { client, close } = await connect(await keyWith(["tools"]))
    try {
      const names = (await client.listTools()).tools.map((tool) => tool.name).sort()
      expect(names).toEqual([
        "create_skill",
        "delete_skill",
        "fetch_skill",
        "find_skill",
        "list_capabilities",
        "list_providers",
        "submit_skill_review"
      ])
      expect(JSON.parse(textOf(await client.callTool({ name: "list_capabilities", arguments: {} }))).enabled).toBe(true)
      // Not offered, and refused when named anyway, as POST /v1/capabilities/run refuses it.
      const run = await client.callTool({ name: "capability_run", arguments: { capability: providerUid, input: { q: "where" } } })
      expect(run.isError).toBe(true)
      expect(textOf(run)).toMatch(/^insufficient_scope: /)
    } finally {
      await close()
    }
    const { rows: [budget] } = await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1 AND deleted_at IS NULL", [t.endUserId])
    expect(budget).toEqual({ used_usd: "0" })

    const refused = await connect(await keyWith([])).then(() => undefined, (e: unknown) => e)
    expect(refused).toBeInstanceOf(StreamableHTTPError)
    expect((refused as StreamableHTTPError).code).toBe(403)
  })
})

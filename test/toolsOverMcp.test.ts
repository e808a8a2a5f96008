// Every one of the 32 tool-app tools end to end over MCP (SDK client -> gateway tool service -> fake provider APIs).
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeApp, type FakeToolApis, startFakeToolApis, toolAppEnv } from "./fakes/FakeToolApis.js"
import { type OAuthLanding, startOAuthLanding } from "./fakes/OAuthLanding.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let landing: OAuthLanding
let fake: FakeToolApis
let tenant: { readonly platformId: string; readonly platformKey: string; readonly endUserId: string; readonly endUserKey: string }
const apps: ReadonlyArray<FakeApp> = ["github", "slack", "gmail", "zendesk"]

const tools = (path: string, key: string | undefined) =>
  fetch(`${gw.toolsUrl}${path}`, { redirect: "manual", headers: key === undefined ? {} : { authorization: `Bearer ${key}` } })

/** The browser's part of the OAuth flow: gateway authorize -> provider consent -> callback -> landing. */
const connect = async (key: string, app: FakeApp) => {
  const start = await tools(`/oauth/authorize?app=${app}`, key)
  expect(start.status).toBe(302)
  const consent = await fetch(new URL(start.headers.get("location")!), { redirect: "manual" })
  expect(consent.status).toBe(302)
  const back = await fetch(consent.headers.get("location")!, { redirect: "manual" })
  expect(back.status).toBe(302)
  const landingUrl = new URL(back.headers.get("location")!)
  expect(landingUrl.searchParams.get("status")).toBe("connected")
  expect((await fetch(landingUrl)).status).toBe(200)
}

const mcpClient = async (key: string, app: FakeApp) => {
  const client = new Client({ name: "tools-over-mcp", version: "1.0.0" })
  const transport = new StreamableHTTPClientTransport(new URL(`${gw.toolsUrl}/mcp/${app}`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
  })
  await client.connect(transport)
  return { client, transport }
}

beforeAll(async () => {
  landing = await startOAuthLanding()
  fake = await startFakeToolApis()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", ...toolAppEnv(fake) } })
  const { platformId, platformKey } = await createPlatform(gw)
  const eu = await createEndUser(gw, platformId, platformKey, "mcp-user")
  tenant = { platformId, platformKey, ...eu }
  for (const app of apps) {
    const res = await gw.call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
      key: platformKey,
      body: { app_slug: app, client_id: `client-${app}`, client_secret: `secret-${app}`, base_url: landing.url }
    })
    expect(res.status).toBe(201)
    await connect(tenant.endUserKey, app)
  }
})
afterAll(async () => {
  await gw?.close()
  await landing?.close()
  await fake?.close()
})

/** Parsed JSON answers of the calls made so far in this app's session, by tool name. */
type Prior = Record<string, any>
type Dyn<T> = T | ((prior: Prior) => T)
const resolve = <T>(value: Dyn<T>, prior: Prior): T => (typeof value === "function" ? (value as (p: Prior) => T)(prior) : value)

interface Row {
  /** The app's own tool name; the MCP name is `{app}_{tool}`. */
  readonly tool: string
  readonly args: Dyn<Record<string, unknown>>
  readonly method: string
  /** Path of the first provider request the call makes. */
  readonly path: Dyn<string>
  readonly result: Dyn<Record<string, unknown>>
}

const widgets = { owner: "octo-org", repo: "widgets" }

/** Every tool, in an order where creates come before the reads that need them. */
const table: Record<FakeApp, ReadonlyArray<Row>> = {
  github: [
    {
      tool: "list_repos",
      args: {},
      method: "GET",
      path: "/user/repos",
      result: { repositories: [expect.objectContaining({ full_name: "octo-org/widgets", stars: 42 }), expect.objectContaining({ full_name: "octocat/hello-world" })] }
    },
    { tool: "get_repo", args: widgets, method: "GET", path: "/repos/octo-org/widgets", result: { full_name: "octo-org/widgets", forks: 7, license: "MIT", topics: ["widgets", "ui"] } },
    {
      tool: "create_issue",
      args: { ...widgets, title: "Sprockets squeak", body: "Loudly.", labels: ["bug", "audio"] },
      method: "POST",
      path: "/repos/octo-org/widgets/issues",
      result: { number: 4, title: "Sprockets squeak", state: "open", html_url: "https://github.com/octo-org/widgets/issues/4" }
    },
    {
      tool: "get_issue",
      args: (p) => ({ ...widgets, number: p.create_issue.number }),
      method: "GET",
      path: (p) => `/repos/octo-org/widgets/issues/${p.create_issue.number}`,
      result: (p) => ({ number: p.create_issue.number, title: "Sprockets squeak", body: "Loudly.", labels: ["bug", "audio"], comments: 0 })
    },
    {
      tool: "comment_on_issue",
      args: (p) => ({ ...widgets, number: p.create_issue.number, body: "Still squeaking." }),
      method: "POST",
      path: (p) => `/repos/octo-org/widgets/issues/${p.create_issue.number}/comments`,
      result: (p) => ({ id: expect.any(Number), user: "octocat", html_url: expect.stringContaining(`/issues/${p.create_issue.number}#issuecomment-`) })
    },
    {
      tool: "list_issues",
      args: { ...widgets, state: "all", labels: "bug" },
      method: "GET",
      path: "/repos/octo-org/widgets/issues",
      result: (p) => ({
        issues: [
          expect.objectContaining({ number: p.create_issue.number, title: "Sprockets squeak", is_pull_request: false }),
          expect.objectContaining({ number: 1, title: "Widgets wobble", is_pull_request: false })
        ]
      })
    },
    {
      tool: "list_pull_requests",
      args: { ...widgets, base: "main" },
      method: "GET",
      path: "/repos/octo-org/widgets/pulls",
      result: { pull_requests: [expect.objectContaining({ number: 2, title: "Add gizmo support", head: "gizmo", base: "main", draft: false })] }
    },
    {
      tool: "get_pull_request",
      args: { ...widgets, number: 2 },
      method: "GET",
      path: "/repos/octo-org/widgets/pulls/2",
      result: { number: 2, merged: false, mergeable: true, additions: 120, deletions: 4, changed_files: 3, commits: 2, labels: ["enhancement"] }
    },
    {
      tool: "get_file_contents",
      args: { ...widgets, path: "src/index.ts", ref: "main" },
      method: "GET",
      path: "/repos/octo-org/widgets/contents/src/index.ts",
      result: { type: "file", path: "src/index.ts", content: "export const widget = (name: string) => `widget:${name}`\n" }
    },
    {
      tool: "search_code",
      args: { q: "widget repo:octo-org/widgets" },
      method: "GET",
      path: "/search/code",
      result: { total_count: 2, items: expect.arrayContaining([expect.objectContaining({ path: "src/index.ts", repository: "octo-org/widgets" })]) }
    }
  ],
  slack: [
    {
      tool: "list_channels",
      args: {},
      method: "GET",
      path: "/api/conversations.list",
      result: {
        channels: [
          { id: "C0GENERAL", name: "general", is_private: false, is_archived: false, num_members: 3, topic: "Company-wide announcements", purpose: "Everyone" },
          expect.objectContaining({ name: "random" }),
          expect.objectContaining({ name: "leads" })
        ]
      }
    },
    {
      tool: "search_messages",
      args: { query: "login bug" },
      method: "GET",
      path: "/api/search.messages",
      result: { total: 2, matches: expect.arrayContaining([expect.objectContaining({ channel_id: "C0GENERAL", channel_name: "general", username: "alice" })]) }
    },
    {
      tool: "post_message",
      args: { channel: "C0RANDOM", text: "Hello *team*" },
      method: "POST",
      path: "/api/chat.postMessage",
      result: { channel: "C0RANDOM", ts: expect.stringMatching(/^\d+\.\d{6}$/), text: "Hello *team*" }
    },
    {
      tool: "get_channel_history",
      args: { channel: "C0RANDOM" },
      method: "GET",
      path: "/api/conversations.history",
      result: (p) => ({ messages: expect.arrayContaining([expect.objectContaining({ ts: p.post_message.ts, text: "Hello *team*" })]), has_more: false })
    },
    {
      tool: "reply_in_thread",
      args: { channel: "C0GENERAL", thread_ts: "1700000100.000200", text: "Fixed now" },
      method: "POST",
      path: "/api/chat.postMessage",
      result: { channel: "C0GENERAL", thread_ts: "1700000100.000200", text: "Fixed now" }
    },
    {
      tool: "add_reaction",
      args: { channel: "C0GENERAL", timestamp: "1700000000.000100", name: ":thumbsup:" },
      method: "POST",
      path: "/api/reactions.add",
      result: { ok: true, channel: "C0GENERAL", timestamp: "1700000000.000100", name: "thumbsup" }
    },
    {
      tool: "list_users",
      args: {},
      method: "GET",
      path: "/api/users.list",
      result: { members: [expect.objectContaining({ name: "alice" }), expect.objectContaining({ name: "bob" }), expect.objectContaining({ id: "U0BOT", is_bot: true })] }
    },
    {
      tool: "get_user_info",
      args: { user: "U0BOB" },
      method: "GET",
      path: "/api/users.info",
      result: { id: "U0BOB", name: "bob", real_name: "Bob Builder", title: "SRE", email: "bob@example.com", tz: "Europe/London" }
    },
    {
      tool: "create_channel",
      args: { name: "proj-launch", is_private: true },
      method: "POST",
      path: "/api/conversations.create",
      result: { id: expect.stringMatching(/^G0/), name: "proj-launch", is_private: true, topic: "" }
    },
    {
      tool: "set_channel_topic",
      args: (p) => ({ channel: p.create_channel.id, topic: "Launch day" }),
      method: "POST",
      path: "/api/conversations.setTopic",
      result: (p) => ({ id: p.create_channel.id, name: "proj-launch", topic: "Launch day" })
    }
  ],
  gmail: [
    {
      tool: "send_email",
      args: { to: ["ann@example.com"], subject: "Hello over MCP", body: "Sent through the gateway." },
      method: "POST",
      path: "/gmail/v1/users/me/messages/send",
      result: { id: expect.any(String), thread_id: expect.any(String), labels: ["SENT"] }
    },
    {
      tool: "search_emails",
      args: { query: "from:ann@example.com in:inbox" },
      method: "GET",
      path: "/gmail/v1/users/me/messages",
      result: {
        result_size_estimate: 2,
        messages: [
          expect.objectContaining({ id: "18c0000000000003", from: "Ann Example <ann@example.com>", subject: "Lunch on Friday?" }),
          expect.objectContaining({ id: "18c0000000000001", subject: "Quarterly report", unread: true })
        ]
      }
    }
  ],
  zendesk: [
    {
      tool: "list_tickets",
      args: {},
      method: "GET",
      path: "/api/v2/tickets.json",
      result: { count: 2, next_page: null, tickets: [expect.objectContaining({ id: 2 }), expect.objectContaining({ id: 1, subject: "Printer on fire", status: "open" })] }
    },
    {
      tool: "create_ticket",
      args: { subject: "Refund please", body: "I was charged twice.", priority: "high", requester_email: "sam@customer.example", requester_name: "Sam" },
      method: "POST",
      path: "/api/v2/tickets.json",
      result: { id: 3, subject: "Refund please", status: "new", priority: "high" }
    },
    {
      tool: "get_ticket",
      args: (p) => ({ id: p.create_ticket.id }),
      method: "GET",
      path: (p) => `/api/v2/tickets/${p.create_ticket.id}.json`,
      result: (p) => ({ id: p.create_ticket.id, subject: "Refund please", description: "I was charged twice.", requester_id: p.create_ticket.requester_id })
    },
    {
      tool: "update_ticket",
      args: (p) => ({ id: p.create_ticket.id, status: "pending", assignee_id: 1001 }),
      method: "PUT",
      path: (p) => `/api/v2/tickets/${p.create_ticket.id}.json`,
      result: (p) => ({ id: p.create_ticket.id, status: "pending", assignee_id: 1001 })
    },
    {
      tool: "add_ticket_comment",
      args: (p) => ({ id: p.create_ticket.id, body: "Refund issued.", public: false }),
      method: "PUT",
      path: (p) => `/api/v2/tickets/${p.create_ticket.id}.json`,
      result: (p) => ({ ticket_id: p.create_ticket.id, public: false, audit_id: expect.any(Number) })
    },
    {
      tool: "list_ticket_comments",
      args: (p) => ({ id: p.create_ticket.id }),
      method: "GET",
      path: (p) => `/api/v2/tickets/${p.create_ticket.id}/comments.json`,
      result: { comments: [expect.objectContaining({ body: "I was charged twice.", public: true }), expect.objectContaining({ body: "Refund issued.", public: false })] }
    },
    {
      tool: "search_tickets",
      args: { query: "status:open printer" },
      method: "GET",
      path: "/api/v2/search.json",
      result: { count: 1, results: [expect.objectContaining({ id: 1, subject: "Printer on fire" })] }
    },
    {
      tool: "create_user",
      args: { name: "Pat Doe", email: "pat@customer.example" },
      method: "POST",
      path: "/api/v2/users.json",
      result: { id: expect.any(Number), name: "Pat Doe", email: "pat@customer.example", role: "end-user" }
    },
    {
      tool: "get_user",
      args: (p) => ({ id: p.create_user.id }),
      method: "GET",
      path: (p) => `/api/v2/users/${p.create_user.id}.json`,
      result: (p) => ({ id: p.create_user.id, name: "Pat Doe", email: "pat@customer.example", role: "end-user" })
    },
    {
      tool: "list_users",
      args: { role: "agent" },
      method: "GET",
      path: "/api/v2/users.json",
      result: { users: [expect.objectContaining({ name: "Agent Smith", role: "agent" })] }
    }
  ]
}

describe("all 32 tools over MCP", () => {
  it("the table covers every tool exactly once (10/10/2/10)", () => {
    expect(apps.map((app) => [app, table[app].length])).toEqual([["github", 10], ["slack", 10], ["gmail", 2], ["zendesk", 10]])
    for (const app of apps) expect(new Set(table[app].map((r) => r.tool)).size).toBe(table[app].length)
  })

  it.each(apps)("%s: tools/list, then tools/call of every tool against the fake", async (app) => {
    const { client, transport } = await mcpClient(tenant.endUserKey, app)
    try {
      const listed = await client.listTools()
      expect(listed.tools.map((t) => t.name).sort()).toEqual(table[app].map((r) => `${app}_${r.tool}`).sort())
      for (const t of listed.tools) expect(t.inputSchema.type).toBe("object")

      const issued = fake.issuedTokens(app).at(-1)
      expect(issued).toBeDefined()
      const prior: Prior = {}
      for (const row of table[app]) {
        const name = `${app}_${row.tool}`
        const seen = fake.requestsFor(app).length
        const result = await client.callTool({ name, arguments: resolve(row.args, prior) })
        const content = result.content as ReadonlyArray<{ readonly type: string; readonly text?: string }>
        expect(result.isError ?? false, `${name}: ${JSON.stringify(content)}`).toBe(false)
        expect(content, name).toHaveLength(1)
        expect(content[0]!.type, name).toBe("text")
        const parsed = JSON.parse(content[0]!.text!)
        expect(parsed, name).toMatchObject(resolve(row.result, prior))

        const sent = fake.requestsFor(app).slice(seen).filter((r) => !r.path.includes("/oauth/"))
        expect(sent.length, `${name} reached the provider`).toBeGreaterThan(0)
        expect([sent[0]!.method, sent[0]!.path], name).toEqual([row.method, resolve(row.path, prior)])
        for (const r of sent) expect(r.headers.authorization, name).toBe(`Bearer ${issued}`)
        prior[row.tool] = parsed
      }
    } finally {
      await transport.terminateSession()
      await client.close()
    }
  })

  it("the free-tier counter counted exactly the 32 calls, and nothing was billed", async () => {
    const counter = await gw.db.pool.query("SELECT count::int FROM tool_call_counters WHERE platform_id = $1", [tenant.platformId])
    expect(counter.rows).toEqual([{ count: 32 }])
    const logs = await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1", [tenant.platformId])
    expect(logs.rows).toEqual([{ n: 0 }])
  })
})

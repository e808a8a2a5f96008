// Tool apps against real-socket fakes of GitHub, Slack, Gmail and Zendesk (no gateway, no
// database): every tool's provider request and compact answer, argument checks, error mapping
// (401 -> re-auth, other statuses, network), the registry's shape and the fakes' OAuth endpoints.
import { Cause, Effect, Exit, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { buildUrl } from "../layers/tools/apps/Http.js"
import { toolAppBySlug, toolApps } from "../layers/tools/apps/Registry.js"
import { AppApiError, type ToolAppSlug, type ToolContext, type ToolResult } from "../layers/tools/apps/ToolApp.js"
import { apiUrls, type FakeToolApis, oauthUrls, type RecordedRequest, startFakeToolApis } from "./fakes/FakeToolApis.js"

let fake: FakeToolApis

beforeAll(async () => {
  fake = await startFakeToolApis()
})
afterAll(() => fake.close())

const ctxFor = (app: ToolAppSlug, accessToken = `token-${app}`): ToolContext => ({ apiUrl: apiUrls(fake)[app], accessToken })

const toolOf = (app: ToolAppSlug, name: string) => {
  const tool = toolAppBySlug(app)?.tools.find((t) => t.name === name)
  if (tool === undefined) throw new Error(`no tool ${app}_${name}`)
  return tool
}

const exitOf = (app: ToolAppSlug, name: string, args: Record<string, unknown>, ctx = ctxFor(app)) =>
  Effect.runPromiseExit(toolOf(app, name).run(ctx, args))

const call = async (app: ToolAppSlug, name: string, args: Record<string, unknown> = {}): Promise<ToolResult> => {
  const exit = await exitOf(app, name, args)
  if (Exit.isFailure(exit)) throw new Error(`${app}_${name} failed: ${Cause.pretty(exit.cause)}`)
  return exit.value
}

/** Runs a tool that must succeed; its JSON answer. */
const ok = async (app: ToolAppSlug, name: string, args: Record<string, unknown> = {}): Promise<any> => {
  const result = await call(app, name, args)
  expect(result.isError, result.content[0]?.text).not.toBe(true)
  expect(result.content).toHaveLength(1)
  expect(result.content[0]?.type).toBe("text")
  return JSON.parse(result.content[0]!.text)
}

/** Runs a tool that must answer an isError result; its text. */
const toolError = async (app: ToolAppSlug, name: string, args: Record<string, unknown>): Promise<string> => {
  const result = await call(app, name, args)
  expect(result.isError).toBe(true)
  return result.content[0]!.text
}

const appError = async (app: ToolAppSlug, name: string, args: Record<string, unknown>, ctx = ctxFor(app)): Promise<AppApiError> => {
  const exit = await exitOf(app, name, args, ctx)
  if (Exit.isSuccess(exit)) throw new Error(`expected AppApiError, got ${JSON.stringify(exit.value)}`)
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) throw new Error(Cause.pretty(exit.cause))
  expect(failure.value).toBeInstanceOf(AppApiError)
  return failure.value
}

const last = (app: ToolAppSlug): RecordedRequest => {
  const request = fake.requestsFor(app).at(-1)
  if (request === undefined) throw new Error(`no ${app} request`)
  return request
}

const countFor = (app: ToolAppSlug) => fake.requestsFor(app).length

// ---- registry ---------------------------------------------------------------------------------

describe("registry", () => {
  it("has the four apps with exactly 10/10/2/10 tools", () => {
    expect(toolApps.map((a) => [a.slug, a.tools.length])).toEqual([["github", 10], ["slack", 10], ["gmail", 2], ["zendesk", 10]])
    expect(toolApps.flatMap((a) => a.tools).length).toBe(32)
  })

  it("names the tools exactly as docs/api.md lists them", () => {
    const names = Object.fromEntries(toolApps.map((a) => [a.slug, a.tools.map((t) => t.name)]))
    expect(names).toEqual({
      github: ["list_repos", "get_repo", "list_issues", "get_issue", "create_issue", "comment_on_issue", "list_pull_requests", "get_pull_request", "get_file_contents", "search_code"],
      slack: ["list_channels", "get_channel_history", "post_message", "reply_in_thread", "add_reaction", "list_users", "get_user_info", "search_messages", "create_channel", "set_channel_topic"],
      gmail: ["send_email", "search_emails"],
      zendesk: ["list_tickets", "get_ticket", "create_ticket", "update_ticket", "add_ticket_comment", "list_ticket_comments", "search_tickets", "get_user", "list_users", "create_user"]
    })
  })

  it("tool names are unique per app, snake_case, and unique as MCP names", () => {
    const mcpNames = toolApps.flatMap((a) => a.tools.map((t) => `${a.slug}_${t.name}`))
    expect(new Set(mcpNames).size).toBe(mcpNames.length)
    for (const app of toolApps) {
      for (const tool of app.tools) {
        expect(tool.name).toMatch(/^[a-z_]+$/)
        expect(tool.description.length).toBeGreaterThan(10)
        expect(tool.inputSchema.type).toBe("object")
        for (const required of tool.inputSchema.required ?? []) expect(Object.keys(tool.inputSchema.properties)).toContain(required)
        for (const schema of Object.values(tool.inputSchema.properties)) {
          expect(schema).toMatchObject({ type: expect.any(String), description: expect.any(String) })
          expect(schema).not.toHaveProperty("required")
        }
      }
    }
  })

  it("looks apps up by slug and carries each provider's OAuth settings", () => {
    expect(toolAppBySlug("github")?.name).toBe("GitHub")
    expect(toolAppBySlug("jira")).toBeUndefined()
    expect(toolAppBySlug("gmail")?.oauth).toEqual({
      authorizeUrl: "https://accounts.google.com/o/oauth2/v2/auth",
      tokenUrl: "https://oauth2.googleapis.com/token",
      scopes: ["https://www.googleapis.com/auth/gmail.send", "https://www.googleapis.com/auth/gmail.readonly"],
      scopeSeparator: " ",
      pkce: true,
      extraAuthorizeParams: { access_type: "offline", prompt: "consent" }
    })
    expect(toolAppBySlug("slack")?.oauth).toMatchObject({ scopeSeparator: ",", pkce: false, tokenUrl: "https://slack.com/api/oauth.v2.access" })
    expect(toolAppBySlug("github")?.oauth).toMatchObject({ scopes: ["repo", "read:user"], pkce: true })
    expect(toolAppBySlug("zendesk")?.oauth).toMatchObject({ scopes: ["read", "write"], pkce: true })
    expect(toolApps.map((a) => a.defaultApiUrl)).toEqual(["https://api.github.com", "https://slack.com/api", "https://gmail.googleapis.com", "https://example.zendesk.com"])
  })

  it("publishes JSON schemas with enums, bounds and defaults", () => {
    const schema = toolOf("github", "list_issues").inputSchema
    expect(schema.required).toEqual(["owner", "repo"])
    expect(schema.properties.state).toEqual({ type: "string", description: "Filter by state.", enum: ["open", "closed", "all"], default: "open" })
    expect(schema.properties.per_page).toMatchObject({ type: "integer", minimum: 1, maximum: 100, default: 30 })
    expect(toolOf("gmail", "send_email").inputSchema.properties.to).toMatchObject({ type: "array", items: { type: "string" } })
    expect(toolOf("github", "list_repos").inputSchema).not.toHaveProperty("required")
  })
})

// ---- GitHub -----------------------------------------------------------------------------------

describe("github", () => {
  const widgets = { owner: "octo-org", repo: "widgets" }

  it("list_repos: GET /user/repos with GitHub's headers", async () => {
    const out = await ok("github", "list_repos")
    const req = last("github")
    expect([req.method, req.path]).toEqual(["GET", "/user/repos"])
    expect(req.query).toEqual({ visibility: "all", sort: "updated", per_page: "30", page: "1" })
    expect(req.headers).toMatchObject({ authorization: "Bearer token-github", accept: "application/vnd.github+json", "x-github-api-version": "2022-11-28" })
    expect(out.repositories.map((r: any) => r.full_name)).toEqual(["octo-org/widgets", "octocat/hello-world"])
    expect(out.repositories[0]).toMatchObject({ private: false, default_branch: "main", language: "TypeScript", stars: 42, html_url: "https://github.com/octo-org/widgets" })
  })

  it("get_repo: GET /repos/{owner}/{repo}", async () => {
    const out = await ok("github", "get_repo", widgets)
    expect([last("github").method, last("github").path]).toEqual(["GET", "/repos/octo-org/widgets"])
    expect(out).toMatchObject({ full_name: "octo-org/widgets", forks: 7, topics: ["widgets", "ui"], license: "MIT", visibility: "public" })
  })

  it("list_issues: GET /repos/{owner}/{repo}/issues with filters; pull requests are flagged", async () => {
    const filtered = await ok("github", "list_issues", { ...widgets, state: "all", labels: "bug" })
    expect(last("github").path).toBe("/repos/octo-org/widgets/issues")
    expect(last("github").query).toEqual({ state: "all", labels: "bug", per_page: "30", page: "1" })
    expect(filtered.issues).toEqual([expect.objectContaining({ number: 1, title: "Widgets wobble", labels: ["bug"], assignees: ["octocat"], is_pull_request: false })])
    const open = await ok("github", "list_issues", widgets)
    expect(last("github").query.state).toBe("open")
    expect(open.issues.map((i: any) => [i.number, i.is_pull_request])).toContainEqual([2, true])
  })

  it("get_issue: GET /repos/{owner}/{repo}/issues/{number}", async () => {
    const out = await ok("github", "get_issue", { ...widgets, number: 1 })
    expect([last("github").method, last("github").path]).toEqual(["GET", "/repos/octo-org/widgets/issues/1"])
    expect(out).toMatchObject({ number: 1, body: "They wobble when spun.", state: "open", user: "hubot", comments: 1, closed_at: null })
  })

  it("create_issue: POST /repos/{owner}/{repo}/issues, then get_issue finds it", async () => {
    const out = await ok("github", "create_issue", { ...widgets, title: "Sprockets squeak", body: "Loudly.", labels: ["bug", "audio"] })
    const req = last("github")
    expect([req.method, req.path]).toEqual(["POST", "/repos/octo-org/widgets/issues"])
    expect(req.body).toEqual({ title: "Sprockets squeak", body: "Loudly.", labels: ["bug", "audio"] })
    expect(req.headers["content-type"]).toContain("application/json")
    expect(out).toEqual({ number: 4, title: "Sprockets squeak", state: "open", html_url: "https://github.com/octo-org/widgets/issues/4" })
    expect(await ok("github", "get_issue", { ...widgets, number: 4 })).toMatchObject({ title: "Sprockets squeak", labels: ["bug", "audio"] })
  })

  it("comment_on_issue: POST /repos/{owner}/{repo}/issues/{number}/comments", async () => {
    const out = await ok("github", "comment_on_issue", { ...widgets, number: "1", body: "Still wobbling." })
    const req = last("github")
    expect([req.method, req.path, req.body]).toEqual(["POST", "/repos/octo-org/widgets/issues/1/comments", { body: "Still wobbling." }])
    expect(out).toMatchObject({ id: expect.any(Number), user: "octocat" })
    expect(out.html_url).toContain("/issues/1#issuecomment-")
    expect(await ok("github", "get_issue", { ...widgets, number: 1 })).toMatchObject({ comments: 2 })
  })

  it("list_pull_requests: GET /repos/{owner}/{repo}/pulls", async () => {
    const out = await ok("github", "list_pull_requests", { ...widgets, base: "main" })
    expect(last("github").path).toBe("/repos/octo-org/widgets/pulls")
    expect(last("github").query).toEqual({ state: "open", base: "main", per_page: "30", page: "1" })
    expect(out.pull_requests).toEqual([expect.objectContaining({ number: 2, title: "Add gizmo support", head: "gizmo", base: "main", draft: false })])
  })

  it("get_pull_request: GET /repos/{owner}/{repo}/pulls/{number}", async () => {
    const out = await ok("github", "get_pull_request", { ...widgets, number: 2 })
    expect(last("github").path).toBe("/repos/octo-org/widgets/pulls/2")
    expect(out).toMatchObject({ number: 2, merged: false, mergeable: true, additions: 120, deletions: 4, changed_files: 3, commits: 2, labels: ["enhancement"] })
  })

  it("get_file_contents: GET /repos/{owner}/{repo}/contents/{path}?ref= and decodes base64", async () => {
    const file = await ok("github", "get_file_contents", { ...widgets, path: "src/index.ts", ref: "main" })
    expect(last("github").path).toBe("/repos/octo-org/widgets/contents/src/index.ts")
    expect(last("github").query).toEqual({ ref: "main" })
    expect(file).toMatchObject({ type: "file", path: "src/index.ts", content: "export const widget = (name: string) => `widget:${name}`\n" })
    const dir = await ok("github", "get_file_contents", { ...widgets, path: "src" })
    expect(last("github").query).toEqual({})
    expect(dir.entries.map((e: any) => e.name)).toEqual(["index.ts", "util.ts"])
  })

  it("search_code: GET /search/code?q=", async () => {
    const out = await ok("github", "search_code", { q: "widget repo:octo-org/widgets" })
    expect(last("github").path).toBe("/search/code")
    expect(last("github").query).toEqual({ q: "widget repo:octo-org/widgets", per_page: "30", page: "1" })
    expect(out.total_count).toBe(2)
    expect(out.items).toContainEqual(expect.objectContaining({ path: "src/index.ts", repository: "octo-org/widgets" }))
  })

  it("path segments are percent-encoded", async () => {
    const error = await appError("github", "get_repo", { owner: "octo org", repo: "a/b" })
    expect(error.status).toBe(404)
    expect(last("github").path).toBe("/repos/octo%20org/a%2Fb")
  })

  it("missing or malformed arguments are isError results and send nothing", async () => {
    const before = countFor("github")
    expect(await toolError("github", "get_repo", { owner: "octo-org" })).toBe("Missing required argument \"repo\" (a non-empty string).")
    expect(await toolError("github", "create_issue", { ...widgets, title: "  " })).toContain("\"title\"")
    expect(await toolError("github", "get_issue", { ...widgets, number: "one" })).toContain("\"number\" must be an integer >= 1")
    expect(await toolError("github", "list_issues", { ...widgets, state: "stale" })).toContain("one of open, closed, all")
    expect(await toolError("github", "list_repos", { per_page: 500 })).toContain("<= 100")
    expect(countFor("github")).toBe(before)
  })
})

// ---- Slack ------------------------------------------------------------------------------------

describe("slack", () => {
  it("list_channels: GET conversations.list", async () => {
    const out = await ok("slack", "list_channels")
    const req = last("slack")
    expect([req.method, req.path]).toEqual(["GET", "/api/conversations.list"])
    expect(req.query).toEqual({ types: "public_channel,private_channel", exclude_archived: "true", limit: "50" })
    expect(req.headers.authorization).toBe("Bearer token-slack")
    expect(out.channels.map((c: any) => c.name)).toEqual(["general", "random", "leads"])
    expect(out.channels[0]).toEqual({ id: "C0GENERAL", name: "general", is_private: false, is_archived: false, num_members: 3, topic: "Company-wide announcements", purpose: "Everyone" })
    expect(out).not.toHaveProperty("next_cursor")
  })

  it("list_channels pages with Slack cursors", async () => {
    const first = await ok("slack", "list_channels", { limit: 2 })
    expect(first.channels).toHaveLength(2)
    const second = await ok("slack", "list_channels", { limit: 2, cursor: first.next_cursor })
    expect(last("slack").query.cursor).toBe(first.next_cursor)
    expect(second.channels.map((c: any) => c.name)).toEqual(["leads"])
  })

  it("get_channel_history: GET conversations.history", async () => {
    const out = await ok("slack", "get_channel_history", { channel: "C0GENERAL" })
    expect([last("slack").method, last("slack").path]).toEqual(["GET", "/api/conversations.history"])
    expect(last("slack").query).toEqual({ channel: "C0GENERAL", limit: "20" })
    expect(out.messages).toEqual([
      { ts: "1700000100.000200", user: "U0ALICE", text: "Anyone seen the login bug?", thread_ts: "1700000100.000200", reply_count: 1 },
      { ts: "1700000000.000100", user: "U0BOB", text: "Deploy finished for v1.2" }
    ])
    expect(out.has_more).toBe(false)
  })

  it("post_message: POST chat.postMessage (JSON), then the history has it", async () => {
    const out = await ok("slack", "post_message", { channel: "C0RANDOM", text: "Hello *team*" })
    const req = last("slack")
    expect([req.method, req.path, req.body]).toEqual(["POST", "/api/chat.postMessage", { channel: "C0RANDOM", text: "Hello *team*" }])
    expect(req.headers["content-type"]).toBe("application/json; charset=utf-8")
    expect(out).toEqual({ channel: "C0RANDOM", ts: expect.stringMatching(/^\d+\.\d{6}$/), text: "Hello *team*" })
    const history = await ok("slack", "get_channel_history", { channel: "C0RANDOM" })
    expect(history.messages[0]).toMatchObject({ ts: out.ts, text: "Hello *team*" })
  })

  it("reply_in_thread: chat.postMessage with thread_ts", async () => {
    const out = await ok("slack", "reply_in_thread", { channel: "C0GENERAL", thread_ts: "1700000100.000200", text: "Fixed now" })
    expect(last("slack").body).toEqual({ channel: "C0GENERAL", thread_ts: "1700000100.000200", text: "Fixed now", reply_broadcast: false })
    expect(out).toMatchObject({ channel: "C0GENERAL", thread_ts: "1700000100.000200", text: "Fixed now" })
    const history = await ok("slack", "get_channel_history", { channel: "C0GENERAL" })
    expect(history.messages.find((m: any) => m.ts === "1700000100.000200").reply_count).toBe(2)
  })

  it("add_reaction: POST reactions.add with the bare emoji name", async () => {
    const out = await ok("slack", "add_reaction", { channel: "C0GENERAL", timestamp: "1700000000.000100", name: ":thumbsup:" })
    expect([last("slack").path, last("slack").body]).toEqual(["/api/reactions.add", { channel: "C0GENERAL", timestamp: "1700000000.000100", name: "thumbsup" }])
    expect(out).toEqual({ ok: true, channel: "C0GENERAL", timestamp: "1700000000.000100", name: "thumbsup" })
    const history = await ok("slack", "get_channel_history", { channel: "C0GENERAL" })
    expect(history.messages.find((m: any) => m.ts === "1700000000.000100").reactions).toEqual([{ name: "thumbsup", count: 1 }])
    expect(await toolError("slack", "add_reaction", { channel: "C0GENERAL", timestamp: "1700000000.000100", name: "thumbsup" })).toBe("Slack error: already_reacted")
  })

  it("list_users: GET users.list", async () => {
    const out = await ok("slack", "list_users")
    expect([last("slack").path, last("slack").query]).toEqual(["/api/users.list", { limit: "50" }])
    expect(out.members.map((m: any) => m.name)).toEqual(["alice", "bob", "deploybot"])
    expect(out.members[2]).toMatchObject({ id: "U0BOT", is_bot: true, deleted: false })
  })

  it("get_user_info: GET users.info", async () => {
    const out = await ok("slack", "get_user_info", { user: "U0BOB" })
    expect([last("slack").path, last("slack").query]).toEqual(["/api/users.info", { user: "U0BOB" }])
    expect(out).toMatchObject({ id: "U0BOB", name: "bob", real_name: "Bob Builder", title: "SRE", email: "bob@example.com", tz: "Europe/London" })
  })

  it("search_messages: GET search.messages", async () => {
    const out = await ok("slack", "search_messages", { query: "login bug" })
    expect([last("slack").path, last("slack").query]).toEqual(["/api/search.messages", { query: "login bug", count: "20", sort: "score", page: "1" }])
    expect(out.total).toBe(2)
    expect(out.matches[0]).toMatchObject({ channel_id: "C0GENERAL", channel_name: "general", username: "alice", permalink: expect.stringContaining("/archives/C0GENERAL/") })
  })

  it("create_channel: POST conversations.create", async () => {
    const out = await ok("slack", "create_channel", { name: "proj-launch", is_private: "true" })
    expect([last("slack").path, last("slack").body]).toEqual(["/api/conversations.create", { name: "proj-launch", is_private: true }])
    expect(out).toMatchObject({ id: expect.stringMatching(/^G0/), name: "proj-launch", is_private: true, topic: "" })
    expect(await toolError("slack", "create_channel", { name: "proj-launch" })).toBe("Slack error: name_taken")
    expect(await toolError("slack", "create_channel", { name: "Bad Name" })).toBe("Slack error: invalid_name_specials")
  })

  it("set_channel_topic: POST conversations.setTopic", async () => {
    const out = await ok("slack", "set_channel_topic", { channel: "C0RANDOM", topic: "Cats and coffee" })
    expect([last("slack").path, last("slack").body]).toEqual(["/api/conversations.setTopic", { channel: "C0RANDOM", topic: "Cats and coffee" }])
    expect(out).toEqual({ id: "C0RANDOM", name: "random", topic: "Cats and coffee" })
  })

  it("Slack app errors (ok:false) are isError results; missing arguments too", async () => {
    expect(await toolError("slack", "get_channel_history", { channel: "C0NOPE" })).toBe("Slack error: channel_not_found")
    expect(await toolError("slack", "post_message", { channel: "C0GENERAL" })).toContain("\"text\"")
    expect(await toolError("slack", "search_messages", {})).toContain("\"query\"")
  })
})

// ---- Gmail ------------------------------------------------------------------------------------

describe("gmail", () => {
  it("send_email: POST messages/send with a base64url RFC 2822 raw", async () => {
    const out = await ok("gmail", "send_email", {
      to: ["ann@example.com", "Bob <bob@example.com>"],
      cc: "carol@example.com",
      subject: "Héllo from the gateway",
      body: "Line one\nLine two: ünïcode"
    })
    const req = last("gmail")
    expect([req.method, req.path]).toEqual(["POST", "/gmail/v1/users/me/messages/send"])
    expect(Object.keys(req.body)).toEqual(["raw"])
    expect(req.body.raw).toMatch(/^[A-Za-z0-9_-]+$/)
    const raw = Buffer.from(req.body.raw, "base64url").toString("utf8")
    expect(raw).toContain("To: ann@example.com, Bob <bob@example.com>\r\n")
    expect(raw).toContain("Subject: =?UTF-8?B?")
    const sent = fake.sentEmails.at(-1)!
    expect(sent.headers).toMatchObject({ to: "ann@example.com, Bob <bob@example.com>", cc: "carol@example.com", subject: "Héllo from the gateway", "mime-version": "1.0" })
    expect(sent.body).toBe("Line one\nLine two: ünïcode")
    expect(out).toEqual({ id: sent.id, thread_id: sent.threadId, labels: ["SENT"] })
  })

  it("send_email replies into a thread and refuses header injection", async () => {
    await ok("gmail", "send_email", { to: ["ann@example.com"], subject: "Re: Lunch", body: "Yes!", thread_id: "18c0000000000003", in_reply_to: "<lunch@example.com>" })
    expect(last("gmail").body.threadId).toBe("18c0000000000003")
    expect(fake.sentEmails.at(-1)!.headers).toMatchObject({ "in-reply-to": "<lunch@example.com>", references: "<lunch@example.com>" })
    const before = countFor("gmail")
    expect(await toolError("gmail", "send_email", { to: ["ann@example.com"], subject: "Hi\r\nBcc: evil@example.com", body: "x" })).toContain("line breaks")
    expect(await toolError("gmail", "send_email", { to: ["not-an-address"], subject: "Hi", body: "x" })).toContain("Not an email address")
    expect(await toolError("gmail", "send_email", { to: ["ann@example.com"], body: "x" })).toContain("\"subject\"")
    expect(countFor("gmail")).toBe(before)
  })

  it("search_emails: lists ids, then fetches each message's metadata", async () => {
    const before = countFor("gmail")
    const out = await ok("gmail", "search_emails", { query: "from:ann@example.com in:inbox" })
    const requests = fake.requestsFor("gmail").slice(before)
    expect(requests).toHaveLength(3)
    expect([requests[0]!.method, requests[0]!.path, requests[0]!.query]).toEqual(["GET", "/gmail/v1/users/me/messages", { q: "from:ann@example.com in:inbox", maxResults: "10" }])
    expect(requests.slice(1).map((r) => r.path).sort()).toEqual(["/gmail/v1/users/me/messages/18c0000000000001", "/gmail/v1/users/me/messages/18c0000000000003"])
    expect(requests[1]!.query).toEqual({ format: "metadata", metadataHeaders: "From,To,Subject,Date" })
    expect(out.result_size_estimate).toBe(2)
    expect(out.messages).toEqual([
      { id: "18c0000000000003", thread_id: "18c0000000000003", from: "Ann Example <ann@example.com>", to: "me@example.com", subject: "Lunch on Friday?", date: "Wed, 8 May 2024 11:00:00 +0000", snippet: "Shall we try the new place on Friday?", labels: ["INBOX"], unread: false },
      expect.objectContaining({ id: "18c0000000000001", subject: "Quarterly report", unread: true })
    ])
  })

  it("search_emails caps results and copes with no matches", async () => {
    expect(await toolError("gmail", "search_emails", { query: "x", max_results: 26 })).toContain("<= 25")
    expect(await ok("gmail", "search_emails", { query: "subject:nothing-like-this" })).toEqual({ result_size_estimate: 0, messages: [] })
    const one = await ok("gmail", "search_emails", { query: "in:inbox", max_results: 1 })
    expect(last("gmail").path).toMatch(/^\/gmail\/v1\/users\/me\/messages\/18c/)
    expect(one.messages).toHaveLength(1)
  })
})

// ---- Zendesk ----------------------------------------------------------------------------------

describe("zendesk", () => {
  it("list_tickets: GET /api/v2/tickets.json", async () => {
    const out = await ok("zendesk", "list_tickets")
    const req = last("zendesk")
    expect([req.method, req.path]).toEqual(["GET", "/api/v2/tickets.json"])
    expect(req.query).toEqual({ sort_by: "created_at", sort_order: "desc", per_page: "25", page: "1" })
    expect(req.headers.authorization).toBe("Bearer token-zendesk")
    expect(out.tickets.map((t: any) => t.id)).toEqual([2, 1])
    expect(out.tickets[1]).toMatchObject({ subject: "Printer on fire", status: "open", priority: "high", requester_id: 1002, assignee_id: 1001, tags: ["hardware"] })
    expect(out).toMatchObject({ count: 2, next_page: null })
  })

  it("get_ticket: GET /api/v2/tickets/{id}.json", async () => {
    const out = await ok("zendesk", "get_ticket", { id: 1 })
    expect([last("zendesk").method, last("zendesk").path]).toEqual(["GET", "/api/v2/tickets/1.json"])
    expect(out).toMatchObject({ id: 1, description: "The office printer is on fire.", type: "incident", via: "api" })
  })

  it("create_ticket: POST /api/v2/tickets.json, then get_ticket finds it", async () => {
    const out = await ok("zendesk", "create_ticket", { subject: "Refund please", body: "I was charged twice.", priority: "high", requester_email: "sam@customer.example", requester_name: "Sam" })
    const req = last("zendesk")
    expect([req.method, req.path]).toEqual(["POST", "/api/v2/tickets.json"])
    expect(req.body).toEqual({ ticket: { subject: "Refund please", comment: { body: "I was charged twice." }, priority: "high", requester: { email: "sam@customer.example", name: "Sam" } } })
    expect(out).toMatchObject({ id: 3, subject: "Refund please", status: "new", priority: "high" })
    expect(await ok("zendesk", "get_ticket", { id: out.id })).toMatchObject({ subject: "Refund please", description: "I was charged twice.", requester_id: out.requester_id })
  })

  it("update_ticket: PUT /api/v2/tickets/{id}.json with only the given fields", async () => {
    const out = await ok("zendesk", "update_ticket", { id: 2, status: "pending", assignee_id: 1001 })
    const req = last("zendesk")
    expect([req.method, req.path, req.body]).toEqual(["PUT", "/api/v2/tickets/2.json", { ticket: { status: "pending", assignee_id: 1001 } }])
    expect(out).toMatchObject({ id: 2, status: "pending", assignee_id: 1001 })
    expect(await toolError("zendesk", "update_ticket", { id: 2 })).toContain("Nothing to update")
    expect(await toolError("zendesk", "update_ticket", { id: 2, status: "done" })).toContain("one of new, open")
  })

  it("add_ticket_comment: PUT /api/v2/tickets/{id}.json with ticket.comment", async () => {
    const out = await ok("zendesk", "add_ticket_comment", { id: 2, body: "Internal: check the mail logs.", public: false })
    const req = last("zendesk")
    expect([req.method, req.path, req.body]).toEqual(["PUT", "/api/v2/tickets/2.json", { ticket: { comment: { body: "Internal: check the mail logs.", public: false } } }])
    expect(out).toMatchObject({ ticket_id: 2, public: false, audit_id: expect.any(Number) })
    await ok("zendesk", "add_ticket_comment", { id: 2, body: "We are on it." })
    expect(last("zendesk").body.ticket.comment).toEqual({ body: "We are on it.", public: true })
    const comments = await ok("zendesk", "list_ticket_comments", { id: 2 })
    expect(comments.comments.slice(-2).map((c: any) => [c.body, c.public])).toEqual([["Internal: check the mail logs.", false], ["We are on it.", true]])
  })

  it("list_ticket_comments: GET /api/v2/tickets/{id}/comments.json", async () => {
    const out = await ok("zendesk", "list_ticket_comments", { id: 1 })
    expect([last("zendesk").method, last("zendesk").path]).toEqual(["GET", "/api/v2/tickets/1/comments.json"])
    expect(out.comments).toEqual([
      { id: 4001, author_id: 1002, body: "The office printer is on fire.", public: true, created_at: "2024-05-01T09:00:00Z" },
      { id: 4002, author_id: 1001, body: "Fire brigade called.", public: false, created_at: "2024-05-01T09:30:00Z" }
    ])
  })

  it("search_tickets: GET /api/v2/search.json?query=type:ticket …", async () => {
    const out = await ok("zendesk", "search_tickets", { query: "status:open printer" })
    expect([last("zendesk").path, last("zendesk").query]).toEqual(["/api/v2/search.json", { query: "type:ticket status:open printer", sort_order: "desc", per_page: "25" }])
    expect(out).toEqual({ count: 1, results: [expect.objectContaining({ id: 1, subject: "Printer on fire" })] })
  })

  it("get_user: GET /api/v2/users/{id}.json", async () => {
    const out = await ok("zendesk", "get_user", { id: 1002 })
    expect(last("zendesk").path).toBe("/api/v2/users/1002.json")
    expect(out).toMatchObject({ id: 1002, name: "Jane Customer", email: "jane@customer.example", role: "end-user", active: true })
  })

  it("list_users: GET /api/v2/users.json?role=", async () => {
    const out = await ok("zendesk", "list_users", { role: "agent" })
    expect([last("zendesk").path, last("zendesk").query]).toEqual(["/api/v2/users.json", { role: "agent", per_page: "25", page: "1" }])
    expect(out.users.map((u: any) => u.name)).toEqual(["Agent Smith"])
  })

  it("create_user: POST /api/v2/users.json; a taken email is a 422 with Zendesk's explanation", async () => {
    const out = await ok("zendesk", "create_user", { name: "Pat Doe", email: "pat@customer.example" })
    expect([last("zendesk").method, last("zendesk").path, last("zendesk").body]).toEqual(["POST", "/api/v2/users.json", { user: { name: "Pat Doe", email: "pat@customer.example", role: "end-user" } }])
    expect(out).toMatchObject({ id: expect.any(Number), name: "Pat Doe", role: "end-user" })
    expect(await ok("zendesk", "get_user", { id: out.id })).toMatchObject({ email: "pat@customer.example" })
    const error = await appError("zendesk", "create_user", { name: "Pat Again", email: "pat@customer.example" })
    expect(error).toMatchObject({ status: 422, reauth: false })
    expect(error.message).toBe("provider answered 422: RecordInvalid: Record validation errors; Email: pat@customer.example is already being used by another user")
  })

  it("a missing ticket is a 404 AppApiError without re-auth", async () => {
    expect(await appError("zendesk", "get_ticket", { id: 999 })).toMatchObject({ status: 404, reauth: false, message: "provider answered 404: RecordNotFound: Not found" })
  })
})

// ---- errors and tokens --------------------------------------------------------------------------

describe("provider errors", () => {
  const probes: ReadonlyArray<readonly [ToolAppSlug, string, Record<string, unknown>]> = [
    ["github", "list_repos", {}],
    ["slack", "list_channels", {}],
    ["gmail", "search_emails", { query: "report" }],
    ["zendesk", "list_tickets", {}]
  ]

  it.each(probes)("%s: a wrong token is an AppApiError with reauth", async (app, tool, args) => {
    const error = await appError(app, tool, args, ctxFor(app, "stolen"))
    expect(error).toMatchObject({ status: 401, reauth: true })
  })

  it.each(probes)("%s: a revoked token is an AppApiError with reauth; setToken restores access", async (app, tool, args) => {
    fake.revoke(app)
    const error = await appError(app, tool, args)
    expect(error).toMatchObject({ status: 401, reauth: true })
    if (app === "slack") expect(error.message).toContain("invalid_auth")
    fake.setToken(app, `token-${app}`)
    await ok(app, tool, args)
  })

  it("other statuses carry the provider's message without reauth", async () => {
    fake.failNext("github", 403, "API rate limit exceeded for user")
    expect(await appError("github", "list_repos", {})).toEqual(new AppApiError({ status: 403, message: "provider answered 403: API rate limit exceeded for user", reauth: false }))
    fake.failNext("gmail", 500, "Backend Error")
    expect(await appError("gmail", "search_emails", { query: "x" })).toMatchObject({ status: 500, message: "provider answered 500: Backend Error", reauth: false })
    fake.failNext("slack", 429, "ratelimited")
    expect(await appError("slack", "list_users", {})).toMatchObject({ status: 429, reauth: false })
  })

  it("a network failure has status null", async () => {
    const closed = { apiUrl: "http://127.0.0.1:1", accessToken: "t" }
    const error = await appError("zendesk", "list_tickets", {}, closed)
    expect(error).toMatchObject({ status: null, reauth: false })
    expect(error.message).toContain("provider unreachable")
  })

  it("URLs join without double slashes and repeat array query values", () => {
    expect(buildUrl("https://x.test/api/", "/a", { b: ["1", "2"], c: undefined, d: 3 })).toBe("https://x.test/api/a?b=1&b=2&d=3")
  })
})

// ---- the fakes' OAuth endpoints -------------------------------------------------------------------

const s256 = async (verifier: string) => {
  const { createHash } = await import("node:crypto")
  return createHash("sha256").update(verifier).digest("base64url")
}

const authorize = async (app: ToolAppSlug, params: Record<string, string>) => {
  const url = new URL(oauthUrls(fake)[app].authorizeUrl)
  for (const [k, v] of Object.entries({ client_id: `client-${app}`, redirect_uri: "http://gw.test/oauth/callback", response_type: "code", state: "st-1", ...params })) {
    url.searchParams.set(k, v)
  }
  const res = await fetch(url, { redirect: "manual" })
  return { status: res.status, location: res.headers.get("location") === null ? undefined : new URL(res.headers.get("location")!) }
}

const exchange = async (app: ToolAppSlug, form: Record<string, string>, accept = "application/json") => {
  const res = await fetch(oauthUrls(fake)[app].tokenUrl, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept },
    body: new URLSearchParams({ client_id: `client-${app}`, client_secret: `secret-${app}`, redirect_uri: "http://gw.test/oauth/callback", ...form })
  })
  return { status: res.status, contentType: res.headers.get("content-type") ?? "", text: await res.text() }
}

describe("fake OAuth endpoints", () => {
  it("gmail: PKCE code flow, verifier checked, single-use code, refresh without rotation", async () => {
    const verifier = "v".repeat(50)
    const first = await authorize("gmail", { code_challenge: await s256(verifier), code_challenge_method: "S256", scope: "a b" })
    expect(first.status).toBe(302)
    expect(first.location?.searchParams.get("state")).toBe("st-1")
    const code = first.location!.searchParams.get("code")!
    expect((await exchange("gmail", { grant_type: "authorization_code", code, code_verifier: "wrong" })).status).toBe(400)
    // The failed attempt used the code up.
    expect(JSON.parse((await exchange("gmail", { grant_type: "authorization_code", code, code_verifier: verifier })).text)).toMatchObject({ error: "invalid_grant" })

    const again = await authorize("gmail", { code_challenge: await s256(verifier), code_challenge_method: "S256", scope: "a b" })
    const code2 = again.location!.searchParams.get("code")!
    const granted = await exchange("gmail", { grant_type: "authorization_code", code: code2, code_verifier: verifier })
    const tokens = JSON.parse(granted.text)
    expect(tokens).toEqual({ access_token: expect.stringMatching(/^ya29\./), token_type: "Bearer", scope: "a b", expires_in: 3599, refresh_token: expect.any(String) })
    const reused = await exchange("gmail", { grant_type: "authorization_code", code: code2, code_verifier: verifier })
    expect([reused.status, JSON.parse(reused.text).error]).toEqual([400, "invalid_grant"])

    // The issued token works with the tool; refresh keeps the refresh token (Google does not rotate).
    expect((await Effect.runPromise(toolOf("gmail", "search_emails").run(ctxFor("gmail", tokens.access_token), { query: "invoice" }))).isError).not.toBe(true)
    const refreshed = JSON.parse((await exchange("gmail", { grant_type: "refresh_token", refresh_token: tokens.refresh_token })).text)
    expect(refreshed).not.toHaveProperty("refresh_token")
    expect(refreshed.access_token).not.toBe(tokens.access_token)
    expect((await exchange("gmail", { grant_type: "refresh_token", refresh_token: tokens.refresh_token })).status).toBe(200)
  })

  it("github: PKCE is required at authorize; the token answer is form-encoded unless JSON is asked for", async () => {
    expect((await authorize("github", {})).status).toBe(400)
    const verifier = "w".repeat(43)
    const first = await authorize("github", { code_challenge: await s256(verifier), code_challenge_method: "S256", scope: "repo read:user" })
    const form = await exchange("github", { grant_type: "authorization_code", code: first.location!.searchParams.get("code")!, code_verifier: verifier }, "*/*")
    expect(form.contentType).toContain("application/x-www-form-urlencoded")
    expect(new URLSearchParams(form.text).get("scope")).toBe("repo,read:user")
    const second = await authorize("github", { code_challenge: await s256(verifier), code_challenge_method: "S256" })
    const bad = await exchange("github", { grant_type: "authorization_code", code: second.location!.searchParams.get("code")!, code_verifier: "nope" })
    expect([bad.status, JSON.parse(bad.text).error]).toEqual([200, "bad_verification_code"])
  })

  it("slack: no PKCE; the user token comes under authed_user and works with the tools", async () => {
    const { location } = await authorize("slack", { scope: "channels:read" })
    const granted = await exchange("slack", { grant_type: "authorization_code", code: location!.searchParams.get("code")! })
    const body = JSON.parse(granted.text)
    expect(body).toMatchObject({ ok: true, authed_user: { id: "U0ALICE", token_type: "user", access_token: expect.stringMatching(/^xoxp-/), refresh_token: expect.any(String), expires_in: 43200 } })
    expect(body).not.toHaveProperty("access_token")
    const result = await Effect.runPromise(toolOf("slack", "list_users").run(ctxFor("slack", body.authed_user.access_token), {}))
    expect(result.isError).not.toBe(true)
    expect(JSON.parse((await exchange("slack", { grant_type: "authorization_code", code: "made-up" })).text)).toEqual({ ok: false, error: "invalid_code" })
  })

  it("zendesk: refresh tokens rotate; expired access tokens answer 401; denied consent redirects with an error", async () => {
    const verifier = "z".repeat(64)
    fake.setExpiresIn("zendesk", 0)
    const { location } = await authorize("zendesk", { code_challenge: await s256(verifier), code_challenge_method: "S256", scope: "read write" })
    const tokens = JSON.parse((await exchange("zendesk", { grant_type: "authorization_code", code: location!.searchParams.get("code")!, code_verifier: verifier })).text)
    expect(tokens).toMatchObject({ token_type: "bearer", scope: "read write", expires_in: 0 })
    expect(await appError("zendesk", "list_tickets", {}, ctxFor("zendesk", tokens.access_token))).toMatchObject({ status: 401, reauth: true })
    fake.setExpiresIn("zendesk", 3600)
    const refreshed = JSON.parse((await exchange("zendesk", { grant_type: "refresh_token", refresh_token: tokens.refresh_token })).text)
    expect(refreshed.refresh_token).not.toBe(tokens.refresh_token)
    await Effect.runPromise(toolOf("zendesk", "list_tickets").run(ctxFor("zendesk", refreshed.access_token), {}))
    expect((await exchange("zendesk", { grant_type: "refresh_token", refresh_token: tokens.refresh_token })).status).toBe(400)
    expect((await exchange("zendesk", { grant_type: "authorization_code", code: "x" }, "application/json")).status).toBe(400)
    const wrongClient = await exchange("zendesk", { grant_type: "refresh_token", refresh_token: refreshed.refresh_token, client_secret: "guess" })
    expect(wrongClient.status).toBe(401)

    fake.denyNextAuthorize("zendesk")
    const denied = await authorize("zendesk", { code_challenge: await s256(verifier), code_challenge_method: "S256" })
    expect(Object.fromEntries(denied.location!.searchParams)).toMatchObject({ error: "access_denied", state: "st-1" })
    expect(denied.location!.searchParams.has("code")).toBe(false)
  })
})

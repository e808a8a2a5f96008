// Fakes of the four tool-app providers (GitHub, Slack, Gmail, Zendesk) on ONE node:http server on
// 127.0.0.1: each provider's real API paths under `/<app>`, in-memory data (create-then-get works),
// bearer-token checks with revocation and expiry, and each provider's OAuth authorize/token endpoints.
import { createHash, randomBytes } from "node:crypto"
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export type FakeApp = "github" | "slack" | "gmail" | "zendesk"
export const fakeApps: ReadonlyArray<FakeApp> = ["github", "slack", "gmail", "zendesk"]

export interface RecordedRequest {
  readonly app: FakeApp
  readonly method: string
  /** The path the real provider host would see: the fake's `/<app>` prefix removed (`/repos/o/r`, `/api/chat.postMessage`). */
  readonly path: string
  /** Query parameters; a repeated key's values are joined with "," (Gmail's metadataHeaders). */
  readonly query: Record<string, string>
  readonly headers: IncomingHttpHeaders
  /** Parsed JSON or form body; undefined when empty. */
  readonly body: any
}

export interface SentEmail {
  readonly id: string
  readonly threadId: string
  /** Parsed from the RFC 2822 `raw` the client sent (headers unfolded, encoded words decoded). */
  readonly headers: Record<string, string>
  readonly body: string
}

export interface FakeToolApisOptions {
  /**
   * Slack's authorization_code answer. "authed_user" (default, what Slack answers for user
   * scopes): `{ok:true, app_id, authed_user:{id, scope, access_token, token_type:"user",
   * refresh_token, expires_in}, team}`. "top_level": the same token at the top level as well.
   */
  readonly slackTokenShape?: "authed_user" | "top_level"
}

export interface FakeToolApis {
  readonly url: string
  readonly requests: Array<RecordedRequest>
  /** Authorize and token URLs per app, e.g. `${url}/github/oauth/authorize`. */
  readonly oauth: Record<FakeApp, { readonly authorizeUrl: string; readonly tokenUrl: string }>
  /** OAuth client per app; default `client-<app>` / `secret-<app>`. */
  readonly clients: Record<FakeApp, { clientId: string; clientSecret: string }>
  /** Emails received by Gmail's send endpoint, decoded. */
  readonly sentEmails: Array<SentEmail>
  /** The manually accepted bearer token (default `token-<app>`); also lifts a revoke. */
  readonly setToken: (app: FakeApp, token: string) => void
  /** Rejects every current access and refresh token of the app (401; Slack `invalid_auth`). New grants work. */
  readonly revoke: (app: FakeApp) => void
  /** `expires_in` of tokens issued from now on (null: none, never expire); expired tokens answer 401. */
  readonly setExpiresIn: (app: FakeApp, seconds: number | null) => void
  readonly setClient: (app: FakeApp, clientId: string, clientSecret: string) => void
  /** The next API call of the app answers this status with the provider's error body. */
  readonly failNext: (app: FakeApp, status: number, message?: string) => void
  /** The next authorize request redirects back with `error=access_denied`. */
  readonly denyNextAuthorize: (app: FakeApp) => void
  /** Access tokens issued by the token endpoint, oldest first. */
  readonly issuedTokens: (app: FakeApp) => ReadonlyArray<string>
  readonly requestsFor: (app: FakeApp) => ReadonlyArray<RecordedRequest>
  readonly close: () => Promise<void>
}

export const apiUrls = (fake: { readonly url: string }): Record<FakeApp, string> => ({
  github: `${fake.url}/github`,
  slack: `${fake.url}/slack/api`,
  gmail: `${fake.url}/gmail`,
  zendesk: `${fake.url}/zendesk`
})

export const oauthUrls = (fake: { readonly url: string }): Record<FakeApp, { readonly authorizeUrl: string; readonly tokenUrl: string }> => {
  const urls = (app: FakeApp) => ({ authorizeUrl: `${fake.url}/${app}/oauth/authorize`, tokenUrl: `${fake.url}/${app}/oauth/token` })
  return { github: urls("github"), slack: urls("slack"), gmail: urls("gmail"), zendesk: urls("zendesk") }
}

// ---- shared plumbing --------------------------------------------------------------------------

interface Reply {
  readonly status: number
  readonly body: unknown
  readonly headers?: Record<string, string>
}

interface Req {
  readonly method: string
  readonly path: string
  readonly query: Record<string, string>
  readonly headers: IncomingHttpHeaders
  readonly body: any
}

const json = (status: number, body: unknown): Reply => ({ status, body })

const isApp = (s: string | undefined): s is FakeApp => s !== undefined && (fakeApps as ReadonlyArray<string>).includes(s)

const readBody = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const parseBody = (text: string, contentType: string | undefined): any => {
  if (text === "") return undefined
  if ((contentType ?? "").includes("application/x-www-form-urlencoded")) return Object.fromEntries(new URLSearchParams(text))
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const queryOf = (params: URLSearchParams): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const key of new Set(params.keys())) out[key] = params.getAll(key).join(",")
  return out
}

const send = (res: ServerResponse, reply: Reply) => {
  const text = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body)
  res.writeHead(reply.status, { "content-type": "application/json; charset=utf-8", ...reply.headers })
  res.end(text)
}

const randomId = (bytes = 12) => randomBytes(bytes).toString("hex")
const s256 = (verifier: string) => createHash("sha256").update(verifier).digest("base64url")
const isoNow = () => new Date().toISOString()

/** Offset pagination over an array: 1-based `page`, `per` items. */
const paginate = <A>(items: ReadonlyArray<A>, page: number, per: number) => ({
  items: items.slice((page - 1) * per, page * per),
  hasMore: page * per < items.length
})

const intOr = (value: unknown, fallback: number) => {
  const n = Number(value)
  return Number.isInteger(n) && n > 0 ? n : fallback
}

type Route = readonly [method: string, pattern: RegExp, handler: (m: RegExpMatchArray, req: Req) => Reply]

const route = (routes: ReadonlyArray<Route>, req: Req, notFound: Reply): Reply => {
  for (const [method, pattern, handler] of routes) {
    const m = req.path.match(pattern)
    if (m !== null && method === req.method) return handler(m, req)
  }
  return notFound
}

// ---- per-provider error bodies ------------------------------------------------------------------

const errorBody = (app: FakeApp, status: number, message: string): Reply => {
  switch (app) {
    case "github":
      return json(status, { message, documentation_url: "https://docs.github.com/rest", status: String(status) })
    case "slack":
      return json(status, { ok: false, error: message })
    case "gmail":
      return json(status, { error: { code: status, message, status: status === 401 ? "UNAUTHENTICATED" : status === 404 ? "NOT_FOUND" : "INVALID_ARGUMENT" } })
    case "zendesk":
      return json(status, { error: status === 404 ? "RecordNotFound" : status === 422 ? "RecordInvalid" : message, description: message })
  }
}

const unauthorized = (app: FakeApp, expired: boolean): Reply => {
  switch (app) {
    case "github":
      return errorBody(app, 401, "Bad credentials")
    case "slack":
      // Slack answers 200 for auth failures too.
      return json(200, { ok: false, error: expired ? "token_expired" : "invalid_auth" })
    case "gmail":
      return errorBody(app, 401, "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
    case "zendesk":
      return json(401, { error: "Couldn't authenticate you" })
  }
}

// ---- GitHub -------------------------------------------------------------------------------------

interface GhComment {
  readonly id: number
  readonly body: string
  readonly user: string
  readonly created_at: string
}

interface GhIssue {
  readonly number: number
  title: string
  body: string | null
  state: "open" | "closed"
  readonly user: string
  labels: Array<string>
  assignees: Array<string>
  readonly comments: Array<GhComment>
  readonly created_at: string
  updated_at: string
  closed_at: string | null
  readonly pull?: { readonly head: string; readonly base: string; readonly draft: boolean; readonly merged: boolean; readonly additions: number; readonly deletions: number; readonly changed_files: number; readonly commits: number }
}

interface GhRepo {
  readonly owner: string
  readonly name: string
  readonly private: boolean
  readonly description: string
  readonly language: string
  readonly topics: ReadonlyArray<string>
  readonly stars: number
  readonly forks: number
  readonly files: Map<string, string>
  readonly issues: Array<GhIssue>
}

const GH_USER = "octocat"
const GH = "https://github.com"

const makeGitHub = () => {
  let commentIds = 9000
  const repos: Array<GhRepo> = [
    {
      owner: "octo-org",
      name: "widgets",
      private: false,
      description: "Widgets for every occasion",
      language: "TypeScript",
      topics: ["widgets", "ui"],
      stars: 42,
      forks: 7,
      files: new Map([
        ["README.md", "# Widgets\n\nWidgets for every occasion. Run `npm test`.\n"],
        ["src/index.ts", "export const widget = (name: string) => `widget:${name}`\n"],
        ["src/util.ts", "export const clamp = (n: number) => Math.max(0, n)\n"]
      ]),
      issues: [
        {
          number: 1,
          title: "Widgets wobble",
          body: "They wobble when spun.",
          state: "open",
          user: "hubot",
          labels: ["bug"],
          assignees: [GH_USER],
          comments: [{ id: 8001, body: "Confirmed.", user: GH_USER, created_at: "2024-05-01T10:00:00Z" }],
          created_at: "2024-05-01T09:00:00Z",
          updated_at: "2024-05-01T10:00:00Z",
          closed_at: null
        },
        {
          number: 2,
          title: "Add gizmo support",
          body: "Adds gizmos.",
          state: "open",
          user: GH_USER,
          labels: ["enhancement"],
          assignees: [],
          comments: [],
          created_at: "2024-05-02T09:00:00Z",
          updated_at: "2024-05-02T09:00:00Z",
          closed_at: null,
          pull: { head: "gizmo", base: "main", draft: false, merged: false, additions: 120, deletions: 4, changed_files: 3, commits: 2 }
        },
        {
          number: 3,
          title: "Old crash",
          body: null,
          state: "closed",
          user: "hubot",
          labels: [],
          assignees: [],
          comments: [],
          created_at: "2024-01-01T09:00:00Z",
          updated_at: "2024-01-02T09:00:00Z",
          closed_at: "2024-01-02T09:00:00Z"
        }
      ]
    },
    {
      owner: GH_USER,
      name: "hello-world",
      private: true,
      description: "My first repository",
      language: "Go",
      topics: [],
      stars: 1,
      forks: 0,
      files: new Map([["main.go", "package main\n\nfunc main() { println(\"hello\") }\n"]]),
      issues: []
    }
  ]

  const full = (r: GhRepo) => `${r.owner}/${r.name}`
  const findRepo = (owner: string, name: string) => repos.find((r) => r.owner === decodeURIComponent(owner) && r.name === decodeURIComponent(name))
  const userJson = (login: string) => ({ login, id: login.length * 1000, type: "User", html_url: `${GH}/${login}` })

  const repoJson = (r: GhRepo) => ({
    id: r.name.length * 7919,
    name: r.name,
    full_name: full(r),
    owner: userJson(r.owner),
    private: r.private,
    visibility: r.private ? "private" : "public",
    html_url: `${GH}/${full(r)}`,
    description: r.description,
    fork: false,
    language: r.language,
    default_branch: "main",
    topics: r.topics,
    archived: false,
    stargazers_count: r.stars,
    watchers_count: r.stars,
    subscribers_count: 3,
    forks_count: r.forks,
    open_issues_count: r.issues.filter((i) => i.state === "open").length,
    license: { key: "mit", spdx_id: "MIT", name: "MIT License" },
    created_at: "2023-01-01T00:00:00Z",
    updated_at: "2024-05-02T09:00:00Z",
    pushed_at: "2024-05-02T09:00:00Z"
  })

  const issueJson = (r: GhRepo, i: GhIssue) => ({
    id: 100000 + i.number,
    number: i.number,
    title: i.title,
    body: i.body,
    state: i.state,
    user: userJson(i.user),
    labels: i.labels.map((name) => ({ id: name.length, name, color: "ededed" })),
    assignees: i.assignees.map(userJson),
    assignee: i.assignees[0] === undefined ? null : userJson(i.assignees[0]),
    comments: i.comments.length,
    html_url: `${GH}/${full(r)}/${i.pull === undefined ? "issues" : "pull"}/${i.number}`,
    url: `https://api.github.com/repos/${full(r)}/issues/${i.number}`,
    created_at: i.created_at,
    updated_at: i.updated_at,
    closed_at: i.closed_at,
    ...(i.pull === undefined ? {} : { pull_request: { url: `https://api.github.com/repos/${full(r)}/pulls/${i.number}` } })
  })

  const pullJson = (r: GhRepo, i: GhIssue) => {
    const p = i.pull!
    return {
      id: 200000 + i.number,
      number: i.number,
      title: i.title,
      body: i.body,
      state: i.state,
      user: userJson(i.user),
      labels: i.labels.map((name) => ({ name })),
      draft: p.draft,
      head: { ref: p.head, sha: "a".repeat(40), label: `${r.owner}:${p.head}` },
      base: { ref: p.base, sha: "b".repeat(40), label: `${r.owner}:${p.base}` },
      html_url: `${GH}/${full(r)}/pull/${i.number}`,
      created_at: i.created_at,
      updated_at: i.updated_at,
      closed_at: i.closed_at,
      merged_at: p.merged ? i.updated_at : null,
      merged: p.merged,
      mergeable: true,
      commits: p.commits,
      additions: p.additions,
      deletions: p.deletions,
      changed_files: p.changed_files
    }
  }

  const sha = (text: string) => createHash("sha1").update(text).digest("hex")
  const fileJson = (r: GhRepo, path: string, content: string) => ({
    type: "file",
    encoding: "base64",
    name: path.split("/").at(-1),
    path,
    size: Buffer.byteLength(content),
    sha: sha(content),
    html_url: `${GH}/${full(r)}/blob/main/${path}`,
    // GitHub wraps the base64 at 60 characters.
    content: Buffer.from(content).toString("base64").replace(/.{60}/g, "$&\n")
  })

  const notFound = errorBody("github", 404, "Not Found")
  const invalid = (field: string) =>
    json(422, { message: "Validation Failed", errors: [{ resource: "Issue", field, code: "missing_field" }], documentation_url: "https://docs.github.com/rest" })

  const withRepo = (m: RegExpMatchArray, then: (r: GhRepo) => Reply) => {
    const r = findRepo(m[1]!, m[2]!)
    return r === undefined ? notFound : then(r)
  }
  const withIssue = (m: RegExpMatchArray, then: (r: GhRepo, i: GhIssue) => Reply) =>
    withRepo(m, (r) => {
      const i = r.issues.find((x) => x.number === Number(m[3]))
      return i === undefined ? notFound : then(r, i)
    })

  const routes: ReadonlyArray<Route> = [
    ["GET", /^\/user\/repos$/, (_m, req) => {
      const visible = repos.filter((r) => req.query.visibility === undefined || req.query.visibility === "all" || (req.query.visibility === "private") === r.private)
      return json(200, paginate(visible, intOr(req.query.page, 1), intOr(req.query.per_page, 30)).items.map(repoJson))
    }],
    ["GET", /^\/repos\/([^/]+)\/([^/]+)$/, (m) => withRepo(m, (r) => json(200, repoJson(r)))],
    ["GET", /^\/repos\/([^/]+)\/([^/]+)\/issues$/, (m, req) =>
      withRepo(m, (r) => {
        const state = req.query.state ?? "open"
        const labels = (req.query.labels ?? "").split(",").filter((l) => l !== "")
        const matching = r.issues
          .filter((i) => state === "all" || i.state === state)
          .filter((i) => labels.every((l) => i.labels.includes(l)))
          .filter((i) => req.query.assignee === undefined || i.assignees.includes(req.query.assignee))
          .sort((a, b) => b.number - a.number)
        return json(200, paginate(matching, intOr(req.query.page, 1), intOr(req.query.per_page, 30)).items.map((i) => issueJson(r, i)))
      })],
    ["GET", /^\/repos\/([^/]+)\/([^/]+)\/issues\/(\d+)$/, (m) => withIssue(m, (r, i) => json(200, issueJson(r, i)))],
    ["POST", /^\/repos\/([^/]+)\/([^/]+)\/issues$/, (m, req) =>
      withRepo(m, (r) => {
        if (typeof req.body?.title !== "string" || req.body.title === "") return invalid("title")
        const issue: GhIssue = {
          number: Math.max(0, ...r.issues.map((i) => i.number)) + 1,
          title: req.body.title,
          body: req.body.body ?? null,
          state: "open",
          user: GH_USER,
          labels: req.body.labels ?? [],
          assignees: req.body.assignees ?? [],
          comments: [],
          created_at: isoNow(),
          updated_at: isoNow(),
          closed_at: null
        }
        r.issues.push(issue)
        return json(201, issueJson(r, issue))
      })],
    ["POST", /^\/repos\/([^/]+)\/([^/]+)\/issues\/(\d+)\/comments$/, (m, req) =>
      withIssue(m, (r, i) => {
        if (typeof req.body?.body !== "string" || req.body.body === "") return invalid("body")
        const comment = { id: ++commentIds, body: req.body.body, user: GH_USER, created_at: isoNow() }
        i.comments.push(comment)
        i.updated_at = comment.created_at
        return json(201, {
          id: comment.id,
          body: comment.body,
          user: userJson(GH_USER),
          html_url: `${GH}/${full(r)}/issues/${i.number}#issuecomment-${comment.id}`,
          created_at: comment.created_at,
          updated_at: comment.created_at
        })
      })],
    ["GET", /^\/repos\/([^/]+)\/([^/]+)\/pulls$/, (m, req) =>
      withRepo(m, (r) => {
        const state = req.query.state ?? "open"
        const pulls = r.issues
          .filter((i) => i.pull !== undefined && (state === "all" || i.state === state))
          .filter((i) => req.query.base === undefined || i.pull?.base === req.query.base)
          .filter((i) => req.query.head === undefined || `${r.owner}:${i.pull?.head}` === req.query.head)
        return json(200, paginate(pulls, intOr(req.query.page, 1), intOr(req.query.per_page, 30)).items.map((i) => pullJson(r, i)))
      })],
    ["GET", /^\/repos\/([^/]+)\/([^/]+)\/pulls\/(\d+)$/, (m) =>
      withIssue(m, (r, i) => (i.pull === undefined ? notFound : json(200, pullJson(r, i))))],
    ["GET", /^\/repos\/([^/]+)\/([^/]+)\/contents\/(.*)$/, (m, req) =>
      withRepo(m, (r) => {
        if (req.query.ref !== undefined && req.query.ref !== "main") {
          return errorBody("github", 404, `No commit found for the ref ${req.query.ref}`)
        }
        const path = decodeURIComponent(m[3]!)
        const file = r.files.get(path)
        if (file !== undefined) return json(200, fileJson(r, path, file))
        const children = [...r.files.keys()].filter((p) => p.startsWith(`${path}/`))
        if (children.length === 0) return notFound
        const names = [...new Set(children.map((p) => p.slice(path.length + 1).split("/")[0]!))]
        return json(200, names.map((name) => {
          const child = `${path}/${name}`
          const content = r.files.get(child)
          return { name, path: child, type: content === undefined ? "dir" : "file", size: content === undefined ? 0 : Buffer.byteLength(content), sha: sha(child) }
        }))
      })],
    ["GET", /^\/search\/code$/, (_m, req) => {
      const q = req.query.q ?? ""
      if (q.trim() === "") return invalid("q")
      const terms = q.split(/\s+/).filter((t) => t !== "")
      const repoFilter = terms.find((t) => t.startsWith("repo:"))?.slice(5)
      const words = terms.filter((t) => !t.includes(":")).map((w) => w.toLowerCase())
      const items = repos
        .filter((r) => repoFilter === undefined || full(r) === repoFilter)
        .flatMap((r) => [...r.files].filter(([, c]) => words.every((w) => c.toLowerCase().includes(w))).map(([path, c]) => ({
          name: path.split("/").at(-1),
          path,
          sha: sha(c),
          url: `https://api.github.com/repos/${full(r)}/contents/${path}`,
          html_url: `${GH}/${full(r)}/blob/main/${path}`,
          repository: { id: 1, full_name: full(r), private: r.private, html_url: `${GH}/${full(r)}` },
          score: 1
        })))
      return json(200, { total_count: items.length, incomplete_results: false, items })
    }]
  ]

  return { handle: (req: Req) => route(routes, req, notFound) }
}

// ---- Slack --------------------------------------------------------------------------------------

interface SlackMessage {
  readonly ts: string
  readonly user: string
  readonly text: string
  readonly thread_ts?: string
  reply_count?: number
  readonly reactions: Array<{ name: string; users: Array<string> }>
}

interface SlackChannel {
  readonly id: string
  readonly name: string
  readonly is_private: boolean
  readonly is_archived: boolean
  topic: string
  readonly purpose: string
  readonly members: ReadonlyArray<string>
  readonly messages: Array<SlackMessage>
}

const SLACK_SELF = "U0ALICE"

const makeSlack = () => {
  let tsCounter = 0
  const nextTs = () => `${1_700_001_000 + ++tsCounter}.${String(tsCounter).padStart(6, "0")}`
  const users = [
    { id: SLACK_SELF, name: "alice", real_name: "Alice Liddell", display_name: "alice", title: "Engineer", email: "alice@example.com", is_bot: false, deleted: false, is_admin: true },
    { id: "U0BOB", name: "bob", real_name: "Bob Builder", display_name: "bob", title: "SRE", email: "bob@example.com", is_bot: false, deleted: false, is_admin: false },
    { id: "U0BOT", name: "deploybot", real_name: "Deploy Bot", display_name: "", title: "", email: "", is_bot: true, deleted: false, is_admin: false }
  ]
  const channels: Array<SlackChannel> = [
    {
      id: "C0GENERAL",
      name: "general",
      is_private: false,
      is_archived: false,
      topic: "Company-wide announcements",
      purpose: "Everyone",
      members: [SLACK_SELF, "U0BOB", "U0BOT"],
      messages: [
        { ts: "1700000000.000100", user: "U0BOB", text: "Deploy finished for v1.2", reactions: [] },
        { ts: "1700000100.000200", user: SLACK_SELF, text: "Anyone seen the login bug?", reply_count: 1, thread_ts: "1700000100.000200", reactions: [] },
        { ts: "1700000200.000300", user: "U0BOB", text: "Yes, looking into the login bug now", thread_ts: "1700000100.000200", reactions: [] }
      ]
    },
    { id: "C0RANDOM", name: "random", is_private: false, is_archived: false, topic: "", purpose: "Chatter", members: [SLACK_SELF, "U0BOB"], messages: [] },
    { id: "G0SECRET", name: "leads", is_private: true, is_archived: false, topic: "", purpose: "", members: [SLACK_SELF], messages: [] },
    { id: "C0OLD", name: "old-stuff", is_private: false, is_archived: true, topic: "", purpose: "", members: [], messages: [] }
  ]

  const ok = (body: Record<string, unknown>) => json(200, { ok: true, ...body })
  const fail = (error: string) => json(200, { ok: false, error })
  const channelJson = (c: SlackChannel) => ({
    id: c.id,
    name: c.name,
    is_channel: !c.is_private,
    is_group: c.is_private,
    is_private: c.is_private,
    is_archived: c.is_archived,
    is_member: c.members.includes(SLACK_SELF),
    created: 1_690_000_000,
    creator: SLACK_SELF,
    num_members: c.members.length,
    topic: { value: c.topic, creator: c.topic === "" ? "" : SLACK_SELF, last_set: 0 },
    purpose: { value: c.purpose, creator: "", last_set: 0 }
  })
  const messageJson = (m: SlackMessage) => ({
    type: "message",
    user: m.user,
    text: m.text,
    ts: m.ts,
    ...(m.thread_ts === undefined ? {} : { thread_ts: m.thread_ts }),
    ...(m.reply_count === undefined ? {} : { reply_count: m.reply_count }),
    ...(m.reactions.length === 0 ? {} : { reactions: m.reactions.map((r) => ({ name: r.name, users: r.users, count: r.users.length })) })
  })
  const userJson = (u: (typeof users)[number]) => ({
    id: u.id,
    team_id: "T0FAKE",
    name: u.name,
    real_name: u.real_name,
    deleted: u.deleted,
    is_bot: u.is_bot,
    is_admin: u.is_admin,
    tz: "Europe/London",
    profile: { display_name: u.display_name, real_name: u.real_name, title: u.title, email: u.email }
  })
  // Cursor pagination: the cursor is the next offset, opaque to clients.
  const page = <A>(items: ReadonlyArray<A>, args: Record<string, any>) => {
    const offset = args.cursor === undefined || args.cursor === "" ? 0 : Number(Buffer.from(String(args.cursor), "base64").toString("utf8").replace("offset:", ""))
    const limit = intOr(args.limit, 100)
    const next = offset + limit < items.length ? Buffer.from(`offset:${offset + limit}`).toString("base64") : ""
    return { items: items.slice(offset, offset + limit), response_metadata: { next_cursor: next } }
  }
  const findChannel = (id: unknown) => channels.find((c) => c.id === id)
  const flag = (v: unknown, fallback: boolean) => (v === undefined ? fallback : v === true || v === "true" || v === "1")

  const methods: Record<string, (args: Record<string, any>) => Reply> = {
    "conversations.list": (args) => {
      const types = String(args.types ?? "public_channel").split(",")
      const listed = channels
        .filter((c) => types.includes(c.is_private ? "private_channel" : "public_channel"))
        .filter((c) => !(flag(args.exclude_archived, false) && c.is_archived))
      const p = page(listed, args)
      return ok({ channels: p.items.map(channelJson), response_metadata: p.response_metadata })
    },
    "conversations.history": (args) => {
      const c = findChannel(args.channel)
      if (c === undefined) return fail("channel_not_found")
      // History lists top-level messages (thread parents), newest first.
      const top = c.messages.filter((m) => m.thread_ts === undefined || m.thread_ts === m.ts).slice().reverse()
      const p = page(top, args)
      return ok({ messages: p.items.map(messageJson), has_more: p.response_metadata.next_cursor !== "", response_metadata: p.response_metadata })
    },
    "chat.postMessage": (args) => {
      const c = findChannel(args.channel)
      if (c === undefined) return fail("channel_not_found")
      if (typeof args.text !== "string" || args.text === "") return fail("no_text")
      if (c.is_archived) return fail("is_archived")
      const thread = typeof args.thread_ts === "string" ? args.thread_ts : undefined
      const parent = thread === undefined ? undefined : c.messages.find((m) => m.ts === thread)
      if (thread !== undefined && parent === undefined) return fail("thread_not_found")
      const message: SlackMessage = { ts: nextTs(), user: SLACK_SELF, text: args.text, reactions: [], ...(thread === undefined ? {} : { thread_ts: thread }) }
      if (parent !== undefined) parent.reply_count = (parent.reply_count ?? 0) + 1
      c.messages.push(message)
      return ok({ channel: c.id, ts: message.ts, message: messageJson(message) })
    },
    "reactions.add": (args) => {
      const c = findChannel(args.channel)
      if (c === undefined) return fail("channel_not_found")
      const m = c.messages.find((x) => x.ts === args.timestamp)
      if (m === undefined) return fail("message_not_found")
      if (typeof args.name !== "string" || !/^[a-z0-9_+-]+$/.test(args.name)) return fail("invalid_name")
      const existing = m.reactions.find((r) => r.name === args.name)
      if (existing?.users.includes(SLACK_SELF)) return fail("already_reacted")
      if (existing === undefined) m.reactions.push({ name: args.name, users: [SLACK_SELF] })
      else existing.users.push(SLACK_SELF)
      return ok({})
    },
    "users.list": (args) => {
      const p = page(users, args)
      return ok({ members: p.items.map(userJson), response_metadata: p.response_metadata })
    },
    "users.info": (args) => {
      const u = users.find((x) => x.id === args.user)
      return u === undefined ? fail("user_not_found") : ok({ user: userJson(u) })
    },
    "search.messages": (args) => {
      const query = String(args.query ?? "")
      if (query.trim() === "") return fail("no_query")
      const terms = query.split(/\s+/).filter((t) => t !== "")
      const inChannel = terms.find((t) => t.startsWith("in:#"))?.slice(4)
      const words = terms.filter((t) => !t.includes(":")).map((w) => w.toLowerCase())
      const matches = channels
        .filter((c) => inChannel === undefined || c.name === inChannel)
        .flatMap((c) => c.messages.filter((m) => words.every((w) => m.text.toLowerCase().includes(w))).map((m) => ({
          iid: randomId(4),
          type: "message",
          ts: m.ts,
          text: m.text,
          user: m.user,
          username: users.find((u) => u.id === m.user)?.name,
          channel: { id: c.id, name: c.name, is_private: c.is_private },
          permalink: `https://fake.slack.com/archives/${c.id}/p${m.ts.replace(".", "")}`
        })))
      const count = intOr(args.count, 20)
      const pageNo = intOr(args.page, 1)
      return ok({
        query,
        messages: {
          total: matches.length,
          matches: paginate(matches, pageNo, count).items,
          paging: { count, total: matches.length, page: pageNo, pages: Math.max(1, Math.ceil(matches.length / count)) }
        }
      })
    },
    "conversations.create": (args) => {
      const name = String(args.name ?? "")
      if (name === "") return fail("invalid_name_required")
      if (!/^[a-z0-9_-]{1,80}$/.test(name)) return fail("invalid_name_specials")
      if (channels.some((c) => c.name === name)) return fail("name_taken")
      const isPrivate = flag(args.is_private, false)
      const c: SlackChannel = { id: `${isPrivate ? "G" : "C"}0${randomId(4).toUpperCase()}`, name, is_private: isPrivate, is_archived: false, topic: "", purpose: "", members: [SLACK_SELF], messages: [] }
      channels.push(c)
      return ok({ channel: channelJson(c) })
    },
    "conversations.setTopic": (args) => {
      const c = findChannel(args.channel)
      if (c === undefined) return fail("channel_not_found")
      if (typeof args.topic !== "string") return fail("invalid_arguments")
      if (args.topic.length > 250) return fail("too_long")
      c.topic = args.topic
      return ok({ channel: channelJson(c) })
    }
  }

  return {
    handle: (req: Req): Reply => {
      const m = req.path.match(/^\/api\/([a-zA-Z.]+)$/)
      const method = m === null ? undefined : methods[m[1]!]
      if (method === undefined) return json(404, { ok: false, error: "unknown_method" })
      // Slack takes arguments from the query string, a form body or (write methods) JSON.
      const args = { ...req.query, ...(typeof req.body === "object" && req.body !== null ? req.body : {}) }
      return method(args)
    }
  }
}

// ---- Gmail --------------------------------------------------------------------------------------

interface GmailMessage {
  readonly id: string
  readonly threadId: string
  readonly labelIds: ReadonlyArray<string>
  readonly headers: Record<string, string>
  readonly body: string
}

/** Minimal RFC 2822/MIME reading: unfolded headers, RFC 2047 B/Q words, base64 or plain single-part bodies. */
export const parseRfc2822 = (raw: string): { readonly headers: Record<string, string>; readonly body: string } => {
  const split = raw.search(/\r?\n\r?\n/)
  const head = split === -1 ? raw : raw.slice(0, split)
  const rest = split === -1 ? "" : raw.slice(split).replace(/^\r?\n\r?\n/, "")
  const headers: Record<string, string> = {}
  for (const line of head.replace(/\r?\n[ \t]+/g, " ").split(/\r?\n/)) {
    const colon = line.indexOf(":")
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = decodeWords(line.slice(colon + 1).trim())
  }
  const body = /base64/i.test(headers["content-transfer-encoding"] ?? "") ? Buffer.from(rest.replace(/\s+/g, ""), "base64").toString("utf8") : rest
  return { headers, body }
}

const decodeWords = (value: string) =>
  value.replace(/=\?utf-8\?([bq])\?([^?]*)\?=/gi, (_all, kind: string, text: string) =>
    kind.toLowerCase() === "b"
      ? Buffer.from(text, "base64").toString("utf8")
      : decodeURIComponent(text.replace(/_/g, " ").replace(/=([0-9a-f]{2})/gi, "%$1")))

const makeGmail = (sentEmails: Array<SentEmail>) => {
  const messages: Array<GmailMessage> = [
    { id: "18c0000000000001", threadId: "18c0000000000001", labelIds: ["INBOX", "UNREAD"], headers: { from: "Ann Example <ann@example.com>", to: "me@example.com", subject: "Quarterly report", date: "Mon, 6 May 2024 09:00:00 +0000" }, body: "Please find the Q3 report attached. Numbers look good." },
    { id: "18c0000000000002", threadId: "18c0000000000002", labelIds: ["INBOX"], headers: { from: "billing@vendor.example", to: "me@example.com", subject: "Invoice 1042", date: "Tue, 7 May 2024 10:00:00 +0000" }, body: "Your invoice 1042 for May is due on the 31st." },
    { id: "18c0000000000003", threadId: "18c0000000000003", labelIds: ["INBOX"], headers: { from: "Ann Example <ann@example.com>", to: "me@example.com", subject: "Lunch on Friday?", date: "Wed, 8 May 2024 11:00:00 +0000" }, body: "Shall we try the new place on Friday?" }
  ]
  const snippet = (m: GmailMessage) => m.body.slice(0, 100)
  const googleError = (status: number, message: string) => errorBody("gmail", status, message)

  // Gmail search, reduced: from:, to:, subject:, is:unread, in:/label:, and plain words (all must match).
  const matches = (m: GmailMessage, q: string) =>
    q.split(/\s+/).filter((t) => t !== "").every((term) => {
      const [key, value] = term.includes(":") ? [term.slice(0, term.indexOf(":")), term.slice(term.indexOf(":") + 1).toLowerCase()] : ["", term.toLowerCase()]
      const has = (field: string | undefined) => (field ?? "").toLowerCase().includes(value)
      switch (key) {
        case "from": return has(m.headers.from)
        case "to": return has(m.headers.to)
        case "subject": return has(m.headers.subject)
        case "is": return value === "unread" ? m.labelIds.includes("UNREAD") : true
        case "in":
        case "label": return m.labelIds.includes(value.toUpperCase())
        default: return has(`${m.headers.subject} ${m.headers.from} ${m.body}`)
      }
    })

  const metadataJson = (m: GmailMessage, wanted: ReadonlyArray<string>) => ({
    id: m.id,
    threadId: m.threadId,
    labelIds: m.labelIds,
    snippet: snippet(m),
    sizeEstimate: m.body.length + 200,
    historyId: "123456",
    internalDate: String(Date.parse(m.headers.date ?? "") || 0),
    payload: {
      mimeType: "text/plain",
      headers: Object.entries(m.headers)
        .map(([name, value]) => ({ name: name.replace(/(^|-)\w/g, (c) => c.toUpperCase()), value }))
        .filter((h) => wanted.length === 0 || wanted.some((w) => w.toLowerCase() === h.name.toLowerCase()))
    }
  })

  const routes: ReadonlyArray<Route> = [
    ["GET", /^\/gmail\/v1\/users\/me\/messages$/, (_m, req) => {
      const found = messages.filter((m) => matches(m, req.query.q ?? "")).slice().reverse()
      const limited = found.slice(0, intOr(req.query.maxResults, 100))
      // Like Gmail, no `messages` key at all when nothing matches.
      return json(200, { ...(limited.length === 0 ? {} : { messages: limited.map((m) => ({ id: m.id, threadId: m.threadId })) }), resultSizeEstimate: found.length })
    }],
    ["GET", /^\/gmail\/v1\/users\/me\/messages\/([^/]+)$/, (m, req) => {
      const message = messages.find((x) => x.id === decodeURIComponent(m[1]!))
      if (message === undefined) return googleError(404, "Requested entity was not found.")
      const wanted = (req.query.metadataHeaders ?? "").split(",").filter((h) => h !== "")
      return json(200, metadataJson(message, req.query.format === "metadata" ? wanted : []))
    }],
    ["POST", /^\/gmail\/v1\/users\/me\/messages\/send$/, (_m, req) => {
      const raw = req.body?.raw
      if (typeof raw !== "string" || raw === "") return googleError(400, "'raw' RFC822 payload message string or uploading message via /upload/* URL required")
      if (/[+/=]/.test(raw)) return googleError(400, "Invalid value for ByteString: raw must be base64url")
      const parsed = parseRfc2822(Buffer.from(raw, "base64url").toString("utf8"))
      if ((parsed.headers.to ?? "") === "") return googleError(400, "Invalid To header")
      const id = `18d${randomId(7)}`
      const threadId = typeof req.body.threadId === "string" ? req.body.threadId : id
      const headers = { from: "me@example.com", date: new Date().toUTCString(), ...parsed.headers }
      messages.push({ id, threadId, labelIds: ["SENT"], headers, body: parsed.body })
      sentEmails.push({ id, threadId, headers, body: parsed.body })
      return json(200, { id, threadId, labelIds: ["SENT"] })
    }]
  ]

  return { handle: (req: Req) => route(routes, req, googleError(404, "Not Found")) }
}

// ---- Zendesk ------------------------------------------------------------------------------------

interface ZdUser {
  readonly id: number
  readonly name: string
  readonly email: string
  readonly role: string
  readonly created_at: string
}

interface ZdComment {
  readonly id: number
  readonly author_id: number
  readonly body: string
  readonly public: boolean
  readonly created_at: string
}

interface ZdTicket {
  readonly id: number
  subject: string
  readonly description: string
  status: string
  priority: string | null
  type: string | null
  readonly requester_id: number
  assignee_id: number | null
  tags: Array<string>
  readonly comments: Array<ZdComment>
  readonly created_at: string
  updated_at: string
}

const ZD_SELF = 1001

const makeZendesk = (base: () => string) => {
  let ids = 5000
  const users: Array<ZdUser> = [
    { id: ZD_SELF, name: "Agent Smith", email: "agent@example.com", role: "agent", created_at: "2023-01-01T00:00:00Z" },
    { id: 1002, name: "Jane Customer", email: "jane@customer.example", role: "end-user", created_at: "2023-02-01T00:00:00Z" },
    { id: 1003, name: "Admin Ada", email: "ada@example.com", role: "admin", created_at: "2023-01-01T00:00:00Z" }
  ]
  const tickets: Array<ZdTicket> = [
    { id: 1, subject: "Printer on fire", description: "The office printer is on fire.", status: "open", priority: "high", type: "incident", requester_id: 1002, assignee_id: ZD_SELF, tags: ["hardware"], created_at: "2024-05-01T09:00:00Z", updated_at: "2024-05-01T09:30:00Z", comments: [
      { id: 4001, author_id: 1002, body: "The office printer is on fire.", public: true, created_at: "2024-05-01T09:00:00Z" },
      { id: 4002, author_id: ZD_SELF, body: "Fire brigade called.", public: false, created_at: "2024-05-01T09:30:00Z" }
    ] },
    { id: 2, subject: "Cannot log in", description: "Password reset mail never arrives.", status: "new", priority: "normal", type: "question", requester_id: 1002, assignee_id: null, tags: [], created_at: "2024-05-02T09:00:00Z", updated_at: "2024-05-02T09:00:00Z", comments: [
      { id: 4003, author_id: 1002, body: "Password reset mail never arrives.", public: true, created_at: "2024-05-02T09:00:00Z" }
    ] }
  ]

  const api = () => `${base()}/api/v2`
  const notFound = json(404, { error: "RecordNotFound", description: "Not found" })
  const invalid = (field: string, description: string) =>
    json(422, { error: "RecordInvalid", description: "Record validation errors", details: { [field]: [{ description, error: "InvalidValue" }] } })

  const ticketJson = (t: ZdTicket) => ({
    id: t.id,
    url: `${api()}/tickets/${t.id}.json`,
    subject: t.subject,
    raw_subject: t.subject,
    description: t.description,
    status: t.status,
    priority: t.priority,
    type: t.type,
    requester_id: t.requester_id,
    submitter_id: t.requester_id,
    assignee_id: t.assignee_id,
    group_id: null,
    organization_id: null,
    tags: t.tags,
    via: { channel: "api" },
    created_at: t.created_at,
    updated_at: t.updated_at
  })
  const userJson = (u: ZdUser) => ({ id: u.id, url: `${api()}/users/${u.id}.json`, name: u.name, email: u.email, role: u.role, active: true, organization_id: null, time_zone: "London", created_at: u.created_at, updated_at: u.created_at })
  const listPage = <A>(key: string, items: ReadonlyArray<A>, req: Req, path: string) => {
    const pageNo = intOr(req.query.page, 1)
    const p = paginate(items, pageNo, intOr(req.query.per_page, 100))
    return json(200, { [key]: p.items, count: items.length, next_page: p.hasMore ? `${api()}${path}?page=${pageNo + 1}` : null, previous_page: pageNo > 1 ? `${api()}${path}?page=${pageNo - 1}` : null })
  }
  const sorted = (items: ReadonlyArray<ZdTicket>, by: string | undefined, order: string | undefined) => {
    const key = (by ?? "created_at") as keyof ZdTicket
    const dir = order === "desc" ? -1 : 1
    return items.slice().sort((a, b) => String(a[key]).localeCompare(String(b[key])) * dir || (a.id - b.id) * dir)
  }
  const withTicket = (m: RegExpMatchArray, then: (t: ZdTicket) => Reply) => {
    const t = tickets.find((x) => x.id === Number(m[1]))
    return t === undefined ? notFound : then(t)
  }
  const findOrCreateUser = (requester: { email?: unknown; name?: unknown }): ZdUser => {
    const existing = users.find((u) => u.email === requester.email)
    if (existing !== undefined) return existing
    const user = { id: ++ids, name: typeof requester.name === "string" ? requester.name : String(requester.email), email: String(requester.email), role: "end-user", created_at: isoNow() }
    users.push(user)
    return user
  }
  const audit = (t: ZdTicket, events: ReadonlyArray<Record<string, unknown>>) => ({ id: ++ids, ticket_id: t.id, author_id: ZD_SELF, created_at: t.updated_at, events })

  const statuses = ["new", "open", "pending", "hold", "solved", "closed"]
  const priorities = ["urgent", "high", "normal", "low"]

  // Zendesk search, reduced: type:, status:, priority:, tags: qualifiers and plain words.
  const searchMatches = (t: ZdTicket, query: string) =>
    query.split(/\s+/).filter((w) => w !== "").every((term) => {
      const colon = term.indexOf(":")
      const [key, value] = colon === -1 ? ["", term.toLowerCase()] : [term.slice(0, colon), term.slice(colon + 1).toLowerCase()]
      switch (key) {
        case "type": return value === "ticket"
        case "status": return t.status === value
        case "priority": return t.priority === value
        case "tags": return t.tags.includes(value)
        default: return `${t.subject} ${t.description}`.toLowerCase().includes(value)
      }
    })

  const routes: ReadonlyArray<Route> = [
    ["GET", /^\/api\/v2\/tickets\.json$/, (_m, req) =>
      listPage("tickets", sorted(tickets, req.query.sort_by, req.query.sort_order).map(ticketJson), req, "/tickets.json")],
    ["GET", /^\/api\/v2\/tickets\/(\d+)\.json$/, (m) => withTicket(m, (t) => json(200, { ticket: ticketJson(t) }))],
    ["POST", /^\/api\/v2\/tickets\.json$/, (_m, req) => {
      const input = req.body?.ticket
      const body = input?.comment?.body
      if (typeof body !== "string" || body === "") return invalid("base", "Description: cannot be blank")
      if (input.priority !== undefined && !priorities.includes(input.priority)) return invalid("priority", "Priority: is invalid")
      const requester = input.requester === undefined ? users.find((u) => u.id === ZD_SELF)! : findOrCreateUser(input.requester)
      const now = isoNow()
      const t: ZdTicket = {
        id: Math.max(...tickets.map((x) => x.id)) + 1,
        subject: typeof input.subject === "string" ? input.subject : body.slice(0, 50),
        description: body,
        status: "new",
        priority: input.priority ?? null,
        type: input.type ?? null,
        requester_id: requester.id,
        assignee_id: null,
        tags: input.tags ?? [],
        comments: [{ id: ++ids, author_id: requester.id, body, public: true, created_at: now }],
        created_at: now,
        updated_at: now
      }
      tickets.push(t)
      return json(201, { ticket: ticketJson(t), audit: audit(t, [{ type: "Create" }]) })
    }],
    ["PUT", /^\/api\/v2\/tickets\/(\d+)\.json$/, (m, req) =>
      withTicket(m, (t) => {
        const input = req.body?.ticket
        if (typeof input !== "object" || input === null) return invalid("ticket", "ticket: is required")
        if (t.status === "closed") return invalid("status", "Status: closed prevents ticket update")
        if (input.status !== undefined && !statuses.includes(input.status)) return invalid("status", "Status: is invalid")
        if (input.priority !== undefined && !priorities.includes(input.priority)) return invalid("priority", "Priority: is invalid")
        const events: Array<Record<string, unknown>> = []
        for (const field of ["status", "priority", "type", "subject", "assignee_id", "tags"] as const) {
          if (input[field] === undefined) continue
          ;(t as any)[field] = input[field]
          events.push({ type: "Change", field_name: field, value: input[field] })
        }
        if (input.comment !== undefined) {
          if (typeof input.comment.body !== "string" || input.comment.body === "") return invalid("comment", "Comment: body cannot be blank")
          const comment = { id: ++ids, author_id: ZD_SELF, body: input.comment.body, public: input.comment.public !== false, created_at: isoNow() }
          t.comments.push(comment)
          events.push({ type: "Comment", id: comment.id, body: comment.body, public: comment.public })
        }
        t.updated_at = isoNow()
        return json(200, { ticket: ticketJson(t), audit: audit(t, events) })
      })],
    ["GET", /^\/api\/v2\/tickets\/(\d+)\/comments\.json$/, (m) =>
      withTicket(m, (t) => json(200, { comments: t.comments.map((c) => ({ ...c, type: "Comment", html_body: `<p>${c.body}</p>` })), count: t.comments.length, next_page: null, previous_page: null }))],
    ["GET", /^\/api\/v2\/search\.json$/, (_m, req) => {
      const query = req.query.query ?? ""
      if (query.trim() === "") return json(400, { error: "InvalidSearchQuery", description: "query is required" })
      const found = sorted(tickets.filter((t) => searchMatches(t, query)), req.query.sort_by, req.query.sort_order)
      return json(200, { results: found.map((t) => ({ ...ticketJson(t), result_type: "ticket" })), count: found.length, next_page: null, previous_page: null, facets: null })
    }],
    ["GET", /^\/api\/v2\/users\/(\d+)\.json$/, (m) => {
      const u = users.find((x) => x.id === Number(m[1]))
      return u === undefined ? notFound : json(200, { user: userJson(u) })
    }],
    ["GET", /^\/api\/v2\/users\.json$/, (_m, req) =>
      listPage("users", users.filter((u) => req.query.role === undefined || u.role === req.query.role).map(userJson), req, "/users.json")],
    ["POST", /^\/api\/v2\/users\.json$/, (_m, req) => {
      const input = req.body?.user
      if (typeof input?.name !== "string" || input.name === "") return invalid("name", "Name: is too short (minimum one character)")
      if (typeof input.email !== "string" || !input.email.includes("@")) return invalid("email", "Email: is invalid")
      if (users.some((u) => u.email === input.email)) return invalid("email", `Email: ${input.email} is already being used by another user`)
      const user: ZdUser = { id: ++ids, name: input.name, email: input.email, role: input.role ?? "end-user", created_at: isoNow() }
      users.push(user)
      return json(201, { user: userJson(user) })
    }]
  ]

  return { handle: (req: Req) => route(routes, req, notFound) }
}

// ---- tokens and OAuth ---------------------------------------------------------------------------

const PKCE_APPS: ReadonlySet<FakeApp> = new Set(["github", "gmail", "zendesk"])
const TOKEN_PREFIX: Record<FakeApp, string> = { github: "ghu_", slack: "xoxp-", gmail: "ya29.", zendesk: "zd_" }
const SCOPE_SEPARATOR: Record<FakeApp, string> = { github: ",", slack: ",", gmail: " ", zendesk: " " }
const CODE_TTL_MS = 10 * 60_000

interface AppAuth {
  manual: string | undefined
  readonly issued: Map<string, number | undefined>
  readonly refresh: Map<string, { readonly clientId: string; readonly scope: string }>
  readonly issuedOrder: Array<string>
  expiresIn: number | null
  failNext: { readonly status: number; readonly message: string } | undefined
  denyNext: boolean
}

interface PendingCode {
  readonly app: FakeApp
  readonly clientId: string
  readonly redirectUri: string
  readonly challenge: string | undefined
  readonly scope: string
  readonly issuedAt: number
  used: boolean
}

type OAuthError = { readonly error: "invalid_request" | "invalid_client" | "invalid_grant" | "unsupported_grant_type"; readonly description: string }

/** An OAuth error in each provider's own shape (GitHub and Slack answer 200). */
const oauthErrorReply = (app: FakeApp, e: OAuthError, wantsJson: boolean, refreshing: boolean): Reply => {
  switch (app) {
    case "github":
      return githubTokenReply({ error: e.error === "invalid_grant" ? "bad_verification_code" : e.error === "invalid_client" ? "incorrect_client_credentials" : e.error, error_description: e.description, error_uri: "https://docs.github.com/apps" }, wantsJson)
    case "slack": {
      const code = e.error === "invalid_client" ? "invalid_client_id" : e.error === "invalid_grant" ? (refreshing ? "invalid_refresh_token" : "invalid_code") : e.error
      return json(200, { ok: false, error: code })
    }
    case "gmail":
    case "zendesk":
      return json(e.error === "invalid_client" ? 401 : 400, { error: e.error, error_description: e.description })
  }
}

// GitHub answers form-encoded unless the client asks for JSON.
const githubTokenReply = (body: Record<string, unknown>, wantsJson: boolean): Reply =>
  wantsJson
    ? json(200, body)
    : {
      status: 200,
      headers: { "content-type": "application/x-www-form-urlencoded; charset=utf-8" },
      body: new URLSearchParams(Object.entries(body).map(([k, v]) => [k, String(v)])).toString()
    }

// ---- the server ---------------------------------------------------------------------------------

export const startFakeToolApis = async (options: FakeToolApisOptions = {}): Promise<FakeToolApis> => {
  let url = ""
  const requests: Array<RecordedRequest> = []
  const sentEmails: Array<SentEmail> = []
  const defaultExpiry: Record<FakeApp, number> = { github: 28_800, slack: 43_200, gmail: 3_599, zendesk: 3_600 }
  const appAuth = (app: FakeApp): AppAuth => ({
    manual: `token-${app}`,
    issued: new Map(),
    refresh: new Map(),
    issuedOrder: [],
    expiresIn: defaultExpiry[app],
    failNext: undefined,
    denyNext: false
  })
  const auth: Record<FakeApp, AppAuth> = { github: appAuth("github"), slack: appAuth("slack"), gmail: appAuth("gmail"), zendesk: appAuth("zendesk") }
  const clients = Object.fromEntries(fakeApps.map((app) => [app, { clientId: `client-${app}`, clientSecret: `secret-${app}` }])) as Record<FakeApp, { clientId: string; clientSecret: string }>
  const codes = new Map<string, PendingCode>()

  const providers: Record<FakeApp, { readonly handle: (req: Req) => Reply }> = {
    github: makeGitHub(),
    slack: makeSlack(),
    gmail: makeGmail(sentEmails),
    zendesk: makeZendesk(() => `${url}/zendesk`)
  }

  const tokenState = (app: FakeApp, header: string | undefined): "ok" | "expired" | "invalid" => {
    const token = header?.match(/^Bearer (.+)$/i)?.[1]
    const a = auth[app]
    if (token === undefined) return "invalid"
    if (token === a.manual) return "ok"
    if (!a.issued.has(token)) return "invalid"
    const expiresAt = a.issued.get(token)
    return expiresAt === undefined || Date.now() < expiresAt ? "ok" : "expired"
  }

  const handleApi = (app: FakeApp, req: Req): Reply => {
    const a = auth[app]
    const state = tokenState(app, req.headers.authorization)
    if (state !== "ok") return unauthorized(app, state === "expired")
    if (a.failNext !== undefined) {
      const { status, message } = a.failNext
      a.failNext = undefined
      return errorBody(app, status, message)
    }
    return providers[app].handle(req)
  }

  const issueTokens = (app: FakeApp, clientId: string, scope: string, withRefresh: boolean) => {
    const a = auth[app]
    const accessToken = `${TOKEN_PREFIX[app]}${randomId()}`
    a.issued.set(accessToken, a.expiresIn === null ? undefined : Date.now() + a.expiresIn * 1000)
    a.issuedOrder.push(accessToken)
    const refreshToken = withRefresh ? `refresh-${app}-${randomId()}` : undefined
    if (refreshToken !== undefined) a.refresh.set(refreshToken, { clientId, scope })
    return { accessToken, refreshToken, expiresIn: a.expiresIn, scope }
  }

  const handleAuthorize = (app: FakeApp, req: Req): Reply => {
    const q = req.query
    if (q.client_id !== clients[app].clientId) return json(400, { error: "invalid_client", error_description: "unknown client_id" })
    let redirect: URL
    try {
      redirect = new URL(q.redirect_uri ?? "")
    } catch {
      return json(400, { error: "invalid_request", error_description: "redirect_uri is missing or not a URL" })
    }
    if (q.response_type !== undefined && q.response_type !== "code") return json(400, { error: "unsupported_response_type", error_description: "only code" })
    // The fake insists on PKCE where the provider supports it, so a client that forgets it fails here.
    if (PKCE_APPS.has(app) && (q.code_challenge === undefined || q.code_challenge_method !== "S256")) {
      return json(400, { error: "invalid_request", error_description: "code_challenge with code_challenge_method=S256 is required" })
    }
    if (q.state !== undefined) redirect.searchParams.set("state", q.state)
    if (auth[app].denyNext) {
      auth[app].denyNext = false
      redirect.searchParams.set("error", "access_denied")
      redirect.searchParams.set("error_description", "The user denied access")
    } else {
      const code = `code-${app}-${randomId()}`
      codes.set(code, { app, clientId: q.client_id, redirectUri: q.redirect_uri!, challenge: PKCE_APPS.has(app) ? q.code_challenge : undefined, scope: q.scope ?? q.user_scope ?? "", issuedAt: Date.now(), used: false })
      redirect.searchParams.set("code", code)
    }
    return { status: 302, headers: { location: redirect.toString() }, body: "" }
  }

  const checkClient = (app: FakeApp, req: Req): OAuthError | undefined => {
    const basic = req.headers.authorization?.match(/^Basic (.+)$/i)?.[1]
    const [basicId, basicSecret] = basic === undefined ? [] : Buffer.from(basic, "base64").toString("utf8").split(":")
    const id = req.body?.client_id ?? basicId
    const secret = req.body?.client_secret ?? basicSecret
    return id === clients[app].clientId && secret === clients[app].clientSecret
      ? undefined
      : { error: "invalid_client", description: "client_id or client_secret is wrong" }
  }

  const exchangeCode = (app: FakeApp, body: Record<string, string | undefined>): OAuthError | { readonly clientId: string; readonly scope: string } => {
    const pending = codes.get(body.code ?? "")
    if (pending === undefined || pending.app !== app) return { error: "invalid_grant", description: "unknown code" }
    if (pending.used) return { error: "invalid_grant", description: "code already used" }
    pending.used = true
    if (Date.now() - pending.issuedAt > CODE_TTL_MS) return { error: "invalid_grant", description: "code expired" }
    if (pending.clientId !== body.client_id && body.client_id !== undefined) return { error: "invalid_grant", description: "code issued to another client" }
    // GitHub lets the client omit redirect_uri; the others require the one used at authorize.
    if ((body.redirect_uri !== undefined || app !== "github") && body.redirect_uri !== pending.redirectUri) {
      return { error: "invalid_grant", description: "redirect_uri does not match" }
    }
    if (pending.challenge !== undefined && (body.code_verifier === undefined || s256(body.code_verifier) !== pending.challenge)) {
      return { error: "invalid_grant", description: "code_verifier does not match the code_challenge" }
    }
    return { clientId: pending.clientId, scope: pending.scope }
  }

  const handleToken = (app: FakeApp, req: Req): Reply => {
    const body: Record<string, string | undefined> = typeof req.body === "object" && req.body !== null ? req.body : {}
    const wantsJson = (req.headers.accept ?? "").includes("json")
    const refreshing = body.grant_type === "refresh_token"
    const fail = (e: OAuthError) => oauthErrorReply(app, e, wantsJson, refreshing)
    const clientProblem = checkClient(app, req)
    if (clientProblem !== undefined) return fail(clientProblem)
    const a = auth[app]
    if (body.grant_type === "authorization_code") {
      const granted = exchangeCode(app, { ...body, client_id: body.client_id ?? clients[app].clientId })
      if ("error" in granted) return fail(granted)
      return tokenReply(app, issueTokens(app, granted.clientId, granted.scope, true), wantsJson, false)
    }
    if (refreshing) {
      const known = a.refresh.get(body.refresh_token ?? "")
      if (known === undefined) return fail({ error: "invalid_grant", description: "unknown or revoked refresh_token" })
      // Google keeps the refresh token; the others rotate it (the old one stops working).
      const rotate = app !== "gmail"
      if (rotate) a.refresh.delete(body.refresh_token ?? "")
      return tokenReply(app, issueTokens(app, known.clientId, known.scope, rotate), wantsJson, true)
    }
    return fail({ error: "unsupported_grant_type", description: `grant_type ${String(body.grant_type)}` })
  }

  const tokenReply = (app: FakeApp, t: ReturnType<typeof issueTokens>, wantsJson: boolean, refreshed: boolean): Reply => {
    const scope = t.scope.split(/[\s,]+/).filter((s) => s !== "").join(SCOPE_SEPARATOR[app])
    const expiry = t.expiresIn === null ? {} : { expires_in: t.expiresIn }
    const refresh = t.refreshToken === undefined ? {} : { refresh_token: t.refreshToken }
    switch (app) {
      case "github":
        return githubTokenReply({ access_token: t.accessToken, token_type: "bearer", scope, ...expiry, ...refresh, ...(t.refreshToken === undefined ? {} : { refresh_token_expires_in: 15_811_200 }) }, wantsJson)
      case "slack": {
        const user = { access_token: t.accessToken, token_type: "user", scope, ...expiry, ...refresh }
        const base = { ok: true, app_id: "A0FAKE", team: { id: "T0FAKE", name: "Fake Team" }, enterprise: null, is_enterprise_install: false }
        // Slack's rotation refresh answers the user token at the top level; the code exchange under authed_user.
        if (refreshed) return json(200, { ...base, ...user })
        return json(200, { ...base, authed_user: { id: SLACK_SELF, ...user }, ...(options.slackTokenShape === "top_level" ? user : {}) })
      }
      case "gmail":
        return json(200, { access_token: t.accessToken, token_type: "Bearer", scope, ...expiry, ...refresh })
      case "zendesk":
        return json(200, { access_token: t.accessToken, token_type: "bearer", scope, ...expiry, ...refresh, ...(t.refreshToken === undefined ? {} : { refresh_token_expires_in: 2_592_000 }) })
    }
  }

  const server = createServer(async (req, res) => {
    try {
      const parsed = new URL(req.url ?? "/", "http://fake")
      const [, first, ...rest] = parsed.pathname.split("/")
      if (!isApp(first)) return send(res, json(404, { error: "unknown app prefix" }))
      const text = await readBody(req)
      const r: Req = {
        method: req.method ?? "GET",
        path: `/${rest.join("/")}`,
        query: queryOf(parsed.searchParams),
        headers: req.headers,
        body: parseBody(text, req.headers["content-type"])
      }
      requests.push({ app: first, ...r })
      if (r.path === "/oauth/authorize" && r.method === "GET") return send(res, handleAuthorize(first, r))
      if (r.path === "/oauth/token" && r.method === "POST") return send(res, handleToken(first, r))
      return send(res, handleApi(first, r))
    } catch (e) {
      send(res, json(500, { error: "fake crashed", description: String(e) }))
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

  return {
    url,
    requests,
    oauth: oauthUrls({ url }),
    clients,
    sentEmails,
    setToken: (app, token) => {
      auth[app].manual = token
    },
    revoke: (app) => {
      const a = auth[app]
      a.manual = undefined
      a.issued.clear()
      a.refresh.clear()
    },
    setExpiresIn: (app, seconds) => {
      auth[app].expiresIn = seconds
    },
    setClient: (app, clientId, clientSecret) => {
      clients[app] = { clientId, clientSecret }
    },
    failNext: (app, status, message = `fake failure ${status}`) => {
      auth[app].failNext = { status, message }
    },
    denyNextAuthorize: (app) => {
      auth[app].denyNext = true
    },
    issuedTokens: (app) => [...auth[app].issuedOrder],
    requestsFor: (app) => requests.filter((r) => r.app === app),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** TOOLAPP_<SLUG>_API_URL / _AUTHORIZE_URL / _TOKEN_URL for all four apps, pointing at the fake. */
export const toolAppEnv = (fake: FakeToolApis): Record<string, string> => {
  const env: Record<string, string> = {}
  const api = apiUrls(fake)
  const oauth = oauthUrls(fake)
  for (const app of fakeApps) {
    const prefix = `TOOLAPP_${app.toUpperCase()}_`
    env[`${prefix}API_URL`] = api[app]
    env[`${prefix}AUTHORIZE_URL`] = oauth[app].authorizeUrl
    env[`${prefix}TOKEN_URL`] = oauth[app].tokenUrl
  }
  return env
}

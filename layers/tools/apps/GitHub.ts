// The GitHub tool app: ten tools over the GitHub REST API v3 (repositories, issues, pull
// requests, file contents, code search), called with the end user's OAuth token.
import { Effect } from "effect"
import { type ApiCall, callApi, defineTool, get, type HttpMethod, pick, pickEach, pluck, segment, type Shape, ToolFailure } from "./Http.js"
import type { ToolApp, ToolContext } from "./ToolApp.js"

// GitHub pins the response format by API version; without it answers may change under us.
const githubHeaders = {
  accept: "application/vnd.github+json",
  "x-github-api-version": "2022-11-28",
  "user-agent": "model-gateway-toolapps"
}

const github = (ctx: ToolContext, method: HttpMethod, path: string, extra: Omit<ApiCall, "method" | "path"> = {}) =>
  callApi(ctx, { method, path, ...extra, headers: githubHeaders })

const repoPath = (args: { readonly owner: string; readonly repo: string }) => `/repos/${segment(args.owner)}/${segment(args.repo)}`

// ---- output shapes ------------------------------------------------------------------------------

const repoShape: Shape = {
  full_name: "full_name",
  description: "description",
  private: "private",
  html_url: "html_url",
  default_branch: "default_branch",
  language: "language",
  stars: "stargazers_count",
  open_issues: "open_issues_count",
  updated_at: "updated_at"
}

const repoDetailShape: Shape = {
  ...repoShape,
  forks: "forks_count",
  watchers: "subscribers_count",
  topics: "topics",
  archived: "archived",
  visibility: "visibility",
  license: "license.spdx_id",
  created_at: "created_at",
  pushed_at: "pushed_at"
}

const issueShape: Shape = {
  number: "number",
  title: "title",
  state: "state",
  user: "user.login",
  labels: pluck("labels", "name"),
  assignees: pluck("assignees", "login"),
  comments: "comments",
  // The issues endpoint also lists pull requests; say which ones they are.
  is_pull_request: (issue) => get(issue, "pull_request") !== undefined,
  html_url: "html_url",
  created_at: "created_at",
  updated_at: "updated_at"
}

const issueDetailShape: Shape = { ...issueShape, body: "body", closed_at: "closed_at" }

const pullShape: Shape = {
  number: "number",
  title: "title",
  state: "state",
  user: "user.login",
  draft: "draft",
  head: "head.ref",
  base: "base.ref",
  html_url: "html_url",
  created_at: "created_at",
  updated_at: "updated_at"
}

const pullDetailShape: Shape = {
  ...pullShape,
  body: "body",
  merged: "merged",
  mergeable: "mergeable",
  merged_at: "merged_at",
  commits: "commits",
  additions: "additions",
  deletions: "deletions",
  changed_files: "changed_files",
  labels: pluck("labels", "name")
}

// ---- parameters shared by several tools ---------------------------------------------------------

const owner = { type: "string", description: "Repository owner (user or organisation login).", required: true } as const
const repo = { type: "string", description: "Repository name, without the owner.", required: true } as const
const number = { type: "integer", description: "Issue or pull request number.", minimum: 1, required: true } as const
const perPage = { type: "integer", description: "Results per page (1-100).", minimum: 1, maximum: 100, default: 30 } as const
const page = { type: "integer", description: "Page number, starting at 1.", minimum: 1, default: 1 } as const
const state = { type: "string", description: "Filter by state.", enum: ["open", "closed", "all"], default: "open" } as const

// ---- file contents ------------------------------------------------------------------------------

// A directory answers an array of entries; a file answers base64 content (absent over 1 MB).
const fileContents = (body: unknown): Effect.Effect<unknown, ToolFailure> => {
  if (Array.isArray(body)) return Effect.succeed({ type: "dir", entries: pickEach(body, { name: "name", path: "path", type: "type", size: "size" }) })
  const content = get(body, "content")
  if (get(body, "type") !== "file" || get(body, "encoding") !== "base64" || typeof content !== "string") {
    return Effect.fail(new ToolFailure({ message: `Not a readable file (type ${String(get(body, "type"))}, encoding ${String(get(body, "encoding"))}); files over 1 MB are not returned by the contents API.` }))
  }
  return Effect.succeed({
    type: "file",
    path: get(body, "path"),
    sha: get(body, "sha"),
    size: get(body, "size"),
    content: Buffer.from(content, "base64").toString("utf8")
  })
}

// ---- tools --------------------------------------------------------------------------------------

const tools = [
  defineTool({
    name: "list_repos",
    description: "List repositories the authenticated user can access (owned, collaborator, organisation member), most recently updated first.",
    params: {
      visibility: { type: "string", description: "Filter by visibility.", enum: ["all", "public", "private"], default: "all" },
      sort: { type: "string", description: "Sort field.", enum: ["created", "updated", "pushed", "full_name"], default: "updated" },
      per_page: perPage,
      page
    },
    run: (ctx, a) =>
      github(ctx, "GET", "/user/repos", { query: { visibility: a.visibility, sort: a.sort, per_page: a.per_page, page: a.page } }).pipe(
        Effect.map((body) => ({ repositories: pickEach(body, repoShape) }))
      )
  }),
  defineTool({
    name: "get_repo",
    description: "Get one repository: description, default branch, language, stars, forks, open issue count, topics.",
    params: { owner, repo },
    run: (ctx, a) => github(ctx, "GET", repoPath(a)).pipe(Effect.map((body) => pick(body, repoDetailShape)))
  }),
  defineTool({
    name: "list_issues",
    description: "List issues of a repository (pull requests are included and flagged is_pull_request).",
    params: {
      owner,
      repo,
      state,
      labels: { type: "string", description: "Comma-separated label names; only issues with all of them." },
      assignee: { type: "string", description: "Login of the assignee, `none` or `*`." },
      per_page: perPage,
      page
    },
    run: (ctx, a) =>
      github(ctx, "GET", `${repoPath(a)}/issues`, {
        query: { state: a.state, labels: a.labels, assignee: a.assignee, per_page: a.per_page, page: a.page }
      }).pipe(Effect.map((body) => ({ issues: pickEach(body, issueShape) })))
  }),
  defineTool({
    name: "get_issue",
    description: "Get one issue with its body, labels, assignees and comment count.",
    params: { owner, repo, number },
    run: (ctx, a) =>
      github(ctx, "GET", `${repoPath(a)}/issues/${a.number}`).pipe(Effect.map((body) => pick(body, issueDetailShape)))
  }),
  defineTool({
    name: "create_issue",
    description: "Open a new issue in a repository.",
    params: {
      owner,
      repo,
      title: { type: "string", description: "Issue title.", required: true },
      body: { type: "string", description: "Issue body (Markdown)." },
      labels: { type: "array", description: "Label names to apply." },
      assignees: { type: "array", description: "Logins to assign." }
    },
    run: (ctx, a) =>
      github(ctx, "POST", `${repoPath(a)}/issues`, {
        body: { title: a.title, body: a.body, labels: a.labels, assignees: a.assignees }
      }).pipe(Effect.map((body) => pick(body, { number: "number", title: "title", state: "state", html_url: "html_url" })))
  }),
  defineTool({
    name: "comment_on_issue",
    description: "Add a comment to an issue or pull request.",
    params: { owner, repo, number, body: { type: "string", description: "Comment text (Markdown).", required: true } },
    run: (ctx, a) =>
      github(ctx, "POST", `${repoPath(a)}/issues/${a.number}/comments`, { body: { body: a.body } }).pipe(
        Effect.map((body) => pick(body, { id: "id", html_url: "html_url", user: "user.login", created_at: "created_at" }))
      )
  }),
  defineTool({
    name: "list_pull_requests",
    description: "List pull requests of a repository.",
    params: {
      owner,
      repo,
      state,
      base: { type: "string", description: "Only pull requests into this base branch." },
      head: { type: "string", description: "Only pull requests from this head, as `user:branch`." },
      per_page: perPage,
      page
    },
    run: (ctx, a) =>
      github(ctx, "GET", `${repoPath(a)}/pulls`, {
        query: { state: a.state, base: a.base, head: a.head, per_page: a.per_page, page: a.page }
      }).pipe(Effect.map((body) => ({ pull_requests: pickEach(body, pullShape) })))
  }),
  defineTool({
    name: "get_pull_request",
    description: "Get one pull request: branches, merge state, size of the change (commits, additions, deletions, files).",
    params: { owner, repo, number },
    run: (ctx, a) =>
      github(ctx, "GET", `${repoPath(a)}/pulls/${a.number}`).pipe(Effect.map((body) => pick(body, pullDetailShape)))
  }),
  defineTool({
    name: "get_file_contents",
    description: "Read a file (decoded as UTF-8 text) or list a directory in a repository.",
    params: {
      owner,
      repo,
      path: { type: "string", description: "Path inside the repository, e.g. `src/index.ts`.", required: true },
      ref: { type: "string", description: "Branch, tag or commit SHA; default branch when omitted." }
    },
    run: (ctx, a) =>
      github(ctx, "GET", `${repoPath(a)}/contents/${a.path.replace(/^\/+/, "").split("/").map(segment).join("/")}`, {
        query: { ref: a.ref }
      }).pipe(Effect.flatMap(fileContents))
  }),
  defineTool({
    name: "search_code",
    description: "Search code across GitHub with GitHub search syntax, e.g. `useState repo:facebook/react language:js`.",
    params: {
      q: { type: "string", description: "Search query with optional qualifiers (repo:, org:, language:, path:).", required: true },
      per_page: perPage,
      page
    },
    run: (ctx, a) =>
      github(ctx, "GET", "/search/code", { query: { q: a.q, per_page: a.per_page, page: a.page } }).pipe(
        Effect.map((body) => ({
          total_count: get(body, "total_count"),
          items: pickEach(get(body, "items"), { name: "name", path: "path", repository: "repository.full_name", html_url: "html_url", sha: "sha" })
        }))
      )
  })
]

export const GitHub: ToolApp = {
  slug: "github",
  name: "GitHub",
  defaultApiUrl: "https://api.github.com",
  oauth: {
    authorizeUrl: "https://github.com/login/oauth/authorize",
    tokenUrl: "https://github.com/login/oauth/access_token",
    scopes: ["repo", "read:user"],
    scopeSeparator: " ",
    pkce: true,
    extraAuthorizeParams: {}
  },
  tools
}

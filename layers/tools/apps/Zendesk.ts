// The Zendesk tool app: ten tools over the Zendesk Support API v2 (tickets, comments, search,
// users). The API host is the customer's subdomain, so operators set TOOLAPP_ZENDESK_API_URL.
import { Effect } from "effect"
import { type ApiCall, callApi, defineTool, get, type HttpMethod, pick, pickEach, type Shape, ToolFailure } from "./Http.js"
import type { ToolApp, ToolContext } from "./ToolApp.js"

const zendesk = (ctx: ToolContext, method: HttpMethod, path: string, extra: Omit<ApiCall, "method" | "path"> = {}) =>
  callApi(ctx, { method, path: `/api/v2${path}`, ...extra })

// ---- output shapes ------------------------------------------------------------------------------

const ticketShape: Shape = {
  id: "id",
  subject: "subject",
  status: "status",
  priority: "priority",
  type: "type",
  requester_id: "requester_id",
  assignee_id: "assignee_id",
  tags: "tags",
  created_at: "created_at",
  updated_at: "updated_at"
}

const ticketDetailShape: Shape = { ...ticketShape, description: "description", group_id: "group_id", via: "via.channel" }

const userShape: Shape = {
  id: "id",
  name: "name",
  email: "email",
  role: "role",
  active: "active",
  organization_id: "organization_id",
  created_at: "created_at"
}

const commentShape: Shape = { id: "id", author_id: "author_id", body: "body", public: "public", created_at: "created_at" }

/** Offset pagination: the next page number, or null on the last page. */
const nextPage = (body: unknown, page: number) => (typeof get(body, "next_page") === "string" ? page + 1 : null)

// ---- parameters shared by several tools ---------------------------------------------------------

const ticketId = { type: "integer", description: "Ticket ID.", minimum: 1, required: true } as const
const perPage = { type: "integer", description: "Results per page (1-100).", minimum: 1, maximum: 100, default: 25 } as const
const page = { type: "integer", description: "Page number, starting at 1.", minimum: 1, default: 1 } as const
const priority = { type: "string", description: "Ticket priority.", enum: ["urgent", "high", "normal", "low"] } as const
const status = { type: "string", description: "Ticket status.", enum: ["new", "open", "pending", "hold", "solved", "closed"] } as const
const ticketType = { type: "string", description: "Ticket type.", enum: ["problem", "incident", "question", "task"] } as const

const withoutUndefined = (record: Readonly<Record<string, unknown>>) =>
  Object.fromEntries(Object.entries(record).filter(([, v]) => v !== undefined))

// ---- tools --------------------------------------------------------------------------------------

const tools = [
  defineTool({
    name: "list_tickets",
    description: "List tickets of the help desk, newest first by default.",
    params: {
      sort_by: { type: "string", description: "Sort field.", enum: ["created_at", "updated_at", "priority", "status"], default: "created_at" },
      sort_order: { type: "string", description: "Sort direction.", enum: ["asc", "desc"], default: "desc" },
      per_page: perPage,
      page
    },
    run: (ctx, a) =>
      zendesk(ctx, "GET", "/tickets.json", { query: { sort_by: a.sort_by, sort_order: a.sort_order, per_page: a.per_page, page: a.page } }).pipe(
        Effect.map((body) => ({ tickets: pickEach(get(body, "tickets"), ticketShape), count: get(body, "count"), next_page: nextPage(body, a.page) }))
      )
  }),
  defineTool({
    name: "get_ticket",
    description: "Get one ticket: subject, description, status, priority, requester, assignee, tags.",
    params: { id: ticketId },
    run: (ctx, a) => zendesk(ctx, "GET", `/tickets/${a.id}.json`).pipe(Effect.map((body) => pick(get(body, "ticket"), ticketDetailShape)))
  }),
  defineTool({
    name: "create_ticket",
    description: "Create a ticket; the body becomes its first comment. Without a requester the user creating it is the requester.",
    params: {
      subject: { type: "string", description: "Ticket subject.", required: true },
      body: { type: "string", description: "Description (the first comment).", required: true },
      priority,
      type: ticketType,
      requester_email: { type: "string", description: "Requester's email; the user is created when unknown." },
      requester_name: { type: "string", description: "Requester's name (used with requester_email)." },
      tags: { type: "array", description: "Tags to set." }
    },
    run: (ctx, a) => {
      const requester = a.requester_email === undefined ? undefined : withoutUndefined({ email: a.requester_email, name: a.requester_name })
      const ticket = withoutUndefined({ subject: a.subject, comment: { body: a.body }, priority: a.priority, type: a.type, requester, tags: a.tags })
      return zendesk(ctx, "POST", "/tickets.json", { body: { ticket } }).pipe(Effect.map((body) => pick(get(body, "ticket"), ticketShape)))
    }
  }),
  defineTool({
    name: "update_ticket",
    description: "Change a ticket's status, priority, type, subject, assignee or tags (give at least one).",
    params: {
      id: ticketId,
      status,
      priority,
      type: ticketType,
      subject: { type: "string", description: "New subject." },
      assignee_id: { type: "integer", description: "Agent user ID to assign.", minimum: 1 },
      tags: { type: "array", description: "Replaces all tags." }
    },
    run: (ctx, a) => {
      const { id, ...changes } = a
      const ticket = withoutUndefined(changes)
      if (Object.keys(ticket).length === 0) {
        return Effect.fail(new ToolFailure({ message: "Nothing to update: give status, priority, type, subject, assignee_id or tags." }))
      }
      return zendesk(ctx, "PUT", `/tickets/${id}.json`, { body: { ticket } }).pipe(Effect.map((body) => pick(get(body, "ticket"), ticketShape)))
    }
  }),
  defineTool({
    name: "add_ticket_comment",
    description: "Add a comment to a ticket: public (the requester sees it) or an internal note.",
    params: {
      id: ticketId,
      body: { type: "string", description: "Comment text.", required: true },
      public: { type: "boolean", description: "Visible to the requester; false for an internal note.", default: true }
    },
    run: (ctx, a) =>
      zendesk(ctx, "PUT", `/tickets/${a.id}.json`, { body: { ticket: { comment: { body: a.body, public: a.public } } } }).pipe(
        Effect.map((body) => ({
          ticket_id: get(body, "ticket.id"),
          status: get(body, "ticket.status"),
          public: a.public,
          audit_id: get(body, "audit.id"),
          updated_at: get(body, "ticket.updated_at")
        }))
      )
  }),
  defineTool({
    name: "list_ticket_comments",
    description: "List the comments (conversation) of a ticket, oldest first.",
    params: { id: ticketId },
    run: (ctx, a) =>
      zendesk(ctx, "GET", `/tickets/${a.id}/comments.json`).pipe(
        Effect.map((body) => ({ comments: pickEach(get(body, "comments"), commentShape), count: get(body, "count") }))
      )
  }),
  defineTool({
    name: "search_tickets",
    description: "Search tickets with Zendesk search syntax, e.g. `status:open priority:high printer`.",
    params: {
      query: { type: "string", description: "Search terms and qualifiers (type:ticket is added).", required: true },
      sort_by: { type: "string", description: "Sort field.", enum: ["created_at", "updated_at", "priority", "status"] },
      sort_order: { type: "string", description: "Sort direction.", enum: ["asc", "desc"], default: "desc" },
      per_page: perPage
    },
    run: (ctx, a) =>
      zendesk(ctx, "GET", "/search.json", {
        query: { query: `type:ticket ${a.query}`, sort_by: a.sort_by, sort_order: a.sort_order, per_page: a.per_page }
      }).pipe(Effect.map((body) => ({ count: get(body, "count"), results: pickEach(get(body, "results"), ticketShape) })))
  }),
  defineTool({
    name: "get_user",
    description: "Get one user (requester or agent): name, email, role.",
    params: { id: { type: "integer", description: "User ID.", minimum: 1, required: true } },
    run: (ctx, a) => zendesk(ctx, "GET", `/users/${a.id}.json`).pipe(Effect.map((body) => pick(get(body, "user"), userShape)))
  }),
  defineTool({
    name: "list_users",
    description: "List users, optionally only end users, agents or admins.",
    params: {
      role: { type: "string", description: "Only users with this role.", enum: ["end-user", "agent", "admin"] },
      per_page: perPage,
      page
    },
    run: (ctx, a) =>
      zendesk(ctx, "GET", "/users.json", { query: { role: a.role, per_page: a.per_page, page: a.page } }).pipe(
        Effect.map((body) => ({ users: pickEach(get(body, "users"), userShape), count: get(body, "count"), next_page: nextPage(body, a.page) }))
      )
  }),
  defineTool({
    name: "create_user",
    description: "Create a user (by default an end user, i.e. a customer).",
    params: {
      name: { type: "string", description: "Full name.", required: true },
      email: { type: "string", description: "Email address.", required: true },
      role: { type: "string", description: "Role.", enum: ["end-user", "agent", "admin"], default: "end-user" }
    },
    run: (ctx, a) =>
      zendesk(ctx, "POST", "/users.json", { body: { user: { name: a.name, email: a.email, role: a.role } } }).pipe(
        Effect.map((body) => pick(get(body, "user"), userShape))
      )
  })
]

export const Zendesk: ToolApp = {
  slug: "zendesk",
  name: "Zendesk",
  defaultApiUrl: "https://example.zendesk.com",
  oauth: {
    // Per-subdomain in reality: the operator's host replaces example.zendesk.com.
    authorizeUrl: "https://example.zendesk.com/oauth/authorizations/new",
    tokenUrl: "https://example.zendesk.com/oauth/tokens",
    scopes: ["read", "write"],
    scopeSeparator: " ",
    pkce: true,
    extraAuthorizeParams: {}
  },
  tools
}

// The Slack tool app: ten tools over Slack Web API methods (conversations, chat, reactions,
// users, search), called with the end user's user token (xoxp), since search needs one.
import { Effect } from "effect"
import { callApi, defineTool, get, pick, pickEach, type QueryValue, type Shape, ToolFailure } from "./Http.js"
import { AppApiError, type ToolApp, type ToolContext } from "./ToolApp.js"

// Slack answers HTTP 200 `{ok:false, error}` for app errors; these codes mean the grant is gone.
const reauthErrors = new Set(["invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"])

const slackFailure = (body: unknown): AppApiError | ToolFailure => {
  const error = String(get(body, "error") ?? "unknown_error")
  if (reauthErrors.has(error)) {
    return new AppApiError({ status: 401, message: `Slack rejected the token (${error})`, reauth: true })
  }
  const needed = get(body, "needed")
  return new ToolFailure({
    message: `Slack error: ${error}${typeof needed === "string" ? ` (the connection lacks scope ${needed})` : ""}`
  })
}

const ensureOk = (body: unknown) => (get(body, "ok") === true ? Effect.succeed(body) : Effect.fail(slackFailure(body)))

/** Read methods take query arguments; write methods take a JSON body (Slack accepts JSON for them). */
const read = (ctx: ToolContext, method: string, query: Readonly<Record<string, QueryValue>>) =>
  callApi(ctx, { method: "GET", path: `/${method}`, query }).pipe(Effect.flatMap(ensureOk))

const write = (ctx: ToolContext, method: string, body: Readonly<Record<string, unknown>>) =>
  callApi(ctx, { method: "POST", path: `/${method}`, body }).pipe(Effect.flatMap(ensureOk))

const nextCursor = (body: unknown) => {
  const cursor = get(body, "response_metadata.next_cursor")
  return typeof cursor === "string" && cursor !== "" ? cursor : undefined
}

// ---- output shapes ------------------------------------------------------------------------------

const channelShape: Shape = {
  id: "id",
  name: "name",
  is_private: "is_private",
  is_archived: "is_archived",
  num_members: "num_members",
  topic: "topic.value",
  purpose: "purpose.value"
}

const messageShape: Shape = {
  ts: "ts",
  user: "user",
  text: "text",
  thread_ts: "thread_ts",
  reply_count: "reply_count",
  reactions: (m) => (Array.isArray(get(m, "reactions")) ? pickEach(get(m, "reactions"), { name: "name", count: "count" }) : undefined)
}

const userShape: Shape = {
  id: "id",
  name: "name",
  real_name: "real_name",
  display_name: "profile.display_name",
  is_bot: "is_bot",
  deleted: "deleted",
  tz: "tz"
}

const postedShape: Shape = { channel: "channel", ts: "ts", thread_ts: "message.thread_ts", text: "message.text" }

// ---- parameters shared by several tools ---------------------------------------------------------

const channel = { type: "string", description: "Channel ID, e.g. C0123456789.", required: true } as const
const cursor = { type: "string", description: "Pagination cursor from a previous call's next_cursor." } as const
const limit = { type: "integer", description: "Maximum items to return (1-200).", minimum: 1, maximum: 200, default: 50 } as const
const text = { type: "string", description: "Message text (Slack mrkdwn).", required: true } as const

// ---- tools --------------------------------------------------------------------------------------

const tools = [
  defineTool({
    name: "list_channels",
    description: "List channels in the workspace that the user can see (IDs, names, topics, member counts).",
    params: {
      types: {
        type: "string",
        description: "Comma-separated channel types: public_channel, private_channel, mpim, im.",
        default: "public_channel,private_channel"
      },
      exclude_archived: { type: "boolean", description: "Leave out archived channels.", default: true },
      limit,
      cursor
    },
    run: (ctx, a) =>
      read(ctx, "conversations.list", { types: a.types, exclude_archived: a.exclude_archived, limit: a.limit, cursor: a.cursor }).pipe(
        Effect.map((body) => ({ channels: pickEach(get(body, "channels"), channelShape), next_cursor: nextCursor(body) }))
      )
  }),
  defineTool({
    name: "get_channel_history",
    description: "Read recent messages of a channel, newest first.",
    params: {
      channel,
      limit: { ...limit, default: 20 },
      oldest: { type: "string", description: "Only messages after this Unix timestamp (Slack ts)." },
      latest: { type: "string", description: "Only messages before this Unix timestamp (Slack ts)." },
      cursor
    },
    run: (ctx, a) =>
      read(ctx, "conversations.history", { channel: a.channel, limit: a.limit, oldest: a.oldest, latest: a.latest, cursor: a.cursor }).pipe(
        Effect.map((body) => ({
          messages: pickEach(get(body, "messages"), messageShape),
          has_more: get(body, "has_more"),
          next_cursor: nextCursor(body)
        }))
      )
  }),
  defineTool({
    name: "post_message",
    description: "Post a message to a channel as the user.",
    params: { channel, text },
    run: (ctx, a) => write(ctx, "chat.postMessage", { channel: a.channel, text: a.text }).pipe(Effect.map((body) => pick(body, postedShape)))
  }),
  defineTool({
    name: "reply_in_thread",
    description: "Reply in the thread of a message (thread_ts is the parent message's ts).",
    params: {
      channel,
      thread_ts: { type: "string", description: "ts of the parent message.", required: true },
      text,
      broadcast: { type: "boolean", description: "Also show the reply in the channel.", default: false }
    },
    run: (ctx, a) =>
      write(ctx, "chat.postMessage", { channel: a.channel, thread_ts: a.thread_ts, text: a.text, reply_broadcast: a.broadcast }).pipe(
        Effect.map((body) => pick(body, postedShape))
      )
  }),
  defineTool({
    name: "add_reaction",
    description: "Add an emoji reaction to a message.",
    params: {
      channel,
      timestamp: { type: "string", description: "ts of the message to react to.", required: true },
      name: { type: "string", description: "Emoji name without colons, e.g. thumbsup.", required: true }
    },
    run: (ctx, a) => {
      // Models often write the emoji as `:thumbsup:`; Slack wants the bare name.
      const name = a.name.replace(/^:|:$/g, "")
      return write(ctx, "reactions.add", { channel: a.channel, timestamp: a.timestamp, name }).pipe(
        Effect.as({ ok: true, channel: a.channel, timestamp: a.timestamp, name })
      )
    }
  }),
  defineTool({
    name: "list_users",
    description: "List members of the workspace (IDs, names, display names, bots, deactivated accounts).",
    params: { limit, cursor },
    run: (ctx, a) =>
      read(ctx, "users.list", { limit: a.limit, cursor: a.cursor }).pipe(
        Effect.map((body) => ({ members: pickEach(get(body, "members"), userShape), next_cursor: nextCursor(body) }))
      )
  }),
  defineTool({
    name: "get_user_info",
    description: "Get one member's profile: names, title, email (when visible), time zone.",
    params: { user: { type: "string", description: "User ID, e.g. U0123456789.", required: true } },
    run: (ctx, a) =>
      read(ctx, "users.info", { user: a.user }).pipe(
        Effect.map((body) => pick(get(body, "user"), { ...userShape, title: "profile.title", email: "profile.email", is_admin: "is_admin" }))
      )
  }),
  defineTool({
    name: "search_messages",
    description: "Search messages with Slack search syntax, e.g. `deploy in:#ops from:@alice after:2024-01-01`.",
    params: {
      query: { type: "string", description: "Search query.", required: true },
      count: { type: "integer", description: "Results per page (1-100).", minimum: 1, maximum: 100, default: 20 },
      sort: { type: "string", description: "Sort by relevance or time.", enum: ["score", "timestamp"], default: "score" },
      page: { type: "integer", description: "Page number, starting at 1.", minimum: 1, default: 1 }
    },
    run: (ctx, a) =>
      read(ctx, "search.messages", { query: a.query, count: a.count, sort: a.sort, page: a.page }).pipe(
        Effect.map((body) => ({
          total: get(body, "messages.total"),
          matches: pickEach(get(body, "messages.matches"), {
            ts: "ts",
            channel_id: "channel.id",
            channel_name: "channel.name",
            user: "user",
            username: "username",
            text: "text",
            permalink: "permalink"
          })
        }))
      )
  }),
  defineTool({
    name: "create_channel",
    description: "Create a channel. Names are lowercase, without spaces or periods, at most 80 characters.",
    params: {
      name: { type: "string", description: "Channel name, e.g. proj-launch.", required: true },
      is_private: { type: "boolean", description: "Create a private channel.", default: false }
    },
    run: (ctx, a) =>
      write(ctx, "conversations.create", { name: a.name, is_private: a.is_private }).pipe(
        Effect.map((body) => pick(get(body, "channel"), channelShape))
      )
  }),
  defineTool({
    name: "set_channel_topic",
    description: "Set the topic of a channel.",
    params: { channel, topic: { type: "string", description: "New topic text.", required: true } },
    run: (ctx, a) =>
      write(ctx, "conversations.setTopic", { channel: a.channel, topic: a.topic }).pipe(
        Effect.map((body) => pick(get(body, "channel"), { id: "id", name: "name", topic: "topic.value" }))
      )
  })
]

export const Slack: ToolApp = {
  slug: "slack",
  name: "Slack",
  defaultApiUrl: "https://slack.com/api",
  oauth: {
    authorizeUrl: "https://slack.com/oauth/v2/authorize",
    tokenUrl: "https://slack.com/api/oauth.v2.access",
    // User-token scopes (search.messages only works with a user token).
    scopes: [
      "channels:read",
      "channels:history",
      "channels:write",
      "groups:read",
      "groups:history",
      "groups:write",
      "chat:write",
      "reactions:write",
      "users:read",
      "users:read.email",
      "search:read"
    ],
    scopeSeparator: ",",
    pkce: false,
    extraAuthorizeParams: {}
  },
  tools
}

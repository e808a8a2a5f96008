// MCP sessions of the tool listener, served by any instance: the session's facts are a shared
// row (McpSessionRows) and each request gets its own SDK server and web-standard streamable HTTP
// transport. Bound to the API key that opened it; capped per key, per platform and over the
// fleet; closed after an idle time or a fixed lifetime (per request and by a reaper).
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"
import {
  CallToolRequestSchema,
  type CallToolResult,
  type InitializeRequest,
  isInitializeRequest,
  LATEST_PROTOCOL_VERSION,
  ListToolsRequestSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type Tool
} from "@modelcontextprotocol/sdk/types.js"
import { Effect, Exit, Runtime } from "effect"
import { randomUUID } from "node:crypto"
import { RateLimited, ServiceUnavailable, wireError } from "../../schemas/Errors.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { ToolResult } from "./apps/ToolApp.js"
import type { ToolListing } from "./Catalog.js"
import { mcpIdentity } from "./McpIdentity.js"
import { type Admission, makeMcpSessionRows } from "./McpSessionRows.js"

export { MAX_SESSIONS_PER_KEY } from "./McpSessionRows.js"

/** How many sessions there may be and how long they live. */
export interface SessionLimits {
  /** Absolute lifetime from initialize (GATEWAY_MCP_SESSION_TTL). */
  readonly ttlMillis: number
  /** A session with no request (and no tool call running) for this long is closed (GATEWAY_MCP_SESSION_IDLE). */
  readonly idleMillis: number
  /** Open sessions over the fleet (GATEWAY_MCP_MAX_SESSIONS); an initialize beyond it answers 503. */
  readonly maxSessions: number
  /** Open sessions of one platform over the fleet (GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM); beyond it, 429. */
  readonly maxPerPlatform: number
}

export interface SessionHandlers {
  /** Promise-returning because the SDK calls them; they run Effects on the service's runtime. */
  readonly listTools: (principal: EndUserPrincipal, appSlug: string) => Promise<ReadonlyArray<ToolListing>>
  readonly callTool: (principal: EndUserPrincipal, appSlug: string, name: string, args: Record<string, unknown>) => Promise<ToolResult>
}

/** The SDK's own convention for session errors: a JSON-RPC error body, id null. */
export const jsonRpcError = (status: number, code: number, message: string): Response =>
  new Response(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }), {
    status,
    headers: { "content-type": "application/json" }
  })

const sessionNotFound = () => jsonRpcError(404, -32001, "Session not found")

/** The server sends no server-initiated messages, so it offers no GET stream (the SDK client accepts 405). */
const noServerStream = () => {
  const response = jsonRpcError(405, -32000, "Method Not Allowed: this server sends no server-initiated messages")
  response.headers.set("allow", "POST, DELETE")
  return response
}

const initializeOf = (body: unknown): InitializeRequest | undefined =>
  Array.isArray(body) ? body.find((m) => isInitializeRequest(m)) : isInitializeRequest(body) ? body : undefined

/** The version the SDK server answers: the client's when supported, else the latest. */
const negotiatedVersion = (requested: string) =>
  SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION

const toMcpTool = (t: ToolListing): Tool => ({
  name: t.name,
  description: t.description,
  inputSchema: {
    type: "object",
    properties: { ...t.inputSchema.properties } as Record<string, object>,
    ...(t.inputSchema.required !== undefined ? { required: [...t.inputSchema.required] } : {})
  }
})

const toMcpResult = (r: ToolResult): CallToolResult => ({
  content: r.content.map((c) => ({ type: "text" as const, text: c.text })),
  ...(r.isError === true ? { isError: true } : {})
})

/** An OpenAI-shaped refusal of `initialize`; the SDK client shows status and body as a StreamableHTTPError. */
const refusal = (refused: Extract<Admission, { _tag: "Refused" }>, limits: SessionLimits, at: number): Response => {
  const error = refused.full === "platform"
    ? new RateLimited({
      code: "rate_limit_exceeded",
      message: `This platform has ${limits.maxPerPlatform} open MCP sessions, the most allowed; ` +
        "end unused sessions (DELETE with mcp-session-id) or retry later"
    })
    : new ServiceUnavailable({ code: "service_unavailable", message: "The tool service has no room for another MCP session; retry later" })
  const retryAfterSeconds = refused.firstDeadline === undefined ? 1 : Math.max(1, Math.ceil((refused.firstDeadline - at) / 1000))
  const { status, body } = wireError(error)
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "retry-after": String(retryAfterSeconds) }
  })
}

/**
 * The sessions of the fleet as this instance serves them. Time comes from the Clock service
 * captured here (TestClock drives it in unit tests), read synchronously because the SDK's
 * callbacks are not Effects.
 */
export const makeMcpSessions = (limits: SessionLimits, handlers: SessionHandlers) =>
  Effect.gen(function*() {
    const clock = yield* Effect.clock
    const now = () => clock.unsafeCurrentTimeMillis()
    const rows = yield* makeMcpSessionRows
    const runPromise = Runtime.runPromise(yield* Effect.runtime<never>())

    /** The SDK server of one request; a listing or call in progress keeps the session from going idle. */
    const serverFor = (principal: EndUserPrincipal, appSlug: string, sessionId: string) => {
      const server = new Server({ ...mcpIdentity(appSlug), version: "1.0.0" }, { capabilities: { tools: {} } })
      const busyWhile = async <A>(run: () => Promise<A>): Promise<A> => {
        await runPromise(rows.callStarted(sessionId))
        try {
          return await run()
        } finally {
          // The answer matters more than the bookkeeping; a lost decrement ends with the lifetime.
          await runPromise(rows.callEnded(sessionId, now())).catch(() => undefined)
        }
      }
      // The low-level handlers take the apps' JSON Schemas as they are (no zod shapes).
      server.setRequestHandler(ListToolsRequestSchema, () =>
        busyWhile(async () => ({ tools: (await handlers.listTools(principal, appSlug)).map(toMcpTool) })))
      server.setRequestHandler(CallToolRequestSchema, (request) =>
        busyWhile(async () =>
          toMcpResult(await handlers.callTool(principal, appSlug, request.params.name, request.params.arguments ?? {}))))
      return server
    }

    /**
     * The initialize itself, on a transport that generates the id already admitted; `opened`
     * is false when the SDK refused it (the row is then discarded).
     */
    const runInitialize = async (principal: EndUserPrincipal, appSlug: string, id: string, request: Request, options: { parsedBody?: unknown }) => {
      const server = serverFor(principal, appSlug, id)
      const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: () => id })
      await server.connect(transport)
      const response = await transport.handleRequest(request, options)
      return { response, opened: transport.sessionId === id }
    }

    /**
     * Any later message of an admitted session: the SDK's stateless transport (no session id
     * generator; the session checks are done against the row), its answer labelled with the
     * session id as a stateful one is.
     */
    const runMessage = async (principal: EndUserPrincipal, appSlug: string, id: string, request: Request, options: { parsedBody?: unknown }) => {
      const server = serverFor(principal, appSlug, id)
      const transport = new WebStandardStreamableHTTPServerTransport({})
      await server.connect(transport)
      const response = await transport.handleRequest(request, options)
      response.headers.set("mcp-session-id", id)
      return response
    }

    const initialize = (principal: EndUserPrincipal, appSlug: string, init: InitializeRequest, request: Request, options: { parsedBody?: unknown }, at: number) =>
      Effect.gen(function*() {
        const id = randomUUID()
        const admission = yield* rows.admit(principal, {
          id,
          appSlug,
          protocolVersion: negotiatedVersion(init.params.protocolVersion),
          clientInfo: init.params.clientInfo,
          clientCapabilities: init.params.capabilities
        }, limits, at)
        if (admission._tag === "Refused") return refusal(admission, limits, at)
        const { response } = yield* Effect.promise(() => runInitialize(principal, appSlug, id, request, options)).pipe(
          Effect.onExit((exit) => Exit.isSuccess(exit) && exit.value.opened ? Effect.void : rows.discard(id))
        )
        return response
      })

    const continueSession = (principal: EndUserPrincipal, appSlug: string, id: string, request: Request, parsedBody: unknown, at: number) => {
      if (request.method === "DELETE") {
        return Effect.map(rows.end(id, principal.keyId, appSlug, at), (ended) => ended ? new Response(null, { status: 200 }) : sessionNotFound())
      }
      return Effect.flatMap(rows.touch(id, principal.keyId, appSlug, at), (live) => {
        if (!live) return Effect.succeed(sessionNotFound())
        if (request.method === "GET") return Effect.succeed(noServerStream())
        if (initializeOf(parsedBody) !== undefined) {
          return Effect.succeed(jsonRpcError(400, -32600, "Invalid Request: Server already initialized"))
        }
        return Effect.promise(() => runMessage(principal, appSlug, id, request, parsedBody === undefined ? {} : { parsedBody }))
      })
    }

    /**
     * Serves one MCP HTTP request of an authenticated end user. Another key's session, another
     * app's session, an unknown, an expired and an idle session all answer the same 404 (no probing).
     */
    const handle = (principal: EndUserPrincipal, appSlug: string, request: Request, parsedBody: unknown) =>
      Effect.suspend(() => {
        const at = now()
        const sessionId = request.headers.get("mcp-session-id")
        if (sessionId !== null) return continueSession(principal, appSlug, sessionId, request, parsedBody, at)
        const init = initializeOf(parsedBody)
        if (request.method !== "POST" || init === undefined) {
          return Effect.succeed(jsonRpcError(400, -32000, "Bad Request: No valid session ID provided"))
        }
        return initialize(principal, appSlug, init, request, parsedBody === undefined ? {} : { parsedBody }, at)
      })

    /** Deletes every session past its lifetime or idle time (clients that never sent DELETE). */
    const reap = Effect.suspend(() => rows.reap(now()))

    /** Open sessions, over the fleet or of one platform. */
    const count = (platformId?: string) => rows.count(platformId)

    return { handle, reap, count } as const
  })

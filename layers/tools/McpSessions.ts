// MCP sessions of the tool listener: one SDK server + web-standard streamable HTTP transport per
// session, kept in this instance's memory, bound to the API key that opened it. Capped per key,
// per platform and per instance; closed after an idle time or a fixed lifetime (per request and by a reaper).
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"
import {
  CallToolRequestSchema,
  type CallToolResult,
  isInitializeRequest,
  ListToolsRequestSchema,
  type Tool
} from "@modelcontextprotocol/sdk/types.js"
import { Effect } from "effect"
import { randomUUID } from "node:crypto"
import { RateLimited, ServiceUnavailable, wireError } from "../../schemas/Errors.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { ToolResult } from "./apps/ToolApp.js"
import type { ToolListing } from "./Catalog.js"

/** Clients that never DELETE their sessions cannot pile up more than this per key (least recently used closed first). */
export const MAX_SESSIONS_PER_KEY = 20

/** How many sessions there may be and how long they live. */
export interface SessionLimits {
  /** Absolute lifetime from initialize (GATEWAY_MCP_SESSION_TTL). */
  readonly ttlMillis: number
  /** A session with no request (and no tool call running) for this long is closed (GATEWAY_MCP_SESSION_IDLE). */
  readonly idleMillis: number
  /** Open sessions on this instance (GATEWAY_MCP_MAX_SESSIONS); an initialize beyond it answers 503. */
  readonly maxSessions: number
  /** Open sessions of one platform on this instance (GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM); beyond it, 429. */
  readonly maxPerPlatform: number
}

interface Session {
  readonly transport: WebStandardStreamableHTTPServerTransport
  readonly server: McpServer
  readonly keyId: string
  readonly platformId: string
  readonly appSlug: string
  readonly expiresAt: number
  /** Last request or end of a tool call. */
  lastSeenAt: number
  /** Tool calls and listings running now: a session in the middle of a call is not idle. */
  busy: number
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

const isInitialize = (body: unknown): boolean =>
  Array.isArray(body) ? body.some((m) => isInitializeRequest(m)) : isInitializeRequest(body)

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

const bump = (counts: Map<string, number>, key: string, by: number) => {
  const n = (counts.get(key) ?? 0) + by
  if (n <= 0) counts.delete(key)
  else counts.set(key, n)
}

/** An OpenAI-shaped refusal of `initialize`; the SDK client shows status and body as a StreamableHTTPError. */
const refusal = (error: RateLimited | ServiceUnavailable, retryAfterSeconds: number): Response => {
  const { status, body } = wireError(error)
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "retry-after": String(retryAfterSeconds) }
  })
}

/**
 * The session table of one instance. Time comes from the Clock service captured here (TestClock
 * drives it in unit tests), read synchronously because the SDK's callbacks are not Effects.
 */
export const makeMcpSessions = (limits: SessionLimits, handlers: SessionHandlers) =>
  Effect.map(Effect.clock, (clock) => {
    const now = () => clock.unsafeCurrentTimeMillis()
    const sessions = new Map<string, Session>()
    // Open sessions by platform and key, and initializes in flight (reserved before the SDK
    // registers the session, so concurrent initializes cannot all pass the same free slot).
    const perPlatform = new Map<string, number>()
    const perKey = new Map<string, number>()
    const opening = new Map<string, number>()
    let openingTotal = 0

    /** When the session stops being usable: its lifetime, or its idle time unless a call is running. */
    const deadlineOf = (s: Session) => s.busy > 0 ? s.expiresAt : Math.min(s.expiresAt, s.lastSeenAt + limits.idleMillis)
    const isStale = (s: Session, at: number) => deadlineOf(s) <= at

    const forget = (id: string) => {
      const session = sessions.get(id)
      if (session === undefined) return undefined
      sessions.delete(id)
      bump(perPlatform, session.platformId, -1)
      bump(perKey, session.keyId, -1)
      return session
    }

    const close = (id: string) => {
      const session = forget(id)
      if (session === undefined) return
      // Closing can reject when a stream is already gone; nothing is left to clean up then.
      void session.transport.close().catch(() => undefined)
      void session.server.close().catch(() => undefined)
    }

    const closeStale = (matching: (s: Session) => boolean, at: number) => {
      for (const [id, s] of sessions) if (matching(s) && isStale(s, at)) close(id)
    }

    /** Closes the key's least recently used sessions until it has at most `keep`. */
    const trimKey = (keyId: string, keep: number) => {
      while ((perKey.get(keyId) ?? 0) > keep) {
        let oldest: [string, Session] | undefined
        for (const entry of sessions) {
          if (entry[1].keyId === keyId && (oldest === undefined || entry[1].lastSeenAt < oldest[1].lastSeenAt)) oldest = entry
        }
        if (oldest === undefined) return
        close(oldest[0])
      }
    }

    /** Whole seconds until the first of these sessions frees its slot (at least 1). */
    const retryAfter = (matching: (s: Session) => boolean, at: number) => {
      let first = Infinity
      for (const s of sessions.values()) if (matching(s)) first = Math.min(first, deadlineOf(s))
      return Number.isFinite(first) ? Math.max(1, Math.ceil((first - at) / 1000)) : 1
    }

    const platformLoad = (platformId: string) => (perPlatform.get(platformId) ?? 0) + (opening.get(platformId) ?? 0)
    const instanceLoad = () => sessions.size + openingTotal

    /**
     * Room for one more session of this caller, or the refusal. The key's own cap displaces its
     * oldest session (a client that never DELETEs only hurts itself); the platform and instance
     * caps refuse, after closing what is already stale.
     */
    const admit = (principal: EndUserPrincipal, at: number): Response | undefined => {
      trimKey(principal.keyId, MAX_SESSIONS_PER_KEY - 1)
      const ofPlatform = (s: Session) => s.platformId === principal.platformId
      if (platformLoad(principal.platformId) >= limits.maxPerPlatform) {
        closeStale(ofPlatform, at)
        if (platformLoad(principal.platformId) >= limits.maxPerPlatform) {
          return refusal(
            new RateLimited({
              code: "rate_limit_exceeded",
              message: `This platform has ${limits.maxPerPlatform} open MCP sessions on this instance, the most allowed; ` +
                "end unused sessions (DELETE with mcp-session-id) or retry later"
            }),
            retryAfter(ofPlatform, at)
          )
        }
      }
      if (instanceLoad() >= limits.maxSessions) {
        closeStale(() => true, at)
        if (instanceLoad() >= limits.maxSessions) {
          return refusal(
            new ServiceUnavailable({ code: "service_unavailable", message: "The tool service has no room for another MCP session; retry later" }),
            retryAfter(() => true, at)
          )
        }
      }
      return undefined
    }

    const open = (principal: EndUserPrincipal, appSlug: string, at: number) => {
      const server = new McpServer({ name: `gateway-${appSlug}`, version: "1.0.0" }, { capabilities: { tools: {} } })
      // Filled in when the SDK registers the session; the tool handlers mark it busy while they run.
      let self: Session | undefined
      const busyWhile = async <A>(run: () => Promise<A>): Promise<A> => {
        const s = self
        if (s !== undefined) s.busy++
        try {
          return await run()
        } finally {
          if (s !== undefined) {
            s.busy--
            s.lastSeenAt = Math.max(s.lastSeenAt, now())
          }
        }
      }
      // The low-level handlers take the apps' JSON Schemas as they are (no zod shapes).
      server.server.setRequestHandler(ListToolsRequestSchema, () =>
        busyWhile(async () => ({ tools: (await handlers.listTools(principal, appSlug)).map(toMcpTool) })))
      server.server.setRequestHandler(CallToolRequestSchema, (request) =>
        busyWhile(async () =>
          toMcpResult(await handlers.callTool(principal, appSlug, request.params.name, request.params.arguments ?? {}))))
      const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        onsessioninitialized: (id) => {
          trimKey(principal.keyId, MAX_SESSIONS_PER_KEY - 1)
          self = {
            transport,
            server,
            keyId: principal.keyId,
            platformId: principal.platformId,
            appSlug,
            expiresAt: at + limits.ttlMillis,
            lastSeenAt: at,
            busy: 0
          }
          sessions.set(id, self)
          bump(perPlatform, principal.platformId, 1)
          bump(perKey, principal.keyId, 1)
        },
        // The client's DELETE: the transport closes itself after this.
        onsessionclosed: (id) => {
          forget(id)
        }
      })
      return { server, transport }
    }

    /** Runs an initialize with a reserved slot; a transport that did not become a session is closed. */
    const initialize = (principal: EndUserPrincipal, appSlug: string, request: Request, options: { parsedBody?: unknown }, at: number) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          bump(opening, principal.platformId, 1)
          openingTotal++
          return open(principal, appSlug, at)
        }),
        ({ server, transport }) =>
          Effect.zipRight(
            Effect.promise(() => server.connect(transport)),
            Effect.promise(() => transport.handleRequest(request, options))
          ),
        ({ server, transport }) =>
          Effect.sync(() => {
            bump(opening, principal.platformId, -1)
            openingTotal--
            const id = transport.sessionId
            if (id === undefined || sessions.get(id)?.transport !== transport) void server.close().catch(() => undefined)
          })
      )

    /**
     * Serves one MCP HTTP request of an authenticated end user. Another key's session, another
     * app's session, an unknown, an expired and an idle session all answer the same 404 (no probing).
     */
    const handle = (principal: EndUserPrincipal, appSlug: string, request: Request, parsedBody: unknown) =>
      Effect.suspend(() => {
        const at = now()
        const options = parsedBody === undefined ? {} : { parsedBody }
        const sessionId = request.headers.get("mcp-session-id")
        if (sessionId !== null) {
          const session = sessions.get(sessionId)
          if (session === undefined || session.keyId !== principal.keyId || session.appSlug !== appSlug) {
            return Effect.succeed(sessionNotFound())
          }
          if (isStale(session, at)) {
            close(sessionId)
            return Effect.succeed(sessionNotFound())
          }
          session.lastSeenAt = Math.max(session.lastSeenAt, at)
          return Effect.promise(() => session.transport.handleRequest(request, options))
        }
        if (request.method !== "POST" || !isInitialize(parsedBody)) {
          return Effect.succeed(jsonRpcError(400, -32000, "Bad Request: No valid session ID provided"))
        }
        const refused = admit(principal, at)
        if (refused !== undefined) return Effect.succeed(refused)
        return initialize(principal, appSlug, request, options, at)
      })

    /** Closes every session past its lifetime or idle time (clients that never sent DELETE). */
    const reap = Effect.sync(() => closeStale(() => true, now()))

    const closeAll = Effect.sync(() => {
      for (const id of [...sessions.keys()]) close(id)
    })

    /** Open sessions, on this instance and of one platform. */
    const count = (platformId?: string) => platformId === undefined ? sessions.size : (perPlatform.get(platformId) ?? 0)

    return { handle, reap, closeAll, count } as const
  })

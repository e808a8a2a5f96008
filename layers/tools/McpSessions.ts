// MCP sessions of the tool listener: one SDK server + web-standard streamable HTTP transport per
// session, kept in memory on this instance, bound to the API key that opened it, with a fixed
// lifetime (GATEWAY_MCP_SESSION_TTL, 30 minutes) enforced per request and by a reaper.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"
import {
  CallToolRequestSchema,
  type CallToolResult,
  isInitializeRequest,
  ListToolsRequestSchema,
  type Tool
} from "@modelcontextprotocol/sdk/types.js"
import { Clock, Effect } from "effect"
import { randomUUID } from "node:crypto"
import type { EndUserPrincipal } from "../KeyAuth.js"
import type { ToolResult } from "../toolapps/ToolApp.js"
import type { ToolListing } from "./Catalog.js"

/** Clients that never DELETE their sessions cannot pile up more than this per key (oldest closed first). */
const MAX_SESSIONS_PER_KEY = 20

interface Session {
  readonly transport: WebStandardStreamableHTTPServerTransport
  readonly server: McpServer
  readonly keyId: string
  readonly appSlug: string
  readonly expiresAt: number
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

export const makeMcpSessions = (ttlMillis: number, handlers: SessionHandlers) => {
  const sessions = new Map<string, Session>()

  const close = (id: string, session: Session) => {
    sessions.delete(id)
    // Closing can reject when a stream is already gone; nothing is left to clean up then.
    void session.transport.close().catch(() => undefined)
    void session.server.close().catch(() => undefined)
  }

  const open = (principal: EndUserPrincipal, appSlug: string, now: number) => {
    const server = new McpServer({ name: `gateway-${appSlug}`, version: "1.0.0" }, { capabilities: { tools: {} } })
    // The low-level handlers take the apps' JSON Schemas as they are (no zod shapes).
    server.server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: (await handlers.listTools(principal, appSlug)).map(toMcpTool)
    }))
    server.server.setRequestHandler(CallToolRequestSchema, async (request) =>
      toMcpResult(await handlers.callTool(principal, appSlug, request.params.name, request.params.arguments ?? {})))
    const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (id) => {
        const own = [...sessions].filter(([, s]) => s.keyId === principal.keyId).sort(([, a], [, b]) => a.expiresAt - b.expiresAt)
        for (const [oldId, old] of own.slice(0, Math.max(0, own.length - MAX_SESSIONS_PER_KEY + 1))) close(oldId, old)
        sessions.set(id, { transport, server, keyId: principal.keyId, appSlug, expiresAt: now + ttlMillis })
      },
      onsessionclosed: (id) => {
        sessions.delete(id)
      }
    })
    return { server, transport }
  }

  /**
   * Serves one MCP HTTP request of an authenticated end user. Another key's session, another
   * app's session, an unknown and an expired session all answer the same 404 (no probing).
   */
  const handle = (principal: EndUserPrincipal, appSlug: string, request: Request, parsedBody: unknown) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const options = parsedBody === undefined ? {} : { parsedBody }
      const sessionId = request.headers.get("mcp-session-id")
      if (sessionId !== null) {
        const session = sessions.get(sessionId)
        if (session === undefined || session.keyId !== principal.keyId || session.appSlug !== appSlug) return sessionNotFound()
        if (session.expiresAt <= now) {
          close(sessionId, session)
          return sessionNotFound()
        }
        return yield* Effect.promise(() => session.transport.handleRequest(request, options))
      }
      if (request.method !== "POST" || !isInitialize(parsedBody)) {
        return jsonRpcError(400, -32000, "Bad Request: No valid session ID provided")
      }
      const { server, transport } = open(principal, appSlug, now)
      yield* Effect.promise(() => server.connect(transport))
      return yield* Effect.promise(() => transport.handleRequest(request, options))
    })

  /** Closes every session past its lifetime (clients that never sent DELETE). */
  const reap = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    for (const [id, session] of sessions) if (session.expiresAt <= now) close(id, session)
  })

  const closeAll = Effect.sync(() => {
    for (const [id, session] of sessions) close(id, session)
  })

  return { handle, reap, closeAll, size: () => sessions.size } as const
}

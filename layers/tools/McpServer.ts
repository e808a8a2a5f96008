// The MCP side of the tool listener: the client config a key gets (GET /v1/me/mcp-config) and the
// MCP sessions that serve one app's tools, or the per-user URL's, over streamable HTTP.
import { PgClient } from "@effect/sql-pg"
import { Config, Duration, Effect, Runtime, Schedule } from "effect"
import type { McpConfig } from "../../schemas/Tools.js"
import { countConfig, durationMsConfig } from "../lib/ConfigValues.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { Activations } from "./Activations.js"
import { makeMcpSessions } from "./McpSessions.js"
import { type makePersonalTools, PERSONAL, PERSONAL_LABEL } from "./Personal.js"
import type { ToolCalls } from "./ToolCalls.js"
import { text } from "./ToolResults.js"
import { requireToolScope } from "./ToolScope.js"

/** Bounds of the MCP sessions of the fleet (see makeMcpSessions); the lifetime is GATEWAY_MCP_SESSION_TTL. */
const mcpSessionConfig = Config.all({
  idleMillis: durationMsConfig("GATEWAY_MCP_SESSION_IDLE", 5 * 60_000, 1),
  maxSessions: countConfig("GATEWAY_MCP_MAX_SESSIONS", 2000),
  maxPerPlatform: countConfig("GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM", 500)
})

/** The absolute lifetime of an MCP session. */
export const mcpSessionTtl = durationMsConfig("GATEWAY_MCP_SESSION_TTL", 30 * 60_000, 1).pipe(Config.map(Duration.millis))

type PersonalTools = Effect.Effect.Success<typeof makePersonalTools>

/**
 * GET /v1/me/mcp-config: the caller's own key goes into the headers (it is theirs to use). The
 * active apps, then the per-user URL as `gateway` when it offers this key any tool (skills,
 * capabilities).
 */
export const makeMcpConfig = (activations: Activations, personal: PersonalTools) => (principal: EndUserPrincipal, rawKey: string, mcpUrl: string) =>
  Effect.gen(function*() {
    const apps = yield* activations.activeApps(principal.platformId)
    const personalTools = yield* personal.list(principal)
    const servers = [
      ...apps.map((app) => ({ label: app.slug, url: `${mcpUrl}/mcp/${app.slug}` })),
      ...(personalTools.length > 0 ? [{ label: PERSONAL_LABEL, url: `${mcpUrl}/mcp` }] : [])
    ]
    const authorization = `Bearer ${rawKey}`
    const standard: Record<string, McpConfig["standard"][string]> = {}
    for (const s of servers) standard[s.label] = { transport: "streamable_http", url: s.url, headers: { Authorization: authorization } }
    const config: McpConfig = {
      standard,
      openai: servers.map((s) => ({ type: "mcp" as const, server_label: s.label, server_url: s.url, authorization }))
    }
    return config
  })

/** The MCP sessions as this instance serves them; every instance reaps the shared rows in the background. */
export const makeMcpServer = (activations: Activations, personal: PersonalTools, calls: ToolCalls) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const sessionTtl = yield* mcpSessionTtl.pipe(Effect.orDie)
    const sessionLimits = yield* mcpSessionConfig.pipe(Effect.orDie)
    const runtime = yield* Effect.runtime<never>()
    const runPromise = Runtime.runPromise(runtime)

    const sessions = yield* makeMcpSessions({ ttlMillis: Duration.toMillis(sessionTtl), ...sessionLimits }, {
      listTools: (principal, slug) => runPromise(slug === PERSONAL ? personal.list(principal) : calls.listTools(principal, slug)),
      callTool: (principal, slug, name, args) =>
        runPromise(
          slug === PERSONAL ? calls.callPersonal(principal, name, args) : calls.callAppTool(principal, slug, name, args).pipe(
            // The app was deactivated while the session was open (the scope is checked per request
            // before this; a refusal here would be a result too, never a protocol failure).
            Effect.catchTags({
              NotFound: (e) => Effect.succeed(text(e.message, true)),
              Forbidden: (e) => Effect.succeed(text(`${e.code}: ${e.message}`, true))
            })
          )
        )
    })
    const reapEvery = Duration.min(Duration.min(sessionTtl, Duration.millis(sessionLimits.idleMillis)), Duration.seconds(30))
    yield* sessions.reap.pipe(
      // A database outage skips one reap; the loop goes on.
      Effect.ignore,
      // Expired OAuth states are useless after a day (kept that long to tell "expired" from "forged").
      Effect.zipRight(sql`DELETE FROM oauth_states WHERE expires_at < now() - interval '1 day'`.pipe(Effect.ignore)),
      Effect.repeat(Schedule.spaced(reapEvery)),
      Effect.forkScoped
    )

    /**
     * One MCP HTTP request of an authenticated end user: 403 insufficient_scope for a key without
     * the tool scope (every message, initialize included), NotFound when the app is not active.
     */
    const handleMcp = (principal: EndUserPrincipal, slug: string, request: Request, parsedBody: unknown) =>
      requireToolScope(principal).pipe(
        Effect.zipRight(slug === PERSONAL ? Effect.void : activations.activeApp(principal.platformId, slug)),
        Effect.zipRight(sessions.handle(principal, slug, request, parsedBody))
      )

    return { handleMcp } as const
  })

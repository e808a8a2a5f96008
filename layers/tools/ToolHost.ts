// ToolHost: the tool service. Apps activated per platform, end users' OAuth connections (tokens
// sealed with Crypto, refreshed on expiry, flagged for re-auth on a provider 401), metered tool
// calls, and the MCP sessions of the tool listener. The hybrid loop reuses listTools/callTool.
import { PgClient } from "@effect/sql-pg"
import { Clock, Config, Duration, Effect, Either, Option, Runtime, Schedule, Schema } from "effect"
import { randomUUID, timingSafeEqual } from "node:crypto"
import { BadRequest, type Forbidden, NotFound, ValidationError } from "../../schemas/Errors.js"
import {
  type ActivateToolApp,
  type McpConfig,
  type McpConnection,
  OAuthNonce,
  type ToolAppActivation,
  type ToolAppListing,
  type ToolAppSlug
} from "../../schemas/Tools.js"
import { countConfig, durationMsConfig } from "../lib/ConfigValues.js"
import { allowPrivateUrls, checkUrl } from "../lib/SsrfGuard.js"
import { Crypto } from "../platform/Crypto.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import { appOf, findTool, listingOf, loadAppUrls, type ToolListing } from "./Catalog.js"
import { makePersonalTools } from "./Personal.js"
import { makeMcpSessions } from "./McpSessions.js"
import { makeMetering } from "./Metering.js"
import { authorizeLocation, newCodeVerifier, OAuthError, requestTokens, type TokenSet } from "./OAuth.js"
import { requireToolScope } from "./ToolScope.js"
import { toolApps } from "./apps/Registry.js"
import type { ToolApp, ToolResult } from "./apps/ToolApp.js"

export type { ToolListing } from "./Catalog.js"

/** The app slug of the per-user tool URL `{mcp_url}/mcp` (skills, capability agent tools). */
export const PERSONAL = ""

/** The per-user tool URL's `server_label` in mcp-config and in hosted tool items of /v1/responses. */
export const PERSONAL_LABEL = "gateway"

/** OAuth state lifetime: the state is signed, single use, and valid 10 minutes. */
const STATE_TTL_MS = 10 * 60_000
/** Refresh a little before the provider's expiry so a call never races it. */
const EXPIRY_SKEW_MS = 60_000

interface ActivationRow {
  readonly app_slug: ToolAppSlug
  readonly client_id: string
  readonly client_secret_encrypted: string
  readonly base_url: string
  readonly is_active: boolean
  readonly created_at: Date
}

interface ConnectionRow {
  readonly id: string
  readonly app_slug: string
  readonly access_token_encrypted: string | null
  readonly refresh_token_encrypted: string | null
  readonly expires_at: Date | null
  readonly needs_reauth: boolean
  readonly is_active: boolean
  readonly created_at: Date
}

interface StateRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string
  readonly app_slug: string
  readonly code_verifier_encrypted: string | null
  readonly redirect_uri: string
  readonly expires_at: Date
  readonly used_at: Date | null
}

/** The query of GET {mcp_url}/oauth/callback as the browser brings it. */
export interface CallbackQuery {
  readonly code?: string | undefined
  readonly state?: string | undefined
  readonly error?: string | undefined
  readonly error_description?: string | undefined
}

const text = (message: string, isError = false): ToolResult => ({
  content: [{ type: "text", text: message }],
  ...(isError ? { isError: true } : {})
})

const notConnected = (slug: string) =>
  text(
    `The ${slug} app is not connected for this user. Connect it first: have the platform call ` +
      `GET /oauth/authorize?app=${slug} on the tool service and open the returned location.`,
    true
  )

const reauthNeeded = (slug: string) =>
  text(
    `The ${slug} connection was revoked or has expired and must be reconnected via ` +
      `/oauth/authorize?app=${slug} on the tool service.`,
    true
  )

const appNotFound = (slug: string) => new NotFound({ code: "not_found", message: `Tool app ${slug} is not enabled for this platform` })

/** Bounds of the MCP sessions of one instance (see makeMcpSessions); the lifetime is GATEWAY_MCP_SESSION_TTL. */
const mcpSessionConfig = Config.all({
  idleMillis: durationMsConfig("GATEWAY_MCP_SESSION_IDLE", 5 * 60_000, 1),
  maxSessions: countConfig("GATEWAY_MCP_MAX_SESSIONS", 2000),
  maxPerPlatform: countConfig("GATEWAY_MCP_MAX_SESSIONS_PER_PLATFORM", 500)
})

/** The absolute lifetime of an MCP session. */
export const mcpSessionTtl = durationMsConfig("GATEWAY_MCP_SESSION_TTL", 30 * 60_000, 1).pipe(Config.map(Duration.millis))

const invalidState = new BadRequest({ code: "bad_request", message: "Invalid OAuth state: unknown or forged", param: "state" })

export class ToolHost extends Effect.Service<ToolHost>()("gateway/ToolHost", {
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const metering = yield* makeMetering
    const appUrls = yield* loadAppUrls.pipe(Effect.orDie)
    const allowPrivate = yield* allowPrivateUrls.pipe(Effect.orDie)
    const sessionTtl = yield* mcpSessionTtl.pipe(Effect.orDie)
    const sessionLimits = yield* mcpSessionConfig.pipe(Effect.orDie)
    const runtime = yield* Effect.runtime<never>()
    const runPromise = Runtime.runPromise(runtime)
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    // The per-user tool URL (/mcp, no app slug): skills and capability agent tools.
    const personal = yield* makePersonalTools
    const callPersonal = (principal: EndUserPrincipal, name: string, args: Readonly<Record<string, unknown>>) =>
      personal.call(principal, name, args).pipe(Effect.tap(() => metering.displayOnly(principal)))

    const urlsOf = (app: ToolApp) => appUrls.get(app.slug)!
    const decrypt = (sealed: string) => Effect.try(() => crypto.decrypt(sealed)).pipe(Effect.orDie)

    // --- activations --------------------------------------------------------------------

    /** POST /v1/platforms/{id}/mcp/apps: create or update; the secret is sealed, never echoed. */
    const activate = (platformId: string, input: ActivateToolApp) =>
      Effect.gen(function*() {
        // base_url is where browsers are sent back to: refuse internal targets like other tenant URLs.
        yield* checkUrl(input.base_url, allowPrivate).pipe(
          Effect.mapError((e) => new ValidationError({ code: "validation_error", message: `base_url: ${e.message}`, param: "base_url" }))
        )
        const [row] = yield* sql<ToolAppActivation>`INSERT INTO platform_tool_apps
            (platform_id, app_slug, client_id, client_secret_encrypted, base_url, is_active)
          VALUES (${platformId}, ${input.app_slug}, ${input.client_id}, ${crypto.encrypt(input.client_secret)}, ${input.base_url}, true)
          ON CONFLICT (platform_id, app_slug) DO UPDATE SET client_id = EXCLUDED.client_id,
            client_secret_encrypted = EXCLUDED.client_secret_encrypted, base_url = EXCLUDED.base_url,
            is_active = true, updated_at = now()
          RETURNING app_slug, is_active, created_at`.pipe(Effect.orDie)
        return row!
      }).pipe(Effect.withSpan("ToolHost.activate", { attributes: { "tool.app": input.app_slug } }))

    const activation = (platformId: string, slug: string) =>
      sql<ActivationRow>`SELECT app_slug, client_id, client_secret_encrypted, base_url, is_active, created_at
        FROM platform_tool_apps WHERE platform_id = ${platformId} AND app_slug = ${slug} AND is_active`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    /** The apps active on a platform, in the registry's order. */
    const activeApps = (platformId: string) =>
      sql<{ readonly app_slug: string }>`SELECT app_slug FROM platform_tool_apps
        WHERE platform_id = ${platformId} AND is_active`.pipe(
        Effect.map((rows) => {
          const active = new Set(rows.map((r) => r.app_slug))
          return toolApps.filter((a) => active.has(a.slug))
        }),
        Effect.orDie
      )

    /** The app when it exists and is active on the caller's platform; NotFound otherwise. */
    const activeApp = (platformId: string, slug: string) =>
      Effect.gen(function*() {
        const app = appOf(slug)
        if (app === undefined) return yield* appNotFound(slug)
        const row = yield* activation(platformId, slug)
        if (Option.isNone(row)) return yield* appNotFound(slug)
        return { app, activation: row.value }
      })

    /**
     * GET /v1/me/mcp-config: the caller's own key goes into the headers (it is theirs to use). The
     * active apps, then the per-user URL as `gateway` when it offers this key any tool (skills,
     * capabilities).
     */
    const mcpConfig = (principal: EndUserPrincipal, rawKey: string, mcpUrl: string) =>
      Effect.gen(function*() {
        const apps = yield* activeApps(principal.platformId)
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

    // --- connections --------------------------------------------------------------------

    const activeConnection = (endUserId: string, slug: string) =>
      sql<ConnectionRow>`SELECT id, app_slug, access_token_encrypted, refresh_token_encrypted, expires_at, needs_reauth,
          is_active, created_at
        FROM tool_connections WHERE end_user_id = ${endUserId} AND app_slug = ${slug} AND is_active`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        Effect.orDie
      )

    /** GET {mcp_url}/apps. `connected` means a usable connection (not waiting for re-auth). */
    const listApps = (principal: EndUserPrincipal) =>
      Effect.gen(function*() {
        yield* requireToolScope(principal)
        const apps = yield* activeApps(principal.platformId)
        const rows = yield* sql<{ readonly app_slug: string }>`SELECT app_slug FROM tool_connections
          WHERE end_user_id = ${principal.endUserId} AND is_active AND NOT needs_reauth`.pipe(Effect.orDie)
        const connected = new Set(rows.map((r) => r.app_slug))
        const data: ReadonlyArray<ToolAppListing> = apps.map((a) => ({
          slug: a.slug,
          name: a.name,
          tool_count: a.tools.length,
          connected: connected.has(a.slug)
        }))
        return { data }
      })

    /** GET {mcp_url}/connections: never tokens. */
    const listConnections = (principal: EndUserPrincipal) =>
      Effect.gen(function*() {
        yield* requireToolScope(principal)
        const rows = yield* sql<{ readonly id: string; readonly app_slug: string; readonly created_at: Date }>`SELECT id, app_slug,
            created_at
          FROM tool_connections WHERE end_user_id = ${principal.endUserId} AND is_active ORDER BY created_at, id`.pipe(Effect.orDie)
        return { data: rows.map((r): McpConnection => ({ id: r.id, appSlug: r.app_slug, createdAt: r.created_at.toISOString() })) }
      })

    /** DELETE {mcp_url}/connections/{app}: deactivates and forgets the tokens. */
    const disconnect = (principal: EndUserPrincipal, slug: string) =>
      Effect.gen(function*() {
        yield* requireToolScope(principal)
        const rows = yield* sql`UPDATE tool_connections SET is_active = false, access_token_encrypted = NULL,
            refresh_token_encrypted = NULL, updated_at = now()
          WHERE end_user_id = ${principal.endUserId} AND app_slug = ${slug} AND is_active RETURNING id`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* new NotFound({ code: "not_found", message: `No ${slug} connection` })
      })

    const markReauth = (connectionId: string) =>
      sql`UPDATE tool_connections SET needs_reauth = true, updated_at = now() WHERE id = ${connectionId}`.pipe(
        Effect.asVoid,
        Effect.orDie
      )

    // --- OAuth ----------------------------------------------------------------------------

    // The state is `{row id}[.{platform nonce}].{HMAC of what precedes}`: the nonce travels signed
    // through the provider and back, so it needs no column; the row makes the state single use.
    const signState = (stateId: string, nonce: string | undefined) => {
      const payload = nonce === undefined ? stateId : `${stateId}.${nonce}`
      return `${payload}.${crypto.hmac("oauth-state", payload)}`
    }

    /** The row id and platform nonce of a state we signed, or undefined for anything forged or malformed. */
    const verifyState = (state: string | undefined): { readonly stateId: string; readonly nonce: string | undefined } | undefined => {
      if (state === undefined) return undefined
      const dot = state.lastIndexOf(".")
      if (dot <= 0) return undefined
      const payload = state.slice(0, dot)
      const given = Buffer.from(state.slice(dot + 1))
      const expected = Buffer.from(crypto.hmac("oauth-state", payload))
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined
      const [stateId = "", nonce, ...rest] = payload.split(".")
      if (rest.length > 0 || !/^[0-9a-f-]{36}$/.test(stateId)) return undefined
      if (nonce !== undefined && !Schema.is(OAuthNonce)(nonce)) return undefined
      return { stateId, nonce }
    }

    const checkNonce = (nonce: string | undefined) =>
      nonce === undefined || Schema.is(OAuthNonce)(nonce)
        ? Effect.succeed(nonce)
        : Effect.fail(
          new ValidationError({
            code: "validation_error",
            param: "nonce",
            message: "nonce: 1 to 128 characters of A-Z, a-z, 0-9, '-' and '_'"
          })
        )

    /**
     * GET {mcp_url}/oauth/authorize?app=[&nonce=]: the provider consent URL, with a fresh
     * single-use state that carries the platform's nonce back to its landing route.
     */
    const authorize = (principal: EndUserPrincipal, slug: string, mcpUrl: string, platformNonce?: string | undefined) =>
      Effect.gen(function*() {
        yield* requireToolScope(principal)
        const nonce = yield* checkNonce(platformNonce)
        const { app, activation: act } = yield* activeApp(principal.platformId, slug)
        const stateId = randomUUID()
        const verifier = app.oauth.pkce ? newCodeVerifier() : null
        const redirectUri = `${mcpUrl}/oauth/callback`
        const at = yield* now
        yield* sql`INSERT INTO oauth_states (id, platform_id, end_user_id, app_slug, code_verifier_encrypted, redirect_uri, expires_at)
          VALUES (${stateId}, ${principal.platformId}, ${principal.endUserId}, ${app.slug},
            ${verifier === null ? null : crypto.encrypt(verifier)}, ${redirectUri}, ${new Date(at.getTime() + STATE_TTL_MS)})`.pipe(
          Effect.orDie
        )
        return authorizeLocation(app, urlsOf(app), {
          clientId: act.client_id,
          redirectUri,
          state: signState(stateId, nonce),
          codeVerifier: verifier
        })
      }).pipe(Effect.withSpan("ToolHost.authorize", { attributes: { "tool.app": slug } }))

    const landing = (
      baseUrl: string,
      slug: string,
      nonce: string | undefined,
      outcome: { readonly error: string; readonly description: string } | null
    ) => {
      const url = new URL(`${baseUrl.replace(/\/+$/, "")}/mcp/oauth-callback`)
      url.searchParams.set("app", slug)
      url.searchParams.set("status", outcome === null ? "connected" : "error")
      // The landing route compares it with the nonce bound to the browser that started the flow.
      if (nonce !== undefined) url.searchParams.set("nonce", nonce)
      if (outcome !== null) {
        url.searchParams.set("error", outcome.error)
        url.searchParams.set("error_description", outcome.description)
      }
      return url.toString()
    }

    const storeTokens = (state: StateRow, tokens: TokenSet, at: Date) =>
      Effect.gen(function*() {
        // One active connection per (user, app): the new one replaces any earlier one.
        yield* sql`UPDATE tool_connections SET is_active = false, access_token_encrypted = NULL, refresh_token_encrypted = NULL,
            updated_at = now()
          WHERE end_user_id = ${state.end_user_id} AND app_slug = ${state.app_slug} AND is_active`
        yield* sql`INSERT INTO tool_connections (platform_id, end_user_id, app_slug, access_token_encrypted,
            refresh_token_encrypted, expires_at)
          VALUES (${state.platform_id}, ${state.end_user_id}, ${state.app_slug}, ${crypto.encrypt(tokens.accessToken)},
            ${tokens.refreshToken === null ? null : crypto.encrypt(tokens.refreshToken)},
            ${tokens.expiresIn === null ? null : new Date(at.getTime() + tokens.expiresIn * 1000)})`
      }).pipe(sql.withTransaction, Effect.orDie)

    /**
     * GET {mcp_url}/oauth/callback: claims the state (signature, unused, unexpired), exchanges the
     * code and answers the landing-page location. A forged state names no platform, so it fails
     * with BadRequest instead of a redirect.
     */
    const callback = (query: CallbackQuery) =>
      Effect.gen(function*() {
        const verified = verifyState(query.state)
        if (verified === undefined) return yield* invalidState
        const { stateId, nonce } = verified
        const at = yield* now
        const [claimed] = yield* sql<StateRow>`UPDATE oauth_states SET used_at = ${at}
          WHERE id = ${stateId} AND used_at IS NULL AND expires_at > ${at} RETURNING *`.pipe(Effect.orDie)
        const state = claimed ?? (yield* sql<StateRow>`SELECT * FROM oauth_states WHERE id = ${stateId}`.pipe(Effect.orDie))[0]
        if (state === undefined) return yield* invalidState
        const app = appOf(state.app_slug)
        const act = yield* activation(state.platform_id, state.app_slug)
        if (app === undefined || Option.isNone(act)) return yield* invalidState
        const back = (outcome: { readonly error: string; readonly description: string } | null) =>
          landing(act.value.base_url, state.app_slug, nonce, outcome)
        if (claimed === undefined) {
          return back({ error: "invalid_state", description: "This authorization link was already used or has expired; start again" })
        }
        if (query.error !== undefined) {
          return back({ error: query.error, description: query.error_description ?? "The provider refused the authorization" })
        }
        if (query.code === undefined || query.code === "") {
          return back({ error: "invalid_request", description: "The provider sent no authorization code" })
        }
        const params: Record<string, string> = {
          grant_type: "authorization_code",
          code: query.code,
          redirect_uri: state.redirect_uri,
          client_id: act.value.client_id,
          client_secret: yield* decrypt(act.value.client_secret_encrypted)
        }
        if (state.code_verifier_encrypted !== null) params.code_verifier = yield* decrypt(state.code_verifier_encrypted)
        const tokens = yield* requestTokens(urlsOf(app).tokenUrl, params).pipe(Effect.either)
        if (Either.isLeft(tokens)) return back({ error: tokens.left.error, description: tokens.left.description })
        yield* storeTokens(state, tokens.right, at)
        return back(null)
      }).pipe(Effect.withSpan("ToolHost.callback"))

    /**
     * Refreshes an expired access token under the connection's row lock, so concurrent calls
     * refresh once (providers that rotate refresh tokens would otherwise revoke the loser's).
     */
    const refresh = (connectionId: string, app: ToolApp, act: ActivationRow) =>
      Effect.gen(function*() {
        const [row] = yield* sql<ConnectionRow>`SELECT id, app_slug, access_token_encrypted, refresh_token_encrypted, expires_at,
            needs_reauth, is_active, created_at
          FROM tool_connections WHERE id = ${connectionId} FOR UPDATE`
        if (row === undefined || !row.is_active) return Either.left(notConnected(app.slug))
        if (row.needs_reauth || row.access_token_encrypted === null) return Either.left(reauthNeeded(app.slug))
        const at = yield* now
        if (row.expires_at === null || row.expires_at.getTime() - EXPIRY_SKEW_MS > at.getTime()) {
          return Either.right(yield* decrypt(row.access_token_encrypted)) // another call refreshed it meanwhile
        }
        if (row.refresh_token_encrypted === null) {
          yield* markReauth(row.id)
          return Either.left(reauthNeeded(app.slug))
        }
        const result = yield* requestTokens(urlsOf(app).tokenUrl, {
          grant_type: "refresh_token",
          refresh_token: yield* decrypt(row.refresh_token_encrypted),
          client_id: act.client_id,
          client_secret: yield* decrypt(act.client_secret_encrypted)
        }).pipe(Effect.either)
        if (Either.isLeft(result)) {
          // 4xx (invalid_grant, revoked client) needs the user; anything else may pass.
          const e: OAuthError = result.left
          if (e.status !== null && e.status >= 400 && e.status < 500) {
            yield* markReauth(row.id)
            return Either.left(reauthNeeded(app.slug))
          }
          return Either.left(text(`Could not refresh the ${app.slug} token (${e.description}); try again later.`, true))
        }
        const tokens = result.right
        yield* sql`UPDATE tool_connections SET access_token_encrypted = ${crypto.encrypt(tokens.accessToken)},
            refresh_token_encrypted = ${tokens.refreshToken === null ? row.refresh_token_encrypted : crypto.encrypt(tokens.refreshToken)},
            expires_at = ${tokens.expiresIn === null ? null : new Date(at.getTime() + tokens.expiresIn * 1000)}, updated_at = now()
          WHERE id = ${row.id}`
        return Either.right(tokens.accessToken)
      }).pipe(sql.withTransaction, Effect.orDie, Effect.withSpan("ToolHost.refresh", { attributes: { "tool.app": app.slug } }))

    /** A usable access token (refreshed when due), or the tool result that explains why not. */
    const accessToken = (principal: EndUserPrincipal, app: ToolApp, act: ActivationRow) =>
      Effect.gen(function*() {
        const conn = yield* activeConnection(principal.endUserId, app.slug)
        if (Option.isNone(conn)) return Either.left(notConnected(app.slug))
        const c = conn.value
        if (c.needs_reauth || c.access_token_encrypted === null) return Either.left(reauthNeeded(app.slug))
        const at = yield* Clock.currentTimeMillis
        const token = c.expires_at !== null && c.expires_at.getTime() - EXPIRY_SKEW_MS <= at
          ? yield* refresh(c.id, app, act)
          : Either.right(yield* decrypt(c.access_token_encrypted))
        return Either.map(token, (value) => ({ connectionId: c.id, value }))
      })

    // --- tools ----------------------------------------------------------------------------

    /**
     * The app's tools as MCP lists them (`{slug}_{tool}`); NotFound unless active on the platform.
     * PERSONAL: what the per-user URL offers this key (perhaps nothing).
     */
    const listTools = (principal: EndUserPrincipal, slug: string): Effect.Effect<ReadonlyArray<ToolListing>, Forbidden | NotFound> =>
      slug === PERSONAL
        ? requireToolScope(principal).pipe(Effect.zipRight(personal.list(principal)))
        : requireToolScope(principal).pipe(
          Effect.zipRight(activeApp(principal.platformId, slug)),
          Effect.map(({ app }): ReadonlyArray<ToolListing> => listingOf(app))
        )

    /** One tool of the per-user URL (metered as display-only, like its MCP calls). */
    const callPersonalTool = (principal: EndUserPrincipal, toolName: string, args: Readonly<Record<string, unknown>>) =>
      requireToolScope(principal).pipe(
        Effect.zipRight(callPersonal(principal, toolName, args)),
        Effect.withSpan("ToolHost.callTool", { attributes: { "tool.app": PERSONAL_LABEL, "tool.name": toolName } })
      )

    /**
     * Runs one tool as the end user and meters it. Only calls that reached the provider count
     * (and, past the free tier, cost); a 401 from the provider marks the connection for re-auth
     * and is not charged. App-level failures are `isError` results, never Effect failures.
     */
    const callAppTool = (principal: EndUserPrincipal, slug: string, toolName: string, args: Readonly<Record<string, unknown>>) =>
      Effect.gen(function*() {
        // Before anything reaches the provider or the meter.
        yield* requireToolScope(principal)
        const { app, activation: act } = yield* activeApp(principal.platformId, slug)
        const tool = findTool(app, toolName)
        if (tool === undefined) return text(`Unknown tool ${toolName} for app ${slug}`, true)
        const token = yield* accessToken(principal, app, act)
        if (Either.isLeft(token)) return token.left
        const started = yield* Clock.currentTimeMillis
        const outcome = yield* tool.run({ apiUrl: urlsOf(app).apiUrl, accessToken: token.right.value }, args).pipe(
          Effect.catchAllDefect((defect) =>
            Effect.logError("tool crashed", defect).pipe(
              Effect.as<ToolResult>(text(`The ${slug} tool ${tool.name} failed unexpectedly`, true))
            )
          ),
          Effect.either
        )
        const latencyMs = (yield* Clock.currentTimeMillis) - started
        if (Either.isLeft(outcome) && outcome.left.reauth) {
          yield* markReauth(token.right.connectionId)
          return reauthNeeded(slug)
        }
        const result = Either.isRight(outcome)
          ? outcome.right
          : text(`${slug} API error${outcome.left.status === null ? "" : ` (HTTP ${outcome.left.status})`}: ${outcome.left.message}`, true)
        const failed = result.isError === true
        yield* metering.record(principal, {
          appSlug: app.slug,
          tool: tool.name,
          status: failed ? "error" : "success",
          errorMessage: failed ? (result.content[0]?.text ?? "error").slice(0, 1000) : null,
          latencyMs
        })
        return result
      }).pipe(Effect.withSpan("ToolHost.callTool", { attributes: { "tool.app": slug, "tool.name": toolName } }))

    /** A tool of an app, or of the per-user URL (PERSONAL). */
    const callTool = (
      principal: EndUserPrincipal,
      slug: string,
      toolName: string,
      args: Readonly<Record<string, unknown>>
    ): Effect.Effect<ToolResult, Forbidden | NotFound> =>
      slug === PERSONAL ? callPersonalTool(principal, toolName, args) : callAppTool(principal, slug, toolName, args)

    // --- MCP sessions ---------------------------------------------------------------------

    const sessions = yield* makeMcpSessions({ ttlMillis: Duration.toMillis(sessionTtl), ...sessionLimits }, {
      listTools: (principal, slug) => runPromise(slug === PERSONAL ? personal.list(principal) : listTools(principal, slug)),
      callTool: (principal, slug, name, args) =>
        runPromise(
          slug === PERSONAL ? callPersonal(principal, name, args) : callAppTool(principal, slug, name, args).pipe(
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
      // Expired OAuth states are useless after a day (kept that long to tell "expired" from "forged").
      Effect.zipRight(sql`DELETE FROM oauth_states WHERE expires_at < now() - interval '1 day'`.pipe(Effect.ignore)),
      Effect.repeat(Schedule.spaced(reapEvery)),
      Effect.forkScoped
    )
    yield* Effect.addFinalizer(() => sessions.closeAll)

    /**
     * One MCP HTTP request of an authenticated end user: 403 insufficient_scope for a key without
     * the tool scope (every message, initialize included), NotFound when the app is not active.
     */
    const handleMcp = (principal: EndUserPrincipal, slug: string, request: Request, parsedBody: unknown) =>
      requireToolScope(principal).pipe(
        Effect.zipRight(slug === PERSONAL ? Effect.void : activeApp(principal.platformId, slug)),
        Effect.zipRight(sessions.handle(principal, slug, request, parsedBody))
      )

    return {
      activate,
      activeApps,
      mcpConfig,
      listApps,
      listConnections,
      disconnect,
      authorize,
      callback,
      listTools,
      callTool,
      handleMcp
    } as const
  })
}) {}

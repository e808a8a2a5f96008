// A usable access token for a tool call: decrypted from the connection, refreshed when due, or
// the tool result that tells the model why there is none.
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Either, Option } from "effect"
import { Crypto } from "../platform/Crypto.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { ActivationRow } from "./Activations.js"
import type { ConnectionRow, Connections } from "./Connections.js"
import { type AppUrls, type OAuthError, requestTokens } from "./OAuth.js"
import { notConnected, reauthNeeded, text } from "./ToolResults.js"
import type { ToolApp } from "./apps/ToolApp.js"

/** Refresh a little before the provider's expiry so a call never races it. */
const EXPIRY_SKEW_MS = 60_000

export const makeAccessTokens = (connections: Connections, urlsOf: (app: ToolApp) => AppUrls) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    const decrypt = (sealed: string) => Effect.try(() => crypto.decrypt(sealed)).pipe(Effect.orDie)
    const { activeConnection, markReauth } = connections

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

    return { accessToken } as const
  })

export type AccessTokens = Effect.Effect.Success<ReturnType<typeof makeAccessTokens>>

// End users' OAuth connections to tool apps: one active connection per (user, app), listed
// without tokens, flagged for re-auth when the provider refuses its token.
import { PgClient } from "@effect/sql-pg"
import { Effect, Option } from "effect"
import { NotFound } from "../../schemas/Errors.js"
import type { McpConnection, ToolAppListing } from "../../schemas/Tools.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { Activations } from "./Activations.js"
import { requireToolScope } from "./ToolScope.js"

export interface ConnectionRow {
  readonly id: string
  readonly app_slug: string
  readonly access_token_encrypted: string | null
  readonly refresh_token_encrypted: string | null
  readonly expires_at: Date | null
  readonly needs_reauth: boolean
  readonly is_active: boolean
  readonly created_at: Date
}

export const makeConnections = (activations: Activations) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

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
        const apps = yield* activations.activeApps(principal.platformId)
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

    return { activeConnection, listApps, listConnections, disconnect, markReauth } as const
  })

export type Connections = Effect.Effect.Success<ReturnType<typeof makeConnections>>

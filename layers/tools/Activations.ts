// The tool apps a platform activated: its OAuth client per app (secret sealed with Crypto) and
// the base URL its users' browsers land back on.
import { PgClient } from "@effect/sql-pg"
import { Effect, Option } from "effect"
import { NotFound, ValidationError } from "../../schemas/Errors.js"
import type { ActivateToolApp, ToolAppActivation, ToolAppActivations, ToolAppSlug } from "../../schemas/Tools.js"
import { allowPrivateUrls, checkUrl } from "../lib/SsrfGuard.js"
import { Crypto } from "../platform/Crypto.js"
import { appOf } from "./Catalog.js"
import { toolApps } from "./apps/Registry.js"

export interface ActivationRow {
  readonly app_slug: ToolAppSlug
  readonly client_id: string
  readonly client_secret_encrypted: string
  readonly base_url: string
  readonly is_active: boolean
  readonly created_at: Date
}

const appNotFound = (slug: string) => new NotFound({ code: "not_found", message: `Tool app ${slug} is not enabled for this platform` })

export const makeActivations = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  const crypto = yield* Crypto
  const allowPrivate = yield* allowPrivateUrls.pipe(Effect.orDie)

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

  /** GET /v1/platforms/{id}/mcp/apps: every activation with its users' live connections. */
  const list = (platformId: string) =>
    sql<ToolAppActivations["data"][number]>`SELECT a.app_slug, a.base_url, a.is_active, a.created_at,
        count(c.id) FILTER (WHERE c.is_active)::int AS connections,
        count(c.id) FILTER (WHERE c.is_active AND c.needs_reauth)::int AS needs_reauth
      FROM platform_tool_apps a
      LEFT JOIN tool_connections c ON c.platform_id = a.platform_id AND c.app_slug = a.app_slug
      WHERE a.platform_id = ${platformId}
      GROUP BY a.app_slug, a.base_url, a.is_active, a.created_at
      ORDER BY a.app_slug`.pipe(Effect.map((data) => ({ data })), Effect.orDie)

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

  return { activate, list, activation, activeApps, activeApp } as const
})

export type Activations = Effect.Effect.Success<typeof makeActivations>

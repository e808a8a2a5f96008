// Which rate limits apply to an end user: their explicit override, else the platform default
// (settings.default_rate_limits), else none. Read at admission and by GET /v1/me/rate-limits.
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { EffectiveRateLimits } from "../../schemas/Catalog.js"
import { NotFound } from "../../schemas/Errors.js"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import { isUuid } from "../lib/Ids.js"

/** The resolution rule: the user's override, else the platform default, else none. */
export const resolveLimits = (
  override: { readonly rpm: number | null; readonly tpm: number | null; readonly rpd: number | null } | null,
  defaults: PlatformSettings["default_rate_limits"]
): EffectiveRateLimits =>
  override !== null
    ? { rpm_limit: override.rpm, tpm_limit: override.tpm, rpd_limit: override.rpd, resolution: "explicit" }
    : defaults !== undefined
    ? { rpm_limit: defaults.rpm_limit ?? null, tpm_limit: defaults.tpm_limit ?? null, rpd_limit: defaults.rpd_limit ?? null, resolution: "default" }
    : { rpm_limit: null, tpm_limit: null, rpd_limit: null, resolution: "none" }

export class RateLimitSettings extends Effect.Service<RateLimitSettings>()("gateway/RateLimitSettings", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    const effective = (platformId: string, endUserId: string) =>
      sql<{ settings: PlatformSettings; has_override: boolean; rpm_limit: number | null; tpm_limit: number | null; rpd_limit: number | null }>`
        SELECT p.settings, o.end_user_id IS NOT NULL AS has_override, o.rpm_limit, o.tpm_limit, o.rpd_limit
        FROM platforms p LEFT JOIN end_user_rate_limits o ON o.end_user_id = ${endUserId} AND o.platform_id = p.id
        WHERE p.id = ${platformId}`.pipe(
        Effect.map(([row]) =>
          resolveLimits(
            row?.has_override === true ? { rpm: row.rpm_limit, tpm: row.tpm_limit, rpd: row.rpd_limit } : null,
            row?.settings.default_rate_limits
          )),
        Effect.orDie
      )

    const requireEndUser = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        const rows = isUuid(endUserId)
          ? yield* sql`SELECT 1 FROM end_users WHERE id = ${endUserId} AND platform_id = ${platformId}`.pipe(Effect.orDie)
          : []
        if (rows.length === 0) return yield* new NotFound({ code: "not_found", message: "No such end user" })
      })

    const put = (
      platformId: string,
      endUserId: string,
      limits: { readonly rpm_limit: number | null; readonly tpm_limit: number | null; readonly rpd_limit: number | null }
    ) =>
      Effect.gen(function*() {
        yield* requireEndUser(platformId, endUserId)
        yield* sql`INSERT INTO end_user_rate_limits (end_user_id, platform_id, rpm_limit, tpm_limit, rpd_limit)
          VALUES (${endUserId}, ${platformId}, ${limits.rpm_limit}, ${limits.tpm_limit}, ${limits.rpd_limit})
          ON CONFLICT (end_user_id) DO UPDATE SET rpm_limit = excluded.rpm_limit, tpm_limit = excluded.tpm_limit,
            rpd_limit = excluded.rpd_limit, updated_at = now()`.pipe(Effect.orDie)
        return yield* effective(platformId, endUserId)
      })

    const remove = (platformId: string, endUserId: string) =>
      Effect.gen(function*() {
        yield* requireEndUser(platformId, endUserId)
        yield* sql`DELETE FROM end_user_rate_limits WHERE end_user_id = ${endUserId}`.pipe(Effect.orDie)
      })

    return { effective, put, remove } as const
  })
}) {}

// Which rate limits apply to an end user: their explicit override, else the platform default
// (settings.default_rate_limits), else none. Read at admission and by GET /v1/me/rate-limits.
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { EffectiveRateLimits } from "../schemas/Catalog.js"
import { NotFound } from "../schemas/Errors.js"
import { isUuid } from "../src/lib/Ids.js"

interface LimitsRow {
  readonly source: "explicit" | "default"
  readonly rpm_limit: number | null
  readonly tpm_limit: number | null
  readonly rpd_limit: number | null
}

export class RateLimitSettings extends Effect.Service<RateLimitSettings>()("gateway/RateLimitSettings", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    const effective = (platformId: string, endUserId: string) =>
      sql<LimitsRow>`
        SELECT 'explicit' AS source, rpm_limit, tpm_limit, rpd_limit FROM end_user_rate_limits
          WHERE end_user_id = ${endUserId} AND platform_id = ${platformId}
        UNION ALL
        SELECT 'default', (settings->'default_rate_limits'->>'rpm_limit')::int, (settings->'default_rate_limits'->>'tpm_limit')::int,
          (settings->'default_rate_limits'->>'rpd_limit')::int
        FROM platforms WHERE id = ${platformId} AND settings ? 'default_rate_limits'`.pipe(
        Effect.map((rows): EffectiveRateLimits => {
          const row = rows.find((r) => r.source === "explicit") ?? rows[0]
          return row === undefined
            ? { rpm_limit: null, tpm_limit: null, rpd_limit: null, resolution: "none" }
            : { rpm_limit: row.rpm_limit, tpm_limit: row.tpm_limit, rpd_limit: row.rpd_limit, resolution: row.source }
        }),
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

// Reading the inference log of a platform (rows are written by settlement, in its transaction).
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { InferenceLogEntry } from "../../schemas/Logs.js"
import { isUuid } from "../lib/Ids.js"
import { offsetOf, paginate } from "../lib/Pagination.js"

export class InferenceLogs extends Effect.Service<InferenceLogs>()("gateway/InferenceLogs", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    /** Newest first; filters by model slug and end user. */
    const list = (
      platformId: string,
      params: { readonly model?: string | undefined; readonly end_user_id?: string | undefined; readonly page: number; readonly limit: number }
    ) => {
      const where = sql.and([
        sql`platform_id = ${platformId}`,
        ...(params.model === undefined ? [] : [sql`model_slug = ${params.model}`]),
        ...(params.end_user_id === undefined
          ? []
          : [isUuid(params.end_user_id) ? sql`end_user_id = ${params.end_user_id}` : sql`false`])
      ])
      return paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM inference_logs WHERE ${where}`,
        sql<InferenceLogEntry>`SELECT id, platform_id, end_user_id, request_type, provider_id, model_id, provider_model_id,
            prompt_tokens, completion_tokens, total_tokens, latency_ms, estimated_cost_usd::text, status, error_message,
            token_count_method, billing_status, metadata, created_at
          FROM inference_logs WHERE ${where} ORDER BY created_at DESC, id
          LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`
      ).pipe(Effect.orDie)
    }

    return { list } as const
  })
}) {}

// The inference log: one row per served call, paid capability run and metered tool call. This
// module holds every statement that writes the table, so its columns and the rule that a row's id
// is its settlement's identity (a retry applies nothing twice) are stated once; the writers
// (Settlements, settle_at_once, Capabilities, tool Metering) run them inside the transactions
// that move the money the rows record. `InferenceLogs` reads it (the listing).
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { InferenceLogEntry } from "../../schemas/Logs.js"
import { isUuid } from "../lib/Ids.js"
import { offsetOf, paginate } from "../lib/Pagination.js"

/** `estimated`: billed on the gateway's own token count (the provider's usage was out of bounds). */
/** `failed`: the call's settlement could not be written after its retries; nothing was debited. */
export type BillingStatus = "billed" | "not_billed" | "estimated" | "failed"

/** A log row as its writers give it; `id` is the database's default unless the row carries one (LogRowWithId). */
export interface LogRow {
  readonly platform_id: string
  readonly end_user_id: string | null
  readonly request_type: string
  readonly provider_id: string | null
  readonly model_id: string | null
  readonly model_slug: string | null
  readonly provider_model_id: string | null
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly total_tokens: number
  readonly latency_ms: number
  /** Exact decimal text (sqlDec). */
  readonly estimated_cost_usd: string
  readonly status: string
  readonly error_message: string | null
  readonly token_count_method: string
  readonly billing_status: BillingStatus
  readonly metadata: Record<string, unknown>
  readonly created_at: Date
}

/** A settled call's row: its id is the settlement's identity. */
export interface LogRowWithId extends LogRow {
  readonly id: string
}

/** The columns of a row that records no model call (a capability run, a tool call): no model, no tokens. */
export const NOT_A_MODEL_CALL = {
  provider_id: null,
  model_id: null,
  model_slug: null,
  provider_model_id: null,
  prompt_tokens: 0,
  completion_tokens: 0,
  total_tokens: 0,
  token_count_method: "none"
} as const satisfies Partial<LogRow>

/** One row, in the caller's transaction (a capability run, a tool call: beside their debits); gives its id. */
export const insertLogRow = (sql: PgClient.PgClient, row: LogRow) =>
  sql<{ readonly id: string }>`INSERT INTO inference_logs (platform_id, end_user_id, request_type, provider_id, model_id, model_slug,
      provider_model_id, prompt_tokens, completion_tokens, total_tokens, latency_ms, estimated_cost_usd, status,
      error_message, token_count_method, billing_status, metadata, created_at)
    VALUES (${row.platform_id}, ${row.end_user_id}, ${row.request_type}, ${row.provider_id}, ${row.model_id},
      ${row.model_slug}, ${row.provider_model_id}, ${row.prompt_tokens}, ${row.completion_tokens}, ${row.total_tokens},
      ${row.latency_ms}, ${row.estimated_cost_usd}, ${row.status}, ${row.error_message}, ${row.token_count_method},
      ${row.billing_status}, ${sql.json(row.metadata)}, ${row.created_at})
    RETURNING id`

/**
 * A paid tool call's outcome on the row written when it was charged (the charge comes before
 * the call, so the row records the money at once and the call's result once it is known).
 */
export const recordLogOutcome = (
  sql: PgClient.PgClient,
  id: string,
  outcome: { readonly status: string; readonly error_message: string | null; readonly latency_ms: number }
) =>
  sql`UPDATE inference_logs SET status = ${outcome.status}, error_message = ${outcome.error_message},
      latency_ms = ${outcome.latency_ms}
    WHERE id = ${id}`

/**
 * A group's rows as one INSERT ... SELECT, a fragment for the caller's statement (Settlements
 * puts it in a CTE and adds its RETURNING): a row whose id exists already is skipped.
 */
export const insertLogRows = (sql: PgClient.PgClient, rows: ReadonlyArray<LogRowWithId>) =>
  sql`INSERT INTO inference_logs (id, platform_id, end_user_id, request_type, provider_id,
      model_id, model_slug, provider_model_id, prompt_tokens, completion_tokens, total_tokens, latency_ms,
      estimated_cost_usd, status, error_message, token_count_method, billing_status, metadata, created_at)
    SELECT x.id, x.platform_id, x.end_user_id, x.request_type, x.provider_id, x.model_id, x.model_slug,
      x.provider_model_id, x.prompt_tokens, x.completion_tokens, x.total_tokens, x.latency_ms, x.estimated_cost_usd,
      x.status, x.error_message, x.token_count_method, x.billing_status, x.metadata, x.created_at
    FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(id uuid, platform_id uuid,
      end_user_id uuid, request_type text, provider_id uuid, model_id uuid, model_slug text, provider_model_id text,
      prompt_tokens int, completion_tokens int, total_tokens int, latency_ms int, estimated_cost_usd numeric,
      status text, error_message text, token_count_method text, billing_status text, metadata jsonb,
      created_at timestamptz)
    ON CONFLICT (id) DO NOTHING`

/**
 * The rows settle_at_once writes, as text of its body (SettleAtOnce.ts): from the function's
 * relation `x` (its settlements, `i` their order), only when its checks passed (`ok`). The
 * billing status follows from the cost: the function writes no other.
 */
export const atOnceLogInsert = `INSERT INTO inference_logs (id, platform_id, end_user_id, request_type, provider_id, model_id, model_slug,
          provider_model_id, prompt_tokens, completion_tokens, total_tokens, latency_ms, estimated_cost_usd, status,
          error_message, token_count_method, billing_status, metadata, created_at)
        SELECT x.id, x.platform_id, x.end_user_id, x.request_type, x.provider_id, x.model_id, x.model_slug,
          x.provider_model_id, x.prompt_tokens, x.completion_tokens, x.total_tokens, x.latency_ms, x.cost, x.status,
          x.error_message, x.token_count_method, CASE WHEN x.cost > 0 THEN 'billed' ELSE 'not_billed' END, x.metadata, x.at
        FROM x WHERE (SELECT ok FROM ok) ORDER BY x.i
        ON CONFLICT (id) DO NOTHING`

export class InferenceLogs extends Effect.Service<InferenceLogs>()("gateway/InferenceLogs", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    /** Newest first; filters by model slug, end user and billing status; every platform's without `platformId` (operator). */
    const list = (
      platformId: string | null,
      params: {
        readonly model?: string | undefined
        readonly end_user_id?: string | undefined
        readonly billing_status?: string | undefined
        readonly request_type?: string | undefined
        readonly status?: string | undefined
        readonly from?: Date | undefined
        readonly to?: Date | undefined
        readonly page: number
        readonly limit: number
      }
    ) => {
      const where = sql.and([
        ...(platformId === null ? [] : [sql`platform_id = ${platformId}`]),
        ...(params.billing_status === undefined ? [] : [sql`billing_status = ${params.billing_status}`]),
        ...(params.model === undefined ? [] : [sql`model_slug = ${params.model}`]),
        ...(params.request_type === undefined ? [] : [sql`request_type = ${params.request_type}`]),
        ...(params.status === undefined ? [] : [sql`status = ${params.status}`]),
        ...(params.from === undefined ? [] : [sql`created_at >= ${params.from}`]),
        ...(params.to === undefined ? [] : [sql`created_at < ${params.to}`]),
        ...(params.end_user_id === undefined
          ? []
          : [isUuid(params.end_user_id) ? sql`end_user_id = ${params.end_user_id}` : sql`false`])
      ])
      return paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM inference_logs WHERE ${where}`,
        sql<InferenceLogEntry>`SELECT id, platform_id, end_user_id, request_type, provider_id, model_id, model_slug AS model,
            (SELECT slug FROM providers WHERE providers.id = inference_logs.provider_id) AS provider, provider_model_id,
            prompt_tokens, completion_tokens, total_tokens, latency_ms, estimated_cost_usd::text, status, error_message,
            token_count_method, billing_status, metadata, created_at
          FROM inference_logs WHERE ${where} ORDER BY created_at DESC, id
          LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`
      ).pipe(Effect.orDie)
    }

    return { list } as const
  })
}) {}

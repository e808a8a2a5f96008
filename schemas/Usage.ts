// Usage reports (GET /v1/platforms/{pid}/usage, GET /v1/admin/usage): calls, errors, tokens and
// exact cost over a time range, by time bucket or by model, end user, provider or platform.
import { Schema } from "effect"
import { DateInput, Timestamp } from "./Common.js"

export const UsageGroupBy = Schema.Literal("day", "hour", "model", "end_user", "provider")
export const AdminUsageGroupBy = Schema.Literal("day", "hour", "model", "end_user", "provider", "platform")
export type AdminUsageGroupBy = typeof AdminUsageGroupBy.Type

/** The most buckets a grouping by model, end user, provider or platform answers (the costliest first). */
export const USAGE_MAX_LIMIT = 1000

const rangeFields = {
  from: Schema.optional(DateInput.annotations({ description: "Start of the range, inclusive (ISO 8601; default: `to` minus 30 days)" })),
  to: Schema.optional(DateInput.annotations({ description: "End of the range, exclusive (ISO 8601; default: now)" })),
  end_user_id: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  limit: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, USAGE_MAX_LIMIT)), {
    default: () => USAGE_MAX_LIMIT
  }).annotations({ description: "Most buckets when grouping by model, end user, provider or platform (the costliest first)" })
}

export const UsageParams = Schema.Struct({
  ...rangeFields,
  group_by: Schema.optionalWith(UsageGroupBy, { default: () => "day" as const })
})

export const AdminUsageParams = Schema.Struct({
  ...rangeFields,
  group_by: Schema.optionalWith(AdminUsageGroupBy, { default: () => "day" as const }),
  platform_id: Schema.optional(Schema.String)
})

const counts = {
  calls: Schema.Int,
  /** Calls that did not succeed (upstream error, interrupted) or whose settlement failed. */
  errors: Schema.Int,
  input_tokens: Schema.Int,
  output_tokens: Schema.Int,
  /** What was charged (billed or estimated calls): exact decimal text. */
  cost_usd: Schema.String
}

export const UsageBucket = Schema.Struct({
  /**
   * The bucket start (ISO 8601, UTC) for day and hour; the model slug, end user id, provider slug
   * or platform id otherwise (null: calls without one, e.g. tool calls have no model).
   */
  key: Schema.NullOr(Schema.String),
  /** The end user's external_id (group_by end_user only). */
  external_id: Schema.optional(Schema.NullOr(Schema.String)),
  ...counts
})
export type UsageBucket = typeof UsageBucket.Type

export const UsageTotals = Schema.Struct(counts)
export type UsageTotals = typeof UsageTotals.Type

export const UsageReport = Schema.Struct({
  object: Schema.Literal("usage"),
  from: Timestamp,
  to: Timestamp,
  group_by: AdminUsageGroupBy,
  data: Schema.Array(UsageBucket),
  totals: UsageTotals,
  /** Buckets were left out past `limit` (the totals still count them). */
  has_more: Schema.Boolean
})
export type UsageReport = typeof UsageReport.Type

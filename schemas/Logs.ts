// Inference log entries as GET /v1/platforms/{pid}/logs shows them.
import { Schema } from "effect"
import { DateInput, JsonObject, LimitParam, PageParam, Timestamp } from "./Common.js"

/** `failed`: the call's settlement could not be written after its retries; nothing was debited. */
export const BillingStatus = Schema.Literal("billed", "not_billed", "estimated", "failed")

export const InferenceLogEntry = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  end_user_id: Schema.NullOr(Schema.String),
  request_type: Schema.String,
  provider_id: Schema.NullOr(Schema.String),
  model_id: Schema.NullOr(Schema.String),
  model: Schema.NullOr(Schema.String).annotations({ description: "The model slug the call asked for" }),
  provider: Schema.NullOr(Schema.String).annotations({ description: "The provider slug that served the call" }),
  provider_model_id: Schema.NullOr(Schema.String),
  prompt_tokens: Schema.Int,
  completion_tokens: Schema.Int,
  total_tokens: Schema.Int,
  latency_ms: Schema.Int,
  estimated_cost_usd: Schema.String,
  status: Schema.String,
  error_message: Schema.NullOr(Schema.String),
  token_count_method: Schema.String,
  billing_status: BillingStatus,
  metadata: JsonObject,
  created_at: Timestamp
})
export type InferenceLogEntry = typeof InferenceLogEntry.Type

export const ListLogsParams = Schema.Struct({
  model: Schema.optional(Schema.String),
  end_user_id: Schema.optional(Schema.String),
  billing_status: Schema.optional(BillingStatus),
  request_type: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  from: Schema.optional(DateInput.annotations({ description: "Rows created at or after this time (ISO 8601)" })),
  to: Schema.optional(DateInput.annotations({ description: "Rows created before this time (ISO 8601)" })),
  page: PageParam,
  limit: LimitParam
})

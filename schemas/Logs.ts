// Inference log entries as GET /v1/platforms/{pid}/logs shows them.
import { Schema } from "effect"
import { JsonObject, LimitParam, PageParam, Timestamp } from "./Common.js"

export const InferenceLogEntry = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  end_user_id: Schema.NullOr(Schema.String),
  request_type: Schema.String,
  provider_id: Schema.NullOr(Schema.String),
  model_id: Schema.NullOr(Schema.String),
  provider_model_id: Schema.NullOr(Schema.String),
  prompt_tokens: Schema.Int,
  completion_tokens: Schema.Int,
  total_tokens: Schema.Int,
  latency_ms: Schema.Int,
  estimated_cost_usd: Schema.String,
  status: Schema.String,
  error_message: Schema.NullOr(Schema.String),
  token_count_method: Schema.String,
  billing_status: Schema.String,
  metadata: JsonObject,
  created_at: Timestamp
})
export type InferenceLogEntry = typeof InferenceLogEntry.Type

export const ListLogsParams = Schema.Struct({
  model: Schema.optional(Schema.String),
  end_user_id: Schema.optional(Schema.String),
  page: PageParam,
  limit: LimitParam
})

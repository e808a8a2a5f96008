// Webhook wire shapes: endpoint registration and records, delivery records, and the v1 event
// envelope sent to receivers (spec "Webhooks (budget events)").
import { Schema } from "effect"
import { JsonObject, LimitParam, NullableTimestamp, PageParam, strict, Timestamp } from "./Common.js"

export const WEBHOOK_EVENT_TYPES = [
  "budget.topped_up",
  "budget.low_balance",
  "budget.suspended",
  "budget.unsuspended",
  "budget.debited"
] as const
export const WebhookEventType = Schema.Literal(...WEBHOOK_EVENT_TYPES)
export type WebhookEventType = typeof WebhookEventType.Type

/** What an endpoint registered without `event_types` receives: everything but the opt-in debits. */
export const DEFAULT_EVENT_TYPES: ReadonlyArray<WebhookEventType> = WEBHOOK_EVENT_TYPES.filter((t) => t !== "budget.debited")

export const API_VERSION = "2026-04-11"

const isHttpUrl = (s: string): boolean => {
  try {
    const url = new URL(s)
    return url.protocol === "http:" || url.protocol === "https:"
  } catch {
    return false
  }
}

export const WebhookUrl = Schema.String.pipe(
  Schema.maxLength(2048),
  Schema.filter(isHttpUrl, { message: () => "must be an absolute http or https URL" })
)

export const WebhookEventTypes = Schema.Array(WebhookEventType).pipe(
  Schema.minItems(1),
  Schema.filter((types) => new Set(types).size === types.length, { message: () => "must not repeat an event type" })
)

export const CreateWebhookEndpoint = Schema.Struct({
  url: WebhookUrl,
  event_types: Schema.optional(WebhookEventTypes)
}).annotations(strict)

export const WebhookEndpoint = Schema.Struct({
  id: Schema.String,
  platform_id: Schema.String,
  url: Schema.String,
  event_types: Schema.Array(WebhookEventType).annotations({
    description: "The types this endpoint receives (the default set when none were listed at registration)"
  }),
  is_active: Schema.Boolean,
  created_at: Timestamp
})
export type WebhookEndpoint = typeof WebhookEndpoint.Type

/** The registration response: the record plus the signing secret, shown this once. */
export const WebhookEndpointCreated = Schema.Struct({
  ...WebhookEndpoint.fields,
  secret: Schema.String.annotations({ description: "Signing secret `whsec_<base64>`, returned only here" })
})
export type WebhookEndpointCreated = typeof WebhookEndpointCreated.Type

export const DeliveryStatus = Schema.Literal("pending", "delivered", "failed")

export const WebhookDelivery = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  event_type: Schema.String,
  status: DeliveryStatus,
  http_status: Schema.NullOr(Schema.Int).annotations({ description: "HTTP status of the last attempt" }),
  attempt: Schema.Int.annotations({ description: "Attempts made so far" }),
  next_attempt_at: NullableTimestamp,
  last_error: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  updated_at: Timestamp
})
export type WebhookDelivery = typeof WebhookDelivery.Type

/** One attempt to deliver an event to an endpoint, as it happened. */
export const WebhookDeliveryAttempt = Schema.Struct({
  id: Schema.String,
  delivery_id: Schema.String,
  event_id: Schema.String.annotations({ description: "The envelope's event_id (`<transaction_id>:<event_type>`)" }),
  event_type: Schema.String,
  attempt: Schema.Int.annotations({ description: "1 for the first attempt" }),
  status: Schema.Literal("delivered", "retry", "failed").annotations({
    description: "delivered: the receiver answered 2xx; retry: it failed and another attempt was scheduled; failed: it failed and the delivery gave up"
  }),
  http_status: Schema.NullOr(Schema.Int).annotations({ description: "The receiver's status; null when no answer came" }),
  error: Schema.NullOr(Schema.String),
  next_attempt_at: NullableTimestamp.annotations({ description: "When the retry this attempt scheduled is due" }),
  created_at: Timestamp
})
export type WebhookDeliveryAttempt = typeof WebhookDeliveryAttempt.Type

export const ListWebhooksParams = Schema.Struct({ page: PageParam, limit: LimitParam })

/** The body POSTed to receivers; field order here is the order on the wire. */
export const WebhookEventData = Schema.Struct({
  platform_id: Schema.String,
  end_user_id: Schema.String,
  budget_id: Schema.String,
  transaction_id: Schema.String,
  type: Schema.String,
  amount_usd: Schema.Number,
  max_usd_after: Schema.Number,
  used_usd_after: Schema.Number,
  remaining_usd_after: Schema.Number,
  reason: Schema.NullOr(Schema.String),
  metadata: JsonObject
})

export const WebhookEnvelope = Schema.Struct({
  event_type: WebhookEventType,
  event_id: Schema.String,
  api_version: Schema.Literal(API_VERSION),
  created_at: Schema.String,
  data: WebhookEventData
})
export type WebhookEnvelope = typeof WebhookEnvelope.Type

// Every error the gateway answers with: one tagged class per HTTP status, each
// encoded on the wire as the OpenAI error body {"error":{message,type,code,param}}.
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

export const ErrorBody = Schema.Struct({
  error: Schema.Struct({
    message: Schema.String,
    type: Schema.String,
    code: Schema.NullOr(Schema.String),
    param: Schema.NullOr(Schema.String)
  })
})

/** What every error class carries: what its wire form is made of. */
export interface WireError {
  readonly _tag: string
  readonly message: string
  readonly code: string
  readonly param?: string | undefined
}

/** Status and OpenAI `type` of each error class, by tag (what `openAiError` declares). */
const wireForms = new Map<string, { readonly status: number; readonly type: string }>()

/** The wire form of an error class: OpenAI body, fixed status, listed in the OpenAPI document. */
const openAiError = <A, I extends WireError, R>(
  self: Schema.Schema<A, I, R>,
  o: { readonly tag: I["_tag"]; readonly status: number; readonly type: string; readonly description: string }
) => {
  wireForms.set(o.tag, { status: o.status, type: o.type })
  return Schema.transform(ErrorBody, self, {
    strict: false,
    decode: ({ error }) => ({
      _tag: o.tag,
      message: error.message,
      code: error.code ?? "",
      param: error.param ?? undefined
    }),
    encode: (e) => ({ error: { message: e.message, type: o.type, code: e.code, param: e.param ?? null } })
  }).annotations(HttpApiSchema.annotations({ status: o.status, description: o.description }))
}

/**
 * An error as HttpApi answers it (status and OpenAI body, as its `Http` schema encodes it), for
 * routes served outside HttpApi (src/inference/ChatRoute.ts).
 */
export const wireError = (e: WireError): { readonly status: number; readonly body: typeof ErrorBody.Encoded } => {
  const form = wireForms.get(e._tag)
  if (form === undefined) throw new Error(`no wire form for error ${e._tag}`)
  return { status: form.status, body: { error: { message: e.message, type: form.type, code: e.code, param: e.param ?? null } } }
}

const param = Schema.optional(Schema.String)

export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  message: Schema.String,
  param,
  code: Schema.Literal("invalid_json", "bad_request")
}) {
  static readonly Http = openAiError(this, {
    tag: "BadRequest",
    status: 400,
    type: "invalid_request_error",
    description: "The body is not valid JSON or the request is malformed"
  })
}

export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  message: Schema.String,
  param,
  code: Schema.Literal("missing_api_key", "invalid_api_key", "api_key_expired")
}) {
  static readonly Http = openAiError(this, {
    tag: "Unauthorized",
    status: 401,
    type: "authentication_error",
    description: "Missing, unknown, revoked or expired API key"
  })
}

export class PaymentRequired extends Schema.TaggedError<PaymentRequired>()("PaymentRequired", {
  message: Schema.String,
  param,
  code: Schema.Literal(
    "budget_suspended",
    "budget_exhausted",
    "wallet_insufficient",
    "capability_denylisted",
    "capability_not_allowlisted",
    "capability_above_ceiling",
    "no_budget"
  )
}) {
  static readonly Http = openAiError(this, {
    tag: "PaymentRequired",
    status: 402,
    type: "insufficient_quota",
    description: "A budget, wallet or policy check refused the call"
  })
}

export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", {
  message: Schema.String,
  param,
  code: Schema.Literal("insufficient_scope", "forbidden", "capabilities_disabled")
}) {
  static readonly Http = openAiError(this, {
    tag: "Forbidden",
    status: 403,
    type: "permission_error",
    description: "The key may not call this endpoint"
  })
}

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  message: Schema.String,
  param,
  code: Schema.Literal("not_found", "model_not_found")
}) {
  static readonly Http = openAiError(this, {
    tag: "NotFound",
    status: 404,
    type: "invalid_request_error",
    description: "No such resource (or it belongs to another tenant)"
  })
}

export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", {
  message: Schema.String,
  param,
  code: Schema.Literal("idempotency_conflict", "display_ledger_not_initialized", "conflict")
}) {
  static readonly Http = openAiError(this, {
    tag: "Conflict",
    status: 409,
    type: "invalid_request_error",
    description: "The request conflicts with the current state"
  })
}

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  message: Schema.String,
  param,
  code: Schema.Literal("payload_too_large")
}) {
  static readonly Http = openAiError(this, {
    tag: "PayloadTooLarge",
    status: 413,
    type: "invalid_request_error",
    description: "The request body exceeds the size limit"
  })
}

export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", {
  message: Schema.String,
  param,
  code: Schema.Literal("unsupported_media_type")
}) {
  static readonly Http = openAiError(this, {
    tag: "UnsupportedMediaType",
    status: 415,
    type: "invalid_request_error",
    description: "The body is not application/json"
  })
}

export class ValidationError extends Schema.TaggedError<ValidationError>()("ValidationError", {
  message: Schema.String,
  param,
  code: Schema.Literal(
    "validation_error",
    "max_tokens_too_small",
    "unsupported_tool_type",
    "context_length_exceeded",
    "model_not_supported",
    "unsupported_content"
  )
}) {
  static readonly Http = openAiError(this, {
    tag: "ValidationError",
    status: 422,
    type: "invalid_request_error",
    description: "A field is missing, ill-typed or out of range; param names it"
  })
}

export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  message: Schema.String,
  param,
  code: Schema.Literal("rate_limit_exceeded")
}) {
  static readonly Http = openAiError(this, {
    tag: "RateLimited",
    status: 429,
    type: "rate_limit_error",
    description: "A per-user rate limit is exhausted; see retry-after"
  })
}

export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", {
  message: Schema.String,
  param,
  code: Schema.Literal("internal_error")
}) {
  static readonly Http = openAiError(this, {
    tag: "InternalError",
    status: 500,
    type: "api_error",
    description: "An unexpected error; nothing was applied"
  })
}

export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()("ServiceUnavailable", {
  message: Schema.String,
  param,
  code: Schema.Literal("service_unavailable")
}) {
  static readonly Http = openAiError(this, {
    tag: "ServiceUnavailable",
    status: 503,
    type: "api_error",
    description: "A backing service (database) is unreachable; retry later"
  })
}

export class BadGateway extends Schema.TaggedError<BadGateway>()("BadGateway", {
  message: Schema.String,
  param,
  code: Schema.Literal("upstream_error")
}) {
  static readonly Http = openAiError(this, {
    tag: "BadGateway",
    status: 502,
    type: "api_error",
    description: "Every upstream candidate failed (after failover)"
  })
}

export class GatewayTimeout extends Schema.TaggedError<GatewayTimeout>()("GatewayTimeout", {
  message: Schema.String,
  param,
  code: Schema.Literal("upstream_timeout")
}) {
  static readonly Http = openAiError(this, {
    tag: "GatewayTimeout",
    status: 504,
    type: "api_error",
    description: "The upstream did not answer in time (after failover)"
  })
}

/** Errors any route may answer; declared once on the API. */
export type ApiError =
  | BadRequest
  | Unauthorized
  | Forbidden
  | NotFound
  | PayloadTooLarge
  | UnsupportedMediaType
  | ValidationError
  | InternalError
  | ServiceUnavailable

// One place where framework failures become OpenAI-shaped errors: body checks before routing
// (content type, size, JSON depth), decode errors, unknown routes, malformed JSON, and defects (no stack
// traces leave the process; database outages answer 503).
import { HttpApiBuilder, HttpApiError, HttpServerError, HttpServerRequest } from "@effect/platform"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Option } from "effect"
import {
  type ApiError,
  BadRequest,
  InternalError,
  NotFound,
  PayloadTooLarge,
  ServiceUnavailable,
  UnsupportedMediaType,
  ValidationError
} from "../../schemas/Errors.js"
import { RateLimiterUnavailable } from "../../layers/RateLimiter.js"
import { isDatabaseOutage } from "../lib/SqlErrors.js"
import { GatewayApi } from "./Api.js"
import { readBodyText, withBodyText } from "./RequestBody.js"

export const MAX_BODY_BYTES = 10 * 1024 * 1024
/** Deepest nesting of arrays/objects a JSON body may have (DESIGN.md section 7). */
export const MAX_JSON_DEPTH = 64

/**
 * True when the JSON text nests arrays/objects deeper than `limit`. One pass, no parsing:
 * brackets inside strings do not count (a backslash skips the next character, so `"\""` and
 * `"\\"` end where they should). Malformed text is left for the parser to reject.
 */
export const exceedsJsonDepth = (text: string, limit: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) inString = false
    } else if (c === 0x22) inString = true
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > limit) return true
    } else if (c === 0x7d || c === 0x5d) depth--
  }
  return false
}

const decodeToValidation = (e: HttpApiError.HttpApiDecodeError): ValidationError => {
  const issue = e.issues[0]
  const param = issue !== undefined && issue.path.length > 0 ? issue.path.map(String).join(".") : undefined
  const message = issue === undefined
    ? e.message
    : `${param === undefined ? "body" : param}: ${issue.message}`
  return new ValidationError({ code: "validation_error", message, param })
}

/** 22021 / 22P05: text Postgres cannot store (NUL bytes, bad encodings). */
const isUnstorableText = (e: SqlError): boolean => {
  const code = (e.cause as { readonly code?: unknown } | undefined)?.code
  return code === "22021" || code === "22P05"
}

const fromFailure = (error: unknown): Option.Option<ApiError> => {
  if (error instanceof HttpApiError.HttpApiDecodeError) return Option.some(decodeToValidation(error))
  if (error instanceof HttpServerError.RouteNotFound) {
    return Option.some(new NotFound({ code: "not_found", message: `Unknown route ${error.request.method} ${error.request.url}` }))
  }
  return Option.none()
}

const fromDefect = (defect: unknown): Option.Option<ApiError> => {
  if (defect instanceof HttpServerError.RequestError && defect.reason === "Decode") {
    const cause = defect.cause
    return Option.some(new BadRequest({
      code: "invalid_json",
      message: `The request body is not valid JSON${cause instanceof Error ? `: ${cause.message}` : ""}`
    }))
  }
  if (defect instanceof SqlError && isUnstorableText(defect)) {
    return Option.some(new ValidationError({ code: "validation_error", message: "A text value contains characters that cannot be stored (e.g. NUL)" }))
  }
  if (defect instanceof RateLimiterUnavailable) {
    return Option.some(new ServiceUnavailable({ code: "service_unavailable", message: "The rate limiter is unavailable; retry shortly" }))
  }
  if (defect instanceof SqlError && isDatabaseOutage(defect)) {
    return Option.some(new ServiceUnavailable({ code: "service_unavailable", message: "The database is unavailable; retry shortly" }))
  }
  return Option.none()
}

const tooLarge = () => new PayloadTooLarge({ code: "payload_too_large", message: `Request body exceeds ${MAX_BODY_BYTES} bytes` })

/**
 * Checks before routing: the declared type and length of the body, its size and JSON depth.
 * Returns the request with its body read (the handler's decode parses that text), or the
 * request as it came when it has no body.
 */
const checkBody = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  if (request.method !== "POST" && request.method !== "PUT" && request.method !== "PATCH") return request
  const length = Number(request.headers["content-length"] ?? "0")
  if (length > MAX_BODY_BYTES) return yield* tooLarge()
  const contentType = request.headers["content-type"]
  const hasBody = length > 0 || request.headers["transfer-encoding"] !== undefined
  if (hasBody && contentType !== undefined && !contentType.toLowerCase().includes("application/json")) {
    return yield* new UnsupportedMediaType({
      code: "unsupported_media_type",
      message: `Content-Type must be application/json, got ${contentType}`
    })
  }
  if (!hasBody) return request
  // A JSON body (declared or untyped): scan its nesting before anything parses it.
  const text = yield* readBodyText(request, MAX_BODY_BYTES, tooLarge)
  if (exceedsJsonDepth(text, MAX_JSON_DEPTH)) {
    return yield* new BadRequest({
      code: "invalid_json",
      message: `The request body nests arrays/objects deeper than ${MAX_JSON_DEPTH} levels`
    })
  }
  return yield* withBodyText(request, text)
})

export const ErrorMappingLive = HttpApiBuilder.middleware(GatewayApi, (app) =>
  Effect.flatMap(checkBody, (request) => Effect.provideService(app, HttpServerRequest.HttpServerRequest, request)).pipe(
    Effect.catchAllCause((cause): Effect.Effect<never, ApiError> => {
      const failure = Cause.failureOption<unknown>(cause)
      if (Option.isSome(failure)) {
        return Option.match(fromFailure(failure.value), { onNone: () => Effect.failCause(cause) as never, onSome: Effect.fail })
      }
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause) as never
      const mapped = Option.flatMap(Cause.dieOption(cause), fromDefect)
      if (Option.isSome(mapped)) return Effect.fail(mapped.value)
      return Effect.logError("unhandled defect", cause).pipe(
        Effect.zipRight(Effect.fail(new InternalError({ code: "internal_error", message: "Internal error; nothing was applied" })))
      )
    })
  ))

// One place where framework failures become OpenAI-shaped errors: body checks before routing
// (content type, size, JSON depth, inexact numbers, unstorable text), decode errors, unknown
// routes, malformed JSON, and defects (no stack traces leave the process; outages answer 503).
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
  ValidationError,
  type WireError
} from "../../schemas/Errors.js"
import { RateLimiterUnavailable } from "../../layers/pipeline/RateLimiter.js"
import { MAX_CHECKED_NUMBERS, scanJsonText } from "../../layers/lib/JsonText.js"
import { isDatabaseOutage } from "../../layers/lib/SqlErrors.js"
import { findUnstorable, toStorableText } from "../../layers/lib/StorableText.js"
import { GatewayApi } from "./Api.js"
import { clientValidation } from "./DecodeIssues.js"
import { readBodyText, withBodyText } from "./RequestBody.js"

export const MAX_BODY_BYTES = 10 * 1024 * 1024
/** Deepest nesting of arrays/objects a JSON body may have (docs/operations.md, "Limits"). */
export const MAX_JSON_DEPTH = 64

/**
 * The client's 422: the field and a short reason (DecodeIssues.ts), no schema text; the full
 * formatted issue goes to the log, at debug level (a client's mistake is no server event).
 */
const decodeToValidation = (e: HttpApiError.HttpApiDecodeError): Effect.Effect<ValidationError> => {
  const { message, param } = clientValidation(e.issues)
  return Effect.logDebug("request did not match its schema").pipe(
    Effect.annotateLogs({ "validation.param": param ?? "", "validation.issue": e.message }),
    Effect.as(new ValidationError({ code: "validation_error", message, param }))
  )
}

/** 22021 / 22P05: text Postgres cannot store (NUL bytes, bad encodings). */
const isUnstorableText = (e: SqlError): boolean => {
  const code = (e.cause as { readonly code?: unknown } | undefined)?.code
  return code === "22021" || code === "22P05"
}

const fromFailure = (error: unknown): Option.Option<Effect.Effect<ApiError>> => {
  if (error instanceof HttpApiError.HttpApiDecodeError) return Option.some(decodeToValidation(error))
  if (error instanceof HttpServerError.RouteNotFound) {
    return Option.some(Effect.succeed(new NotFound({ code: "not_found", message: `Unknown route ${error.request.method} ${error.request.url}` })))
  }
  return Option.none()
}

const fromDefect = (defect: unknown): Option.Option<ApiError> => {
  if (defect instanceof HttpServerError.RequestError && defect.reason === "Decode") {
    // The parser's own words (where in the client's text it failed) help; any other cause is ours.
    const cause = defect.cause
    return Option.some(new BadRequest({
      code: "invalid_json",
      message: `The request body is not valid JSON${cause instanceof SyntaxError ? `: ${cause.message}` : ""}`
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
 * The checks every body gets before routing: its declared type and length, its size, and one
 * scan of its JSON text (layers/lib/JsonText.ts) for nesting depth, number literals a float64
 * cannot hold (handed on as strings: money decodes them exactly, other numbers refuse them) and
 * text Postgres cannot store (refused here, naming the field, before anything is billed). `read`
 * reads the body (at most `MAX_BODY_BYTES`); the result is the text to parse, or null when the
 * request carries no body.
 */
export const checkedBody = <E>(
  method: string,
  headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>,
  read: (maxBytes: number, tooLarge: () => PayloadTooLarge) => Effect.Effect<string, PayloadTooLarge | E>
): Effect.Effect<string | null, PayloadTooLarge | UnsupportedMediaType | BadRequest | ValidationError | E> =>
  Effect.suspend((): Effect.Effect<string | null, PayloadTooLarge | UnsupportedMediaType | BadRequest | ValidationError | E> => {
    if (method !== "POST" && method !== "PUT" && method !== "PATCH") return Effect.succeed(null)
    const length = Number(headers["content-length"] ?? "0")
    if (length > MAX_BODY_BYTES) return Effect.fail(tooLarge())
    const contentType = headers["content-type"]
    const hasBody = length > 0 || headers["transfer-encoding"] !== undefined
    if (hasBody && typeof contentType === "string" && !contentType.toLowerCase().includes("application/json")) {
      return Effect.fail(new UnsupportedMediaType({
        code: "unsupported_media_type",
        message: `Content-Type must be application/json, got ${contentType}`
      }))
    }
    if (!hasBody) return Effect.succeed(null)
    // A JSON body (declared or untyped): scan it before anything parses it.
    return Effect.flatMap(read(MAX_BODY_BYTES, tooLarge), scannedBody)
  })

const scannedBody = (text: string): Effect.Effect<string, BadRequest | ValidationError> => {
  const scan = scanJsonText(text, MAX_JSON_DEPTH)
  if (scan === "too_deep") {
    return Effect.fail(new BadRequest({
      code: "invalid_json",
      message: `The request body nests arrays/objects deeper than ${MAX_JSON_DEPTH} levels`
    }))
  }
  if (scan === "too_many_long_numbers") {
    return Effect.fail(new ValidationError({
      code: "validation_error",
      message: `The request body has more than ${MAX_CHECKED_NUMBERS} numbers with over 15 significant digits or a large exponent`
    }))
  }
  if (scan.unstorableEscape) {
    const refusal = unstorableTextRefusal(scan.text)
    if (refusal !== undefined) return Effect.fail(refusal)
  }
  return Effect.succeed(scan.text)
}

/**
 * The 422 for a body whose strings escape NUL or an unpaired surrogate, naming the first one as
 * a decode error would (`input.0.content`); none when the text does not parse (the parser's 400
 * answers it).
 */
const unstorableTextRefusal = (text: string): ValidationError | undefined => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  const found = findUnstorable(value)
  if (found === undefined) return undefined
  // A key that holds the bad character is named with U+FFFD in its place.
  const param = found.path.length > 0 ? found.path.map((p) => toStorableText(String(p))).join(".") : undefined
  return new ValidationError({
    code: "validation_error",
    param,
    message: `${param ?? "body"}: ${found.inKey ? "an object key" : "text"} must not contain NUL characters or unpaired UTF-16 surrogates`
  })
}

/**
 * The checks before routing, on the platform's request; a body read here is handed on in the
 * request itself (withBodyText), where the handler's decode parses it.
 */
const checkBody = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const text = yield* checkedBody(request.method, request.headers, (max, tooLarge) => readBodyText(request, max, tooLarge))
  if (text !== null) yield* withBodyText(request, text)
})

/**
 * What a failed request answers, for routes served outside HttpApi: its ApiError, a decode
 * error or defect mapped as below, or an InternalError (the defect is logged); none when the
 * request was interrupted (the client left).
 */
export const apiErrorOf = <E extends WireError>(
  cause: Cause.Cause<E | HttpApiError.HttpApiDecodeError>
): Effect.Effect<Option.Option<E | ApiError>> => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    return error instanceof HttpApiError.HttpApiDecodeError
      ? Effect.map(decodeToValidation(error), (validation) => Option.some<E | ApiError>(validation))
      : Effect.succeed(Option.some<E | ApiError>(error))
  }
  if (Cause.isInterruptedOnly(cause)) return Effect.succeedNone
  const mapped = Option.flatMap(Cause.dieOption(cause), fromDefect)
  if (Option.isSome(mapped)) return Effect.succeed(mapped)
  return Effect.logError("unhandled defect", cause).pipe(Effect.as(Option.some(internalError)))
}

const internalError = new InternalError({ code: "internal_error", message: "Internal error; nothing was applied" })

export const ErrorMappingLive = HttpApiBuilder.middleware(GatewayApi, (app) =>
  Effect.zipRight(checkBody, app).pipe(
    Effect.catchAllCause((cause): Effect.Effect<never, ApiError> => {
      const failure = Cause.failureOption<unknown>(cause)
      if (Option.isSome(failure)) {
        return Option.match(fromFailure(failure.value), {
          onNone: () => Effect.failCause(cause) as never,
          onSome: (mapped) => Effect.flatMap(mapped, Effect.fail)
        })
      }
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause) as never
      const mapped = Option.flatMap(Cause.dieOption(cause), fromDefect)
      if (Option.isSome(mapped)) return Effect.fail(mapped.value)
      return Effect.logError("unhandled defect", cause).pipe(Effect.zipRight(Effect.fail(internalError)))
    })
  ))

// One place where framework failures become OpenAI-shaped errors: body checks before routing
// (content type, size), decode errors, unknown routes, malformed JSON, and defects (no stack
// traces leave the process; database outages answer 503).
import {
  FileSystem,
  HttpApiBuilder,
  HttpApiError,
  HttpIncomingMessage,
  HttpServerError,
  HttpServerRequest
} from "@effect/platform"
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
import { GatewayApi } from "./Api.js"

export const MAX_BODY_BYTES = 10 * 1024 * 1024

const decodeToValidation = (e: HttpApiError.HttpApiDecodeError): ValidationError => {
  const issue = e.issues[0]
  const param = issue !== undefined && issue.path.length > 0 ? issue.path.map(String).join(".") : undefined
  const message = issue === undefined
    ? e.message
    : `${param === undefined ? "body" : param}: ${issue.message}`
  return new ValidationError({ code: "validation_error", message, param })
}

/** Postgres unreachable or restarting: connection errors and admin shutdown SQLSTATEs. */
const isDatabaseOutage = (e: SqlError): boolean => {
  const cause = e.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  const code = typeof cause?.code === "string" ? cause.code : ""
  const message = typeof cause?.message === "string" ? cause.message : ""
  return code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03" ||
    code === "ECONNREFUSED" || code === "ECONNRESET" || code === "ETIMEDOUT" ||
    /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect/i.test(message)
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
    if (cause instanceof Error && cause.message === "maxBytes exceeded") {
      return Option.some(new PayloadTooLarge({ code: "payload_too_large", message: `Request body exceeds ${MAX_BODY_BYTES} bytes` }))
    }
    return Option.some(new BadRequest({
      code: "invalid_json",
      message: `The request body is not valid JSON${cause instanceof Error ? `: ${cause.message}` : ""}`
    }))
  }
  if (defect instanceof SqlError && isUnstorableText(defect)) {
    return Option.some(new ValidationError({ code: "validation_error", message: "A text value contains characters that cannot be stored (e.g. NUL)" }))
  }
  if (defect instanceof SqlError && isDatabaseOutage(defect)) {
    return Option.some(new ServiceUnavailable({ code: "service_unavailable", message: "The database is unavailable; retry shortly" }))
  }
  return Option.none()
}

/** Checks that need no body parsing: the declared type and length of the body. */
const checkBody = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  if (request.method !== "POST" && request.method !== "PUT" && request.method !== "PATCH") return
  const length = Number(request.headers["content-length"] ?? "0")
  if (length > MAX_BODY_BYTES) {
    return yield* new PayloadTooLarge({ code: "payload_too_large", message: `Request body exceeds ${MAX_BODY_BYTES} bytes` })
  }
  const contentType = request.headers["content-type"]
  const hasBody = length > 0 || request.headers["transfer-encoding"] !== undefined
  if (hasBody && contentType !== undefined && !contentType.toLowerCase().includes("application/json")) {
    return yield* new UnsupportedMediaType({
      code: "unsupported_media_type",
      message: `Content-Type must be application/json, got ${contentType}`
    })
  }
})

export const ErrorMappingLive = HttpApiBuilder.middleware(GatewayApi, (app) =>
  checkBody.pipe(
    // The server's default limit does not reach handler fibers: set it where the body is read.
    Effect.zipRight(HttpIncomingMessage.withMaxBodySize(app, Option.some(FileSystem.Size(MAX_BODY_BYTES)))),
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

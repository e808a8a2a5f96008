// CORS for browser clients on the routes an end-user key calls (GATEWAY_CORS_ORIGINS; unset:
// no CORS at all). A preflight on those routes from an allowed origin is answered here, 204 with
// what may be sent; one from another origin 403. Answers to an allowed origin carry
// Access-Control-Allow-Origin and expose the headers SDKs read (request id, rate limits, timing).
// Operator and platform routes (/v1/admin/*, /v1/platforms/*) get no CORS: their keys belong on
// a server, never in a browser, so their preflights stay unknown routes (404).
import { Config, ConfigError, Either } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Forbidden, wireError } from "../../schemas/Errors.js"

/** The origins allowed: any (`*`), or these, each as a browser serializes it (`https://app.example.com`). */
export type CorsOrigins = "*" | ReadonlySet<string>

const EXPECTED = "* or a comma-separated list of origins such as https://app.example.com,http://localhost:3000"

/** An origin as a browser sends it: scheme, host and port only, lower case, no path or trailing slash. */
const originOf = (text: string): string | undefined => {
  try {
    const url = new URL(text)
    if (url.protocol !== "http:" && url.protocol !== "https:") return undefined
    return url.origin === text.replace(/\/$/, "").toLowerCase() ? url.origin : undefined
  } catch {
    return undefined
  }
}

/** GATEWAY_CORS_ORIGINS: null (unset or empty) turns CORS off. */
export const corsOrigins: Config.Config<CorsOrigins | null> = Config.string("GATEWAY_CORS_ORIGINS").pipe(
  Config.withDefault(""),
  Config.mapOrFail((text): Either.Either<CorsOrigins | null, ConfigError.ConfigError> => {
    const trimmed = text.trim()
    if (trimmed === "") return Either.right(null)
    if (trimmed === "*") return Either.right("*")
    const origins = new Set<string>()
    for (const entry of trimmed.split(",")) {
      const origin = originOf(entry.trim())
      if (origin === undefined) {
        return Either.left(ConfigError.InvalidData(["GATEWAY_CORS_ORIGINS"], `expected ${EXPECTED}; '${entry.trim()}' is not an origin`))
      }
      origins.add(origin)
    }
    return Either.right(origins)
  })
)

/** What an end-user key calls: inference, models, embeddings, the caller's own data, capabilities. */
const COVERED = /^\/v1\/(?:chat\/completions|responses|models|embeddings|me|capabilities)(?:[/?;]|$)/i

/** Request headers a browser client may send: the SDKs' own (x-stainless-*, openai-*) and the gateway's. */
const ALLOWED_HEADERS = new Set([
  "accept",
  "authorization",
  "content-type",
  "idempotency-key",
  "traceparent",
  "tracestate",
  "x-request-id"
])
const ALLOWED_PREFIXES = ["x-stainless-", "openai-"]

const allowedHeader = (name: string) => ALLOWED_HEADERS.has(name) || ALLOWED_PREFIXES.some((prefix) => name.startsWith(prefix))

const EXPOSED = [
  "x-request-id",
  "server-timing",
  "retry-after",
  "x-ratelimit-limit-requests",
  "x-ratelimit-remaining-requests",
  "x-ratelimit-reset-requests",
  "x-ratelimit-limit-tokens",
  "x-ratelimit-remaining-tokens",
  "x-ratelimit-reset-tokens"
].join(", ")

/** How long a browser may keep a preflight's answer: ten minutes, so a change of origins takes effect soon. */
const MAX_AGE_SECONDS = "600"

const notAllowed = wireError(new Forbidden({ code: "forbidden", message: "This origin is not allowed to call the gateway from a browser (GATEWAY_CORS_ORIGINS)" }))
const notAllowedJson = JSON.stringify(notAllowed.body)

/**
 * The listener's CORS step, run before any route: answers a preflight (true), or puts the CORS
 * headers of an allowed origin on the answer to come (false). Requests without an Origin header
 * (servers, SDKs outside a browser) pass untouched.
 */
export const corsStep = (origins: CorsOrigins) => (req: IncomingMessage, res: ServerResponse, requestId: string): boolean => {
  const origin = req.headers.origin
  if (origin === undefined || req.url === undefined || !COVERED.test(req.url)) return false
  const allowed = origins === "*" || origins.has(origin)
  const allowOrigin = origins === "*" ? "*" : origin
  const preflight = req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined
  if (!preflight) {
    if (origins !== "*") res.setHeader("vary", "Origin")
    if (allowed) {
      res.setHeader("access-control-allow-origin", allowOrigin)
      res.setHeader("access-control-expose-headers", EXPOSED)
      res.setHeader("timing-allow-origin", allowOrigin)
    }
    return false
  }
  if (!allowed) {
    res.writeHead(notAllowed.status, {
      vary: "Origin, Access-Control-Request-Headers",
      "x-request-id": requestId,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(notAllowedJson)
    })
    res.end(notAllowedJson)
    return true
  }
  const requested = req.headers["access-control-request-headers"]
  const headers = (requested ?? "").split(",").map((name) => name.trim().toLowerCase()).filter((name) => name !== "" && allowedHeader(name))
  res.writeHead(204, {
    vary: "Origin, Access-Control-Request-Headers",
    "access-control-allow-origin": allowOrigin,
    "access-control-allow-methods": "GET, POST, DELETE",
    ...(headers.length === 0 ? {} : { "access-control-allow-headers": headers.join(", ") }),
    "access-control-max-age": MAX_AGE_SECONDS,
    "x-request-id": requestId
  })
  res.end()
  return true
}

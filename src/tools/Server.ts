// The tool service host ({mcp_url}, MCP_PORT): OAuth authorize/callback, /apps, /connections,
// MCP over streamable HTTP at /mcp/{app_slug} and its protected-resource metadata. End-user keys
// only; OpenAI-shaped errors.
import {
  FileSystem,
  HttpIncomingMessage,
  HttpRouter,
  HttpServer,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Config, Effect, Layer, Option } from "effect"
import { BadRequest, Forbidden, type NotFound, PayloadTooLarge, type Unauthorized, ValidationError } from "../../schemas/Errors.js"
import type { EndUserPrincipal } from "../../layers/access/KeyAuth.js"
import { KeyAuth } from "../../layers/access/KeyAuth.js"
import { ToolHost } from "../../layers/tools/ToolHost.js"
import { makeReadYourWrites } from "../http/Consistency.js"
import { drainingServerLayer } from "../http/DrainingServer.js"
import { host } from "../http/Server.js"
import { recordAddress } from "../../layers/platform/Listeners.js"
import { isDatabaseOutage } from "../../layers/lib/SqlErrors.js"
import { mcpPublicUrl } from "../../layers/platform/Listeners.js"
import { annotateCurrentSpan } from "../../layers/lib/CurrentSpan.js"
import { TOOLS_SCOPE } from "../../layers/tools/ToolScope.js"
import { bearerChallenge, protectedResourceMetadata, WELL_KNOWN_PATH } from "./ProtectedResource.js"

/** MCP messages are small; the SDK's own default bound. */
const MAX_MCP_BODY_BYTES = 4 * 1024 * 1024

type ListenerError = Unauthorized | Forbidden | NotFound | BadRequest | ValidationError | PayloadTooLarge

const wire: Record<ListenerError["_tag"], { readonly status: number; readonly type: string }> = {
  Unauthorized: { status: 401, type: "authentication_error" },
  Forbidden: { status: 403, type: "permission_error" },
  NotFound: { status: 404, type: "invalid_request_error" },
  BadRequest: { status: 400, type: "invalid_request_error" },
  ValidationError: { status: 422, type: "invalid_request_error" },
  PayloadTooLarge: { status: 413, type: "invalid_request_error" }
}

/**
 * The Bearer challenge an MCP client reads to find out how to authenticate: on every 401, and on
 * a key without the tool scope (RFC 6750 3.1).
 */
const challengeOf = (e: ListenerError) => {
  if (e._tag === "Unauthorized") return bearerChallenge(e.code === "missing_api_key" ? undefined : { error: "invalid_token", description: e.message })
  if (e._tag === "Forbidden" && e.code === "insufficient_scope") {
    return bearerChallenge({ error: "insufficient_scope", description: e.message, scope: TOOLS_SCOPE })
  }
  return Effect.succeed(undefined)
}

const errorResponse = (e: ListenerError) =>
  Effect.map(challengeOf(e), (challenge) =>
    HttpServerResponse.unsafeJson(
      { error: { message: e.message, type: wire[e._tag].type, code: e.code, param: e.param ?? null } },
      { status: wire[e._tag].status, headers: challenge === undefined ? {} : { "www-authenticate": challenge } }
    ))

const notFound = Effect.gen(function*() {
  return yield* HttpServerResponse.json(
    { error: { message: "Unknown route", type: "invalid_request_error", code: "not_found", param: null } },
    { status: 404 }
  )
})

/** Tool service endpoints take end-user keys only (spec: Authentication, "Tool service endpoints"). */
const endUser = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const principal = yield* (yield* KeyAuth).authenticate(request.headers.authorization)
  if (principal._tag !== "EndUserKey") {
    return yield* new Forbidden({ code: "forbidden", message: "The tool service needs an end-user (sk-eu_) key" })
  }
  yield* annotateCurrentSpan({ "platform.id": principal.platformId, "end_user.id": principal.endUserId })
  // Tool calls debit the same budget (MCP sends every message as a POST: all may write).
  yield* (yield* makeReadYourWrites)({ platformId: principal.platformId, endUserId: principal.endUserId }, true)
  return principal satisfies EndUserPrincipal
})

const queryParam = (name: string) =>
  Effect.map(HttpServerRequest.ParsedSearchParams, (params) => {
    const value = params[name]
    return typeof value === "string" ? value : undefined
  })

const redirect = (location: string) =>
  HttpServerResponse.empty({ status: 302, headers: { location, "cache-control": "no-store" } })

const authorize = Effect.gen(function*() {
  const principal = yield* endUser
  const app = yield* queryParam("app")
  if (app === undefined || app === "") {
    return yield* new ValidationError({ code: "validation_error", message: "app: the app slug is required", param: "app" })
  }
  const mcpUrl = yield* mcpPublicUrl
  return redirect(yield* (yield* ToolHost).authorize(principal, app, mcpUrl, yield* queryParam("nonce")))
})

/** No key here: the provider sends the browser back; the signed single-use state is the proof. */
const callback = Effect.gen(function*() {
  // The query carries the authorization code and state: the server span keeps the path only.
  const request = yield* HttpServerRequest.HttpServerRequest
  yield* annotateCurrentSpan({
    "url.full": `http://${request.headers.host ?? "localhost"}${request.url.split("?")[0]}`,
    "url.query": "[redacted]"
  })
  const [code, state, error, errorDescription] = yield* Effect.all([
    queryParam("code"),
    queryParam("state"),
    queryParam("error"),
    queryParam("error_description")
  ])
  return redirect(yield* (yield* ToolHost).callback({ code, state, error, error_description: errorDescription }))
})

const listApps = Effect.gen(function*() {
  const principal = yield* endUser
  return HttpServerResponse.unsafeJson(yield* (yield* ToolHost).listApps(principal))
})

const listConnections = Effect.gen(function*() {
  const principal = yield* endUser
  return HttpServerResponse.unsafeJson(yield* (yield* ToolHost).listConnections(principal))
})

const disconnect = Effect.gen(function*() {
  const principal = yield* endUser
  const app = (yield* HttpRouter.params).app ?? ""
  yield* (yield* ToolHost).disconnect(principal, app)
  return HttpServerResponse.empty({ status: 204 })
})

/**
 * POST/GET/DELETE /mcp/{app_slug}: authenticate, read the JSON-RPC body, hand a web-standard
 * Request to the session's transport and stream its Response back (SSE included).
 */
const mcp = Effect.gen(function*() {
  const principal = yield* endUser
  const request = yield* HttpServerRequest.HttpServerRequest
  const slug = (yield* HttpRouter.params).app_slug ?? ""
  let body: string | undefined
  let parsedBody: unknown
  if (request.method === "POST") {
    body = yield* request.text.pipe(
      Effect.catchAll(() => new PayloadTooLarge({ code: "payload_too_large", message: `MCP messages are limited to ${MAX_MCP_BODY_BYTES} bytes` }))
    )
    try {
      parsedBody = JSON.parse(body)
    } catch {
      parsedBody = undefined // the transport answers the JSON-RPC parse error itself
    }
  }
  const headers = new Headers()
  for (const [name, value] of Object.entries(request.headers)) headers.set(name, value)
  const webRequest = new Request(new URL(request.url, "http://tools.local"), {
    method: request.method,
    headers,
    ...(body === undefined ? {} : { body })
  })
  const response = yield* (yield* ToolHost).handleMcp(principal, slug, webRequest, parsedBody)
  return HttpServerResponse.fromWeb(response)
}).pipe((app) => HttpIncomingMessage.withMaxBodySize(app, Option.some(FileSystem.Size(MAX_MCP_BODY_BYTES))))

const handled = <R>(route: Effect.Effect<HttpServerResponse.HttpServerResponse, ListenerError, R>) =>
  route.pipe(
    Effect.catchAll(errorResponse),
    // Defects (database down, SDK failures) never leak details or stack traces.
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
      // A database outage answers 503, like the API host.
      const outage = Option.exists(Cause.dieOption(cause), (d) => d instanceof SqlError && isDatabaseOutage(d))
      return Effect.logError("tool service request failed", cause).pipe(
        Effect.as(HttpServerResponse.unsafeJson(
          outage
            ? { error: { message: "The database is unavailable; retry shortly", type: "api_error", code: "service_unavailable", param: null } }
            : { error: { message: "Internal error", type: "api_error", code: "internal_error", param: null } },
          { status: outage ? 503 : 500 }
        ))
      )
    })
  )

export const ToolRouter = HttpRouter.empty.pipe(
  HttpRouter.get("/health", HttpServerResponse.unsafeJson({ status: "ok" })),
  HttpRouter.get(WELL_KNOWN_PATH, handled(protectedResourceMetadata)),
  HttpRouter.get(`${WELL_KNOWN_PATH}/*`, handled(protectedResourceMetadata)),
  HttpRouter.get("/oauth/authorize", handled(authorize)),
  HttpRouter.get("/oauth/callback", handled(callback)),
  HttpRouter.get("/apps", handled(listApps)),
  HttpRouter.get("/connections", handled(listConnections)),
  HttpRouter.del("/connections/:app", handled(disconnect)),
  HttpRouter.post("/mcp", handled(mcp)),
  HttpRouter.get("/mcp", handled(mcp)),
  HttpRouter.del("/mcp", handled(mcp)),
  HttpRouter.post("/mcp/:app_slug", handled(mcp)),
  HttpRouter.get("/mcp/:app_slug", handled(mcp)),
  HttpRouter.del("/mcp/:app_slug", handled(mcp))
)

const ToolApp = ToolRouter.pipe(Effect.catchTag("RouteNotFound", () => notFound))

export const ToolListenerLive = Layer.mergeAll(HttpServer.serve(ToolApp), recordAddress("tools")).pipe(
  Layer.provide(drainingServerLayer({
    port: Config.integer("MCP_PORT").pipe(Config.withDefault(8081)),
    host
  }))
)

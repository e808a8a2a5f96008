// Bearer authentication for every API route: resolves the key through KeyAuth and provides
// the caller as CurrentPrincipal; tags the request span with the tenant ids. Before any route
// but inference itself, it waits for the caller's queued settlements (Settlements), so reads
// (budgets, wallet, logs) always include the caller's finished calls; a write drops the
// platform's cached admission state (AdmissionCache) once it has answered.
import { HttpApiMiddleware, HttpApiSecurity, HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Schema } from "effect"
import { CurrentPrincipal, KeyAuth, type Principal } from "../../layers/access/KeyAuth.js"
import { Forbidden, Unauthorized } from "../../schemas/Errors.js"
import { makeReadYourWrites } from "./Consistency.js"
import { annotateCurrentSpan } from "../../layers/lib/CurrentSpan.js"

/** Inference itself: admission counts queued settlements exactly, without waiting. */
const INFERENCE_ROUTES = new Set(["/v1/chat/completions", "/v1/responses"])

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("gateway/Authentication", {
  failure: Schema.Union(Unauthorized.Http, Forbidden.Http),
  provides: CurrentPrincipal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const keyAuth = yield* KeyAuth
    const readYourWrites = yield* makeReadYourWrites
    /** Inference counts queued settlements itself; every other route reads its own writes. */
    const consistent = (principal: Principal, method: string, url: string) =>
      method === "POST" && INFERENCE_ROUTES.has(url.split("?")[0]!)
        ? Effect.void
        : readYourWrites(
          { platformId: principal._tag === "Admin" ? undefined : principal.platformId },
          method !== "GET" && method !== "HEAD"
        )
    return {
      // The raw header is read again so a malformed one (not "Bearer <key>") is told apart.
      // One generator for every request (a generator function made per call would keep each
      // request's closure alive until a full collection: hot-path rule "no hidden class per call").
      bearer: Effect.fnUntraced(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const principal = yield* keyAuth.authenticate(request.headers.authorization)
        if (principal._tag !== "Admin") {
          yield* annotateCurrentSpan({
            "platform.id": principal.platformId,
            ...(principal._tag === "EndUserKey" ? { "end_user.id": principal.endUserId } : {})
          })
        }
        yield* consistent(principal, request.method, request.url)
        return principal
      })
    }
  })
)

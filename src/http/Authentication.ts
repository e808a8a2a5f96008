// Bearer authentication for every API route: resolves the key through KeyAuth and provides
// the caller as CurrentPrincipal; tags the request span with the tenant ids. Before any route
// but inference itself, it waits for the caller's queued settlements (Settlements), so reads
// (budgets, wallet, logs) always include the caller's finished calls; a write drops the
// platform's cached admission state (AdmissionCache) once it has answered.
import { HttpApiMiddleware, HttpApiSecurity, HttpApp, HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Schema } from "effect"
import { Forbidden, Unauthorized } from "../../schemas/Errors.js"
import { CurrentPrincipal, KeyAuth, type Principal } from "../../layers/KeyAuth.js"
import { AdmissionCache } from "../../layers/AdmissionCache.js"
import { Settlements } from "../../layers/Settlements.js"

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
    const settlements = yield* Settlements
    const admissionCache = yield* AdmissionCache
    /** Reads see the caller's finished calls; writes drop the cached admission state they change. */
    const consistent = (principal: Principal, method: string, url: string) => {
      if (method === "POST" && INFERENCE_ROUTES.has(url.split("?")[0]!)) return Effect.void
      const platformId = principal._tag === "Admin" ? undefined : principal.platformId
      const invalidate = method === "GET" || method === "HEAD"
        ? Effect.void
        : HttpApp.appendPreResponseHandler((_request, response) => Effect.as(admissionCache.invalidate(platformId), response))
      const settled = platformId === undefined ? settlements.awaitEverything() : settlements.awaitPlatform(platformId)
      return Effect.zipRight(settled, invalidate)
    }
    return {
      // The raw header is read again so a malformed one (not "Bearer <key>") is told apart.
      bearer: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const principal = yield* keyAuth.authenticate(request.headers.authorization)
          if (principal._tag !== "Admin") {
            yield* Effect.annotateCurrentSpan("platform.id", principal.platformId)
            if (principal._tag === "EndUserKey") yield* Effect.annotateCurrentSpan("end_user.id", principal.endUserId)
          }
          yield* consistent(principal, request.method, request.url)
          return principal
        })
    }
  })
)

// Bearer authentication for every API route: resolves the key through KeyAuth and provides
// the caller as CurrentPrincipal; tags the request span with the tenant ids.
import { HttpApiMiddleware, HttpApiSecurity, HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Schema } from "effect"
import { Forbidden, Unauthorized } from "../../schemas/Errors.js"
import { CurrentPrincipal, KeyAuth } from "../../layers/KeyAuth.js"

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("gateway/Authentication", {
  failure: Schema.Union(Unauthorized.Http, Forbidden.Http),
  provides: CurrentPrincipal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const keyAuth = yield* KeyAuth
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
          return principal
        })
    }
  })
)

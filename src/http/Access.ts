// Who may call what: the operator plane, the platform plane (own platform only), end-user routes.
import { Effect } from "effect"
import { Forbidden, NotFound } from "../../schemas/Errors.js"
import { CurrentPrincipal, type EndUserPrincipal, type PlatformPrincipal } from "../../layers/access/KeyAuth.js"

/** Operator endpoints: only the admin key. */
export const requireAdmin = Effect.gen(function*() {
  const principal = yield* CurrentPrincipal
  if (principal._tag !== "Admin") {
    return yield* new Forbidden({ code: "forbidden", message: "This endpoint needs the operator (sk-admin_) key" })
  }
})

/**
 * Platform endpoints: a platform key of that very platform. Another tenant's platform id is
 * "not found" (no tenant enumeration); an end-user or operator key is forbidden.
 */
export const requirePlatform = Effect.fnUntraced(function*(platformId: string) {
  const principal = yield* CurrentPrincipal
  if (principal._tag !== "PlatformKey") {
    return yield* new Forbidden({
      code: "forbidden",
      message: principal._tag === "EndUserKey"
        ? "End-user keys cannot call management endpoints; use a platform key"
        : "The operator key cannot act for a platform; use a platform key"
    })
  }
  if (principal.platformId !== platformId) {
    return yield* new NotFound({ code: "not_found", message: "No such platform" })
  }
  return principal satisfies PlatformPrincipal
})

/** Routes about the caller's own platform (GET /v1/platform): any platform key. */
export const requirePlatformKey = Effect.gen(function*() {
  const principal = yield* CurrentPrincipal
  if (principal._tag !== "PlatformKey") {
    return yield* new Forbidden({ code: "forbidden", message: "This endpoint needs a platform (sk-plat_) key" })
  }
  return principal satisfies PlatformPrincipal
})

/** Self-service routes (/v1/me/*): end-user keys only. */
export const requireEndUser = Effect.gen(function*() {
  const principal = yield* CurrentPrincipal
  if (principal._tag !== "EndUserKey") {
    return yield* new Forbidden({ code: "forbidden", message: "This endpoint needs an end-user (sk-eu_) key" })
  }
  return principal satisfies EndUserPrincipal
})

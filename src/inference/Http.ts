// Handlers of the runtime endpoints.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentPrincipal } from "../../layers/KeyAuth.js"
import { ModelCatalog } from "../../layers/ModelCatalog.js"
import { Forbidden } from "../../schemas/Errors.js"
import { GatewayApi } from "../http/Api.js"

/** Runtime routes: platform and end-user keys; the operator key has no platform. */
const runtimePrincipal = Effect.gen(function*() {
  const principal = yield* CurrentPrincipal
  if (principal._tag === "Admin") {
    return yield* new Forbidden({ code: "forbidden", message: "Use a platform or end-user key" })
  }
  return principal
})

export const InferenceLive = HttpApiBuilder.group(GatewayApi, "inference", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* ModelCatalog
    return handlers.handle("listModels", () =>
      Effect.gen(function*() {
        const principal = yield* runtimePrincipal
        const models = yield* catalog.visibleModels(principal.platformId)
        return {
          object: "list" as const,
          data: models.map((m) => ({
            id: m.slug,
            object: "model" as const,
            created: Math.floor(m.created_at.getTime() / 1000),
            owned_by: m.owned_by
          }))
        }
      }))
  }))

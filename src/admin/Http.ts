// Handlers of the operator plane.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Platforms } from "../../layers/Platforms.js"
import { requireAdmin } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

export const AdminLive = HttpApiBuilder.group(GatewayApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const platforms = yield* Platforms
    return handlers
      .handle("createPlatform", ({ payload }) => requireAdmin.pipe(Effect.zipRight(platforms.create(payload))))
      .handle("listPlatforms", ({ urlParams }) => requireAdmin.pipe(Effect.zipRight(platforms.list(urlParams))))
      .handle("getPlatform", ({ path }) => requireAdmin.pipe(Effect.zipRight(platforms.get(path.platformId))))
  }))

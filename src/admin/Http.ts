// Handlers of the operator plane.
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ModelCatalog } from "../../layers/ModelCatalog.js"
import { PlatformWallet } from "../../layers/PlatformWallet.js"
import { Platforms } from "../../layers/Platforms.js"
import { requireAdmin } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

export const AdminLive = HttpApiBuilder.group(GatewayApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const platforms = yield* Platforms
    const catalog = yield* ModelCatalog
    const wallet = yield* PlatformWallet
    return handlers
      .handle("createPlatform", ({ payload }) => requireAdmin.pipe(Effect.zipRight(platforms.create(payload))))
      .handle("listPlatforms", ({ urlParams }) => requireAdmin.pipe(Effect.zipRight(platforms.list(urlParams))))
      .handle("getPlatform", ({ path }) => requireAdmin.pipe(Effect.zipRight(platforms.get(path.platformId))))
      .handle("upsertProvider", ({ payload }) => requireAdmin.pipe(Effect.zipRight(catalog.upsertProvider(payload))))
      .handle("listProviders", () => requireAdmin.pipe(Effect.zipRight(Effect.map(catalog.listProviders, (data) => ({ data })))))
      .handle("upsertModel", ({ payload }) => requireAdmin.pipe(Effect.zipRight(catalog.upsertModel(payload))))
      .handle("listModels", () => requireAdmin.pipe(Effect.zipRight(Effect.map(catalog.listModels, (data) => ({ data })))))
      .handle("topupPlatformWallet", ({ path, payload }) =>
        requireAdmin.pipe(
          Effect.zipRight(platforms.get(path.platformId)),
          Effect.zipRight(wallet.topup(path.platformId, payload.amount_usd, payload.reason ?? null))
        ))
  }))

// Handlers of the operator plane.
import { HttpApiBuilder } from "@effect/platform"
import { PgClient } from "@effect/sql-pg"
import { Effect, Schema } from "effect"
import { Idempotency } from "../../layers/platform/Idempotency.js"
import { ModelCatalog } from "../../layers/tenancy/ModelCatalog.js"
import { PlatformWallet } from "../../layers/ledger/PlatformWallet.js"
import { InferenceLogs } from "../../layers/ledger/InferenceLogs.js"
import { Usage } from "../../layers/ledger/Usage.js"
import { Platforms } from "../../layers/tenancy/Platforms.js"
import { PlatformWallet as WalletView, WalletTopup } from "../../schemas/Catalog.js"
import { requireAdmin } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"

export const AdminLive = HttpApiBuilder.group(GatewayApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const platforms = yield* Platforms
    const logs = yield* InferenceLogs
    const usage = yield* Usage
    const catalog = yield* ModelCatalog
    const wallet = yield* PlatformWallet
    const idempotency = yield* Idempotency
    const sql = yield* PgClient.PgClient
    return handlers
      .handle("createPlatform", ({ payload }) => requireAdmin.pipe(Effect.zipRight(platforms.create(payload))))
      .handle("listPlatforms", ({ urlParams }) => requireAdmin.pipe(Effect.zipRight(platforms.list(urlParams))))
      .handle("listSettlementFailures", ({ urlParams }) =>
        requireAdmin.pipe(Effect.zipRight(logs.list(null, { ...urlParams, billing_status: "failed" }))))
      .handle("getUsage", ({ urlParams: { platform_id, ...query } }) =>
        requireAdmin.pipe(Effect.zipRight(usage.forOperator(platform_id, query))))
      .handle("getPlatform", ({ path }) => requireAdmin.pipe(Effect.zipRight(platforms.get(path.platformId))))
      .handle("upsertProvider", ({ payload }) => requireAdmin.pipe(Effect.zipRight(catalog.upsertProvider(payload))))
      .handle("listProviders", () => requireAdmin.pipe(Effect.zipRight(Effect.map(catalog.listProviders, (data) => ({ data })))))
      .handle("upsertModel", ({ payload }) => requireAdmin.pipe(Effect.zipRight(catalog.upsertModel(payload))))
      .handle("listModels", () => requireAdmin.pipe(Effect.zipRight(Effect.map(catalog.listModels, (data) => ({ data })))))
      // Idempotency-Key: the key claim (or replay of the stored answer) and the credit run in one
      // transaction, so a key credits at most once however many copies arrive at once.
      .handle("topupPlatformWallet", ({ headers, path, payload }) =>
        Effect.gen(function*() {
          yield* requireAdmin
          yield* platforms.get(path.platformId)
          const canonicalBody = yield* Schema.encode(WalletTopup)(payload).pipe(Effect.orDie)
          const result = yield* idempotency.once(
            { platformId: path.platformId, operation: "platform_wallet.topup", target: path.platformId },
            headers["idempotency-key"],
            canonicalBody,
            WalletView,
            wallet.topup(path.platformId, payload.amount_usd, payload.reason ?? null)
          )
          return result.value
        }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die)))
  }))

// Handlers of the platform plane: thin, each checks the caller's platform then calls a service.
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, Schema } from "effect"
import { ApiKeys } from "../../layers/tenancy/ApiKeys.js"
import { actorOf } from "../../layers/ledger/BudgetLedger.js"
import { EndUsers } from "../../layers/tenancy/EndUsers.js"
import { InferenceLogs } from "../../layers/ledger/InferenceLogs.js"
import { PlatformWallet } from "../../layers/ledger/PlatformWallet.js"
import { Platforms } from "../../layers/tenancy/Platforms.js"
import { Usage } from "../../layers/ledger/Usage.js"
import { ProviderKeys } from "../../layers/tenancy/ProviderKeys.js"
import { RateLimitSettings } from "../../layers/tenancy/RateLimitSettings.js"
import { requirePlatform, requirePlatformKey } from "../http/Access.js"
import { GatewayApi } from "../http/Api.js"
import { EndUserReturned } from "./Api.js"

export const PlatformsLive = HttpApiBuilder.group(GatewayApi, "platforms", (handlers) =>
  Effect.gen(function*() {
    const platforms = yield* Platforms
    const providerKeys = yield* ProviderKeys
    const wallet = yield* PlatformWallet
    const logs = yield* InferenceLogs
    const usage = yield* Usage
    return handlers
      .handle("getOwnPlatform", () =>
        requirePlatformKey.pipe(Effect.flatMap((principal) => platforms.get(principal.platformId))))
      .handle("getPlatform", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(platforms.get(path.platformId))))
      .handle("updatePlatform", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(platforms.update(path.platformId, payload))))
      .handle("putProviderKey", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(providerKeys.put(path.platformId, path.provider, payload.api_key))))
      .handle("getProviderKey", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(providerKeys.get(path.platformId, path.provider))))
      .handle("deleteProviderKey", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(providerKeys.remove(path.platformId, path.provider))))
      .handle("getPlatformWallet", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(wallet.get(path.platformId))))
      .handle("listPlatformWalletTransactions", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(wallet.transactions(path.platformId, urlParams))))
      .handle("listLogs", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(logs.list(path.platformId, urlParams))))
      .handle("getUsage", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(usage.forPlatform(path.platformId, urlParams))))
  }))

export const ApiKeysLive = HttpApiBuilder.group(GatewayApi, "apiKeys", (handlers) =>
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    return handlers
      .handle("listApiKeys", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(apiKeys.list(path.platformId, urlParams))))
      .handle("createApiKey", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(apiKeys.create(path.platformId, {
          endUserId: payload.end_user_id,
          name: payload.name,
          scopes: payload.scopes,
          expiresAt: payload.expires_at
        }))))
      .handle("getApiKey", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(apiKeys.get(path.platformId, path.keyId))))
      .handle("updateApiKey", ({ path, payload, urlParams }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(apiKeys.update(path.platformId, path.keyId, urlParams.type, payload))
        ))
      .handle("deleteApiKey", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(apiKeys.remove(path.platformId, path.keyId, urlParams.type))))
  }))

export const EndUsersLive = HttpApiBuilder.group(GatewayApi, "endUsers", (handlers) =>
  Effect.gen(function*() {
    const endUsers = yield* EndUsers
    const limits = yield* RateLimitSettings
    return handlers
      .handle("listEndUsers", ({ path, urlParams }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endUsers.list(path.platformId, urlParams))))
      .handle("createEndUser", ({ path, payload }) =>
        Effect.gen(function*() {
          const principal = yield* requirePlatform(path.platformId)
          const result = yield* endUsers.create(path.platformId, payload, actorOf(principal))
          const body = { ...result.user, api_key: result.apiKey, budget: result.budget }
          if (result.created) return body
          // A repeat external_id: same body, status 200 (the declared 201 schema would win the union).
          const encoded = yield* Schema.encode(EndUserReturned)(body).pipe(Effect.orDie)
          return yield* HttpServerResponse.json(encoded, { status: 200 }).pipe(Effect.orDie)
        }))
      .handle("getEndUser", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endUsers.get(path.platformId, path.endUserId))))
      .handle("updateEndUser", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(endUsers.update(path.platformId, path.endUserId, payload))
        ))
      .handle("deleteEndUser", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(endUsers.remove(path.platformId, path.endUserId))))
      .handle("putRateLimits", ({ path, payload }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(limits.put(path.platformId, path.endUserId, payload))))
      .handle("getRateLimits", ({ path }) =>
        requirePlatform(path.platformId).pipe(
          Effect.zipRight(endUsers.get(path.platformId, path.endUserId)),
          Effect.zipRight(limits.effective(path.platformId, path.endUserId))
        ))
      .handle("deleteRateLimits", ({ path }) =>
        requirePlatform(path.platformId).pipe(Effect.zipRight(limits.remove(path.platformId, path.endUserId))))
  }))

// Platform plane: the platform record, its API keys and its end users (platform keys only).
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"
import {
  ApiKey,
  ApiKeyCreated,
  CreateApiKey,
  KeyTypeParam,
  ListApiKeysParams,
  UpdateApiKey
} from "../../schemas/ApiKeys.js"
import { BackfillParams, Paginated, PathId } from "../../schemas/Common.js"
import {
  CreateEndUser,
  EndUser,
  EndUserCreated,
  ListEndUsersParams,
  UpdateEndUser
} from "../../schemas/EndUsers.js"
import {
  EffectiveRateLimits,
  PlatformWallet,
  PlatformWalletTransactions,
  ProviderKey,
  PutProviderKey,
  RateLimitOverride
} from "../../schemas/Catalog.js"
import { InferenceLogEntry, ListLogsParams } from "../../schemas/Logs.js"
import { Platform, UpdatePlatform } from "../../schemas/Platforms.js"
import { UsageParams, UsageReport } from "../../schemas/Usage.js"
import { Authentication } from "../http/Authentication.js"

const PlatformPath = Schema.Struct({ platformId: PathId })
const KeyPath = Schema.Struct({ platformId: PathId, keyId: PathId })
const EndUserPath = Schema.Struct({ platformId: PathId, endUserId: PathId })
const ProviderKeyPath = Schema.Struct({ platformId: PathId, provider: Schema.String })

/** Same shape as EndUserCreated, answered with 200 when the external_id already existed. */
export const EndUserReturned = Schema.Struct(EndUserCreated.fields).annotations({
  description: "The existing end user (same external_id) with a fresh key"
})

export class PlatformsGroup extends HttpApiGroup.make("platforms")
  // A platform key's own platform: how a client holding only the key (the console) learns its id.
  .add(HttpApiEndpoint.get("getOwnPlatform", "/platform").addSuccess(Platform))
  .add(HttpApiEndpoint.get("getPlatform", "/platforms/:platformId").setPath(PlatformPath).addSuccess(Platform))
  .add(
    HttpApiEndpoint.patch("updatePlatform", "/platforms/:platformId")
      .setPath(PlatformPath)
      .setPayload(UpdatePlatform)
      .addSuccess(Platform)
  )
  .add(
    HttpApiEndpoint.put("putProviderKey", "/platforms/:platformId/provider-keys/:provider")
      .setPath(ProviderKeyPath)
      .setPayload(PutProviderKey)
      .addSuccess(ProviderKey)
  )
  .add(HttpApiEndpoint.get("getProviderKey", "/platforms/:platformId/provider-keys/:provider").setPath(ProviderKeyPath).addSuccess(ProviderKey))
  .add(
    HttpApiEndpoint.del("deleteProviderKey", "/platforms/:platformId/provider-keys/:provider")
      .setPath(ProviderKeyPath)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .add(HttpApiEndpoint.get("getPlatformWallet", "/platforms/:platformId/platform-wallet").setPath(PlatformPath).addSuccess(PlatformWallet))
  .add(
    HttpApiEndpoint.get("listPlatformWalletTransactions", "/platforms/:platformId/platform-wallet/transactions")
      .setPath(PlatformPath)
      .setUrlParams(BackfillParams)
      .addSuccess(PlatformWalletTransactions)
  )
  .add(
    HttpApiEndpoint.get("listLogs", "/platforms/:platformId/logs")
      .setPath(PlatformPath)
      .setUrlParams(ListLogsParams)
      .addSuccess(Paginated(InferenceLogEntry))
  )
  .add(
    HttpApiEndpoint.get("getUsage", "/platforms/:platformId/usage")
      .setPath(PlatformPath)
      .setUrlParams(UsageParams)
      .addSuccess(UsageReport)
  )
  .middleware(Authentication)
  .prefix("/v1") {}

export class ApiKeysGroup extends HttpApiGroup.make("apiKeys")
  .add(
    HttpApiEndpoint.get("listApiKeys", "/platforms/:platformId/api-keys")
      .setPath(PlatformPath)
      .setUrlParams(ListApiKeysParams)
      .addSuccess(Paginated(ApiKey))
  )
  .add(
    HttpApiEndpoint.post("createApiKey", "/platforms/:platformId/api-keys")
      .setPath(PlatformPath)
      .setPayload(CreateApiKey)
      .addSuccess(ApiKeyCreated, { status: 201 })
  )
  .add(HttpApiEndpoint.get("getApiKey", "/platforms/:platformId/api-keys/:keyId").setPath(KeyPath).addSuccess(ApiKey))
  .add(
    HttpApiEndpoint.patch("updateApiKey", "/platforms/:platformId/api-keys/:keyId")
      .setPath(KeyPath)
      .setUrlParams(KeyTypeParam)
      .setPayload(UpdateApiKey)
      .addSuccess(ApiKey)
  )
  .add(
    HttpApiEndpoint.del("deleteApiKey", "/platforms/:platformId/api-keys/:keyId")
      .setPath(KeyPath)
      .setUrlParams(KeyTypeParam)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .middleware(Authentication)
  .prefix("/v1") {}

export class EndUsersGroup extends HttpApiGroup.make("endUsers")
  .add(
    HttpApiEndpoint.get("listEndUsers", "/platforms/:platformId/end-users")
      .setPath(PlatformPath)
      .setUrlParams(ListEndUsersParams)
      .addSuccess(Paginated(EndUser))
  )
  .add(
    HttpApiEndpoint.post("createEndUser", "/platforms/:platformId/end-users")
      .setPath(PlatformPath)
      .setPayload(CreateEndUser)
      .addSuccess(EndUserCreated, { status: 201 })
      .addSuccess(EndUserReturned, { status: 200 })
  )
  .add(
    HttpApiEndpoint.get("getEndUser", "/platforms/:platformId/end-users/:endUserId")
      .setPath(EndUserPath)
      .addSuccess(EndUser)
  )
  .add(
    HttpApiEndpoint.patch("updateEndUser", "/platforms/:platformId/end-users/:endUserId")
      .setPath(EndUserPath)
      .setPayload(UpdateEndUser)
      .addSuccess(EndUser)
  )
  .add(
    HttpApiEndpoint.del("deleteEndUser", "/platforms/:platformId/end-users/:endUserId")
      .setPath(EndUserPath)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .add(
    HttpApiEndpoint.put("putRateLimits", "/platforms/:platformId/end-users/:endUserId/rate-limits")
      .setPath(EndUserPath)
      .setPayload(RateLimitOverride)
      .addSuccess(EffectiveRateLimits)
  )
  .add(
    HttpApiEndpoint.get("getRateLimits", "/platforms/:platformId/end-users/:endUserId/rate-limits")
      .setPath(EndUserPath)
      .addSuccess(EffectiveRateLimits)
  )
  .add(
    HttpApiEndpoint.del("deleteRateLimits", "/platforms/:platformId/end-users/:endUserId/rate-limits")
      .setPath(EndUserPath)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .middleware(Authentication)
  .prefix("/v1") {}

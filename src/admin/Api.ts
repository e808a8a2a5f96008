// Operator plane: creating and reading platforms (docs/api.md, "Operator"). Admin key only.
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Schema } from "effect"
import { IdempotencyHeaders, Pagination, Paginated, PathId } from "../../schemas/Common.js"
import { Conflict } from "../../schemas/Errors.js"
import { ModelConfig, ModelInput, PlatformWallet, Provider, ProviderInput, WalletTopup } from "../../schemas/Catalog.js"
import { CreatePlatform, Platform, PlatformCreated } from "../../schemas/Platforms.js"
import { InferenceLogEntry } from "../../schemas/Logs.js"
import { AdminUsageParams, UsageReport } from "../../schemas/Usage.js"
import { Authentication } from "../http/Authentication.js"

export class AdminGroup extends HttpApiGroup.make("admin")
  .add(
    HttpApiEndpoint.post("createPlatform", "/admin/platforms")
      .setPayload(CreatePlatform)
      .addSuccess(PlatformCreated, { status: 201 })
  )
  .add(
    HttpApiEndpoint.get("listPlatforms", "/admin/platforms")
      .setUrlParams(Pagination)
      .addSuccess(Paginated(Platform))
  )
  .add(
    // Calls of every platform whose settlement failed after its retries (billing_status failed).
    HttpApiEndpoint.get("listSettlementFailures", "/admin/settlement-failures")
      .setUrlParams(Pagination)
      .addSuccess(Paginated(InferenceLogEntry))
  )
  .add(
    // Usage of every platform (or of `platform_id`), as GET /v1/platforms/{pid}/usage reports one.
    HttpApiEndpoint.get("getUsage", "/admin/usage")
      .setUrlParams(AdminUsageParams)
      .addSuccess(UsageReport)
  )
  .add(
    HttpApiEndpoint.get("getPlatform", "/admin/platforms/:platformId")
      .setPath(Schema.Struct({ platformId: PathId }))
      .addSuccess(Platform)
  )
  .add(HttpApiEndpoint.post("upsertProvider", "/admin/providers").setPayload(ProviderInput).addSuccess(Provider))
  .add(HttpApiEndpoint.get("listProviders", "/admin/providers").addSuccess(Schema.Struct({ data: Schema.Array(Provider) })))
  .add(HttpApiEndpoint.post("upsertModel", "/admin/models").setPayload(ModelInput).addSuccess(ModelConfig))
  .add(HttpApiEndpoint.get("listModels", "/admin/models").addSuccess(Schema.Struct({ data: Schema.Array(ModelConfig) })))
  .add(
    HttpApiEndpoint.post("topupPlatformWallet", "/admin/platforms/:platformId/platform-wallet/topup")
      .setPath(Schema.Struct({ platformId: PathId }))
      .setHeaders(IdempotencyHeaders)
      .setPayload(WalletTopup)
      .addSuccess(PlatformWallet)
      .addError(Conflict.Http)
  )
  .middleware(Authentication)
  .prefix("/v1") {}

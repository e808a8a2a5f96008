// The gateway's HTTP API: every group, and the errors any route may answer.
import { HttpApi, OpenApi } from "@effect/platform"
import {
  BadRequest,
  Forbidden,
  InternalError,
  NotFound,
  PayloadTooLarge,
  ServiceUnavailable,
  Unauthorized,
  UnsupportedMediaType,
  ValidationError
} from "../../schemas/Errors.js"
import { AdminGroup } from "../admin/Api.js"
import { BudgetsGroup } from "../budgets/Api.js"
import { CapabilitiesGroup } from "../capabilities/Api.js"
import { InferenceGroup } from "../inference/Api.js"
import { ApiKeysGroup, EndUsersGroup, PlatformsGroup } from "../management/Api.js"
import { ToolsGroup } from "../tools/Api.js"
import { WebhooksGroup } from "../webhooks/Api.js"

export class GatewayApi extends HttpApi.make("gateway")
  .add(InferenceGroup)
  .add(AdminGroup)
  .add(PlatformsGroup)
  .add(ApiKeysGroup)
  .add(EndUsersGroup)
  .add(BudgetsGroup)
  .add(WebhooksGroup)
  .add(ToolsGroup)
  .add(CapabilitiesGroup)
  .addError(BadRequest.Http)
  .addError(Unauthorized.Http)
  .addError(Forbidden.Http)
  .addError(NotFound.Http)
  .addError(PayloadTooLarge.Http)
  .addError(UnsupportedMediaType.Http)
  .addError(ValidationError.Http)
  .addError(InternalError.Http)
  .addError(ServiceUnavailable.Http)
  .annotate(OpenApi.Title, "Model gateway")
  .annotate(OpenApi.Version, "0.1.0")
  .annotate(OpenApi.Description, "Multi-tenant model gateway: platforms, keys, end users, budgets, inference.") {}

// Runtime endpoints callable with platform or end-user keys: the model list and one model, chat
// completions, responses (JSON or SSE) and the caller's stored responses (read, input items,
// delete), and the caller's own rate limits.
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { EffectiveRateLimits, Model, ModelList, ModelPath } from "../../schemas/Catalog.js"
import { ChatCompletion, ChatRequestBody } from "../../schemas/Chat.js"
import {
  DeletedResponse,
  InputItemList,
  InputItemsQuery,
  ResponseObject,
  ResponsesRequest,
  StoredResponsePath
} from "../../schemas/Responses.js"
import { MyBudget } from "../../schemas/Wallet.js"
import { BadGateway, GatewayTimeout, PaymentRequired, RateLimited } from "../../schemas/Errors.js"
import { Authentication } from "../http/Authentication.js"

export class InferenceGroup extends HttpApiGroup.make("inference")
  .add(HttpApiEndpoint.get("listModels", "/models").addSuccess(ModelList))
  .add(HttpApiEndpoint.get("retrieveModel", "/models/:model").setPath(ModelPath).addSuccess(Model))
  .add(HttpApiEndpoint.get("getMyRateLimits", "/me/rate-limits").addSuccess(EffectiveRateLimits))
  .add(HttpApiEndpoint.get("getMyBudget", "/me/budget").addSuccess(MyBudget))
  .add(
    HttpApiEndpoint.post("createChatCompletion", "/chat/completions")
      .setPayload(ChatRequestBody)
      .addSuccess(ChatCompletion)
      .addError(PaymentRequired.Http)
      .addError(RateLimited.Http)
      .addError(BadGateway.Http)
      .addError(GatewayTimeout.Http)
  )
  .add(
    HttpApiEndpoint.post("createResponse", "/responses")
      .setPayload(ResponsesRequest)
      .addSuccess(ResponseObject)
      .addError(PaymentRequired.Http)
      .addError(RateLimited.Http)
      .addError(BadGateway.Http)
      .addError(GatewayTimeout.Http)
  )
  .add(HttpApiEndpoint.get("retrieveResponse", "/responses/:responseId").setPath(StoredResponsePath).addSuccess(ResponseObject))
  .add(HttpApiEndpoint.del("deleteResponse", "/responses/:responseId").setPath(StoredResponsePath).addSuccess(DeletedResponse))
  .add(
    HttpApiEndpoint.get("listResponseInputItems", "/responses/:responseId/input_items")
      .setPath(StoredResponsePath)
      .setUrlParams(InputItemsQuery)
      .addSuccess(InputItemList)
  )
  .middleware(Authentication)
  .prefix("/v1") {}

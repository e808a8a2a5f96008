// Runtime endpoints callable with platform or end-user keys: the model list (chat completions
// and responses join here).
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { ModelList } from "../../schemas/Catalog.js"
import { Authentication } from "../http/Authentication.js"

export class InferenceGroup extends HttpApiGroup.make("inference")
  .add(HttpApiEndpoint.get("listModels", "/models").addSuccess(ModelList))
  .middleware(Authentication)
  .prefix("/v1") {}

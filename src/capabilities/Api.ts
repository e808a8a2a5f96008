// Capabilities endpoints: browsing the shelf (any platform or end-user key), search and run (end-user
// key with the inference scope), and the operator's catalog upsert.
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Schema } from "effect"
import {
  CapabilityDetail,
  CapabilityList,
  CatalogEntry,
  CatalogUpserted,
  ProviderQuery,
  RunRequest,
  RunResponse,
  SearchRequest,
  SearchResponse
} from "../../schemas/Capabilities.js"
import { PaymentRequired } from "../../schemas/Errors.js"
import { Authentication } from "../http/Authentication.js"

export class CapabilitiesGroup extends HttpApiGroup.make("capabilities")
  .add(HttpApiEndpoint.get("listCapabilities", "/capabilities").addSuccess(CapabilityList))
  .add(
    HttpApiEndpoint.get("getCapability", "/capabilities/:slug")
      .setPath(Schema.Struct({ slug: Schema.String }))
      .setUrlParams(ProviderQuery)
      .addSuccess(CapabilityDetail)
  )
  .add(HttpApiEndpoint.post("searchCapabilities", "/capabilities/search").setPayload(SearchRequest).addSuccess(SearchResponse))
  .add(
    HttpApiEndpoint.post("runCapability", "/capabilities/run")
      .setPayload(RunRequest)
      .addSuccess(RunResponse)
      .addError(PaymentRequired.Http)
  )
  .add(HttpApiEndpoint.post("upsertCapabilityProviders", "/admin/capabilities/providers").setPayload(CatalogEntry).addSuccess(CatalogUpserted))
  .middleware(Authentication)
  .prefix("/v1") {}

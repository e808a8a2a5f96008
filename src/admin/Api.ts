// Operator plane: creating and reading platforms (DESIGN.md section 4). Admin key only.
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Schema } from "effect"
import { Pagination, Paginated, PathId } from "../../schemas/Common.js"
import { CreatePlatform, Platform, PlatformCreated } from "../../schemas/Platforms.js"
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
    HttpApiEndpoint.get("getPlatform", "/admin/platforms/:platformId")
      .setPath(Schema.Struct({ platformId: PathId }))
      .addSuccess(Platform)
  )
  .middleware(Authentication)
  .prefix("/v1") {}

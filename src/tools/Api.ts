// Tool-app endpoints on the API host: app activation (platform key) and /v1/me/mcp-config
// (end-user key). SKELETON: being implemented.
import { HttpApiGroup } from "@effect/platform"
import { Authentication } from "../http/Authentication.js"

export class ToolsGroup extends HttpApiGroup.make("tools").middleware(Authentication).prefix("/v1") {}

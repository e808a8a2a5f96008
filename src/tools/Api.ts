// Tool-app endpoints on the API host: app activation and its listing (platform key) and /v1/me/mcp-config
// (end-user key). The tool service itself (OAuth, MCP) lives on its own listener (Server.ts).
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Schema } from "effect"
import { PathId } from "../../schemas/Common.js"
import { ActivateToolApp, McpConfig, ToolAppActivation, ToolAppActivations } from "../../schemas/Tools.js"
import { Authentication } from "../http/Authentication.js"

export class ToolsGroup extends HttpApiGroup.make("tools")
  .add(
    HttpApiEndpoint.post("activateToolApp", "/platforms/:platformId/mcp/apps")
      .setPath(Schema.Struct({ platformId: PathId }))
      .setPayload(ActivateToolApp)
      .addSuccess(ToolAppActivation, { status: 201 })
  )
  .add(
    HttpApiEndpoint.get("listToolApps", "/platforms/:platformId/mcp/apps")
      .setPath(Schema.Struct({ platformId: PathId }))
      .addSuccess(ToolAppActivations)
  )
  .add(HttpApiEndpoint.get("getMcpConfig", "/me/mcp-config").addSuccess(McpConfig))
  .middleware(Authentication)
  .prefix("/v1") {}
